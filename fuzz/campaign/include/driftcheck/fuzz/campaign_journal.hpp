// The campaign's side of its journal (journal.hpp holds the file format): the header that records the stream,
// the "progress" checkpoints, and what a resumed run takes back from them (docs/CAMPAIGN.md "Resume").
// Internal to the campaign runner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/campaign_findings.hpp"
#include "driftcheck/fuzz/campaign_stats.hpp"
#include "driftcheck/fuzz/journal.hpp"

namespace driftcheck::fuzz {

// The header record's fields (Journal::create adds type, format and version).
nlohmann::json journal_header(const CampaignOptions& opts, const Selection& selection);

// Resume takes the stream-defining arguments from the journal header in opts.out_dir; budgets given now win
// over the old ones. A no-op when the directory holds no journal, or one without a complete record. Throws
// JournalError naming the field of a bad header.
void apply_journal_header(CampaignOptions& opts);
// The same from a header record (`name` names the file in errors).
void apply_header(const nlohmann::json& header, CampaignOptions& opts, const std::string& name);

// Every case below `completed` is done except the `deferred` ones (a --seconds campaign's cases that were not
// started because they would have ended past the discovery deadline, or were still running there: --resume
// runs them first), and `stats` are the statistics of exactly the done ones. Indices are the shard's local
// ones.
struct Checkpoint {
  std::uint64_t completed = 0;
  std::vector<std::uint64_t> deferred;  // ascending, each below `completed`
  double elapsed_s = 0;                 // campaign seconds, resumed segments included
  Stats stats;
  std::uint64_t cases() const { return completed - deferred.size(); }  // the cases `stats` count
};
nlohmann::json progress_record(const Checkpoint& c);

// Folds a resumed journal: returns its last checkpoint and loads every finding and bundle into `findings`.
// Throws JournalError naming the file (`name`), the line, the record type and the field of a bad record.
Checkpoint load_journal(const JournalContents& contents, const std::string& name, Findings& findings);

}  // namespace driftcheck::fuzz
