// `driftcheck merge`: the shards of one campaign (driftcheck fuzz --shard I/N, shard.hpp), each with its own
// journal, folded into the report the unsharded campaign would have written for the same cases: statistics
// added (they merge in any grouping, campaign_stats.hpp), each finding signature kept at its lowest case
// index with that shard's bundle, the shards' selection taken from their journals (so a merge on a machine
// without their GPUs reports them as they ran). docs/CAMPAIGN.md, "Several GPUs and hosts", lists the fields
// that differ from an unsharded run (timings and the command line) and why.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "driftcheck/fuzz/campaign_options.hpp"

namespace driftcheck::fuzz {

struct MergeOptions {
  // Shard directories (holding journal.jsonl) or directories holding shard-I-of-N subdirectories.
  std::vector<std::filesystem::path> dirs;
  std::filesystem::path out_dir;       // report.json, report.md and findings/<id>/; must be new or empty
  std::string command_line;            // recorded in the report
  std::ostream* log = nullptr;         // summary and warnings (nullptr: silent)
  const Registry* backends = nullptr;  // nullptr: the built-in registry()
  // The known findings the shards reported apart (fuzz --known-findings); nullptr: the built-in list.
  const KnownFindings* known_findings = nullptr;
};

// Throws UsageError (missing, duplicate or mismatched shards, an unfinished shard, an out_dir in use) or
// JournalError (a journal that cannot be read). The result's exit code follows `fuzz`'s.
CampaignResult merge_campaigns(const MergeOptions& options);

}  // namespace driftcheck::fuzz
