// Journal lines (docs/CAMPAIGN.md "journal.jsonl"): the line reader and the campaign's reading of every
// record (header arguments, findings, bundles, checkpoints with their statistics), as --resume does. Any
// input must be read or rejected with JournalError; anything else (a crash, a sanitizer report, another
// exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "driftcheck/fuzz/campaign_findings.hpp"
#include "driftcheck/fuzz/campaign_journal.hpp"
#include "driftcheck/fuzz/journal.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const JournalContents contents = parse_journal(text, "journal.jsonl");
    if (contents.records.empty()) return 0;
    CampaignOptions opts;
    apply_header(contents.records.front(), opts, "journal.jsonl");
    Findings findings("/nonexistent-driftcheck-fuzz-dir");
    (void)load_journal(contents, "journal.jsonl", findings);
    (void)findings.verify_bundles();  // every bundle is missing: each finding goes back to unbundled
  } catch (const JournalError&) {
  }
  return 0;
}
