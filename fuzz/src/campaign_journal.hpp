// The campaign's side of its journal (journal.hpp holds the file format): the header that records the stream,
// the "progress" checkpoints, and what a resumed run takes back from them (docs/CAMPAIGN.md "Resume").
// Internal to the campaign runner.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "campaign_findings.hpp"
#include "campaign_stats.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/journal.hpp"

namespace driftcheck::fuzz {

// The header record's fields (Journal::create adds type, format and version).
nlohmann::json journal_header(const CampaignOptions& opts, const Selection& selection);

// Resume takes the stream-defining arguments from the journal header in opts.out_dir; budgets given now win
// over the old ones. A no-op when the directory holds no journal.
void apply_journal_header(CampaignOptions& opts);

// Every case below `completed` is done, and `stats` are the statistics of exactly those cases.
struct Checkpoint {
  std::uint64_t completed = 0;
  double elapsed_s = 0;  // campaign seconds, resumed segments included
  Stats stats;
};
nlohmann::json progress_record(const Checkpoint& c);

// Folds a resumed journal: returns its last checkpoint and loads every finding and bundle into `findings`.
Checkpoint load_journal(const JournalContents& contents, Findings& findings);

}  // namespace driftcheck::fuzz
