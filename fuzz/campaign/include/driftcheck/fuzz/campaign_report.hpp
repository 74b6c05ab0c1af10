// Building the campaign's report model (reports/report.hpp) from its statistics and findings, and the summary
// printed at the end of `driftcheck fuzz`. Internal to the campaign runner.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/campaign_findings.hpp"
#include "driftcheck/fuzz/campaign_stats.hpp"
#include "driftcheck/fuzz/known_findings.hpp"

namespace driftcheck::fuzz {

struct ReportInputs {
  const CampaignOptions& opts;
  const Selection& selection;
  const Stats& stats;   // of the cases below `cases`
  std::uint64_t cases;  // every case index below it is done
  double seconds;       // campaign time, resumed segments included
  const std::map<std::string, FindingState>& findings;
  const std::vector<std::string>& internal_errors;
  const KnownFindings& known;
  const std::vector<GroupDef>& groups;
  std::vector<reports::Heatmap> heatmaps;
};

// Exit code: 3 with internal errors, 1 with findings or zero-case errors, else 0.
reports::Report build_report(const ReportInputs& in);

// `written`: whether report.json and report.md are on disk; `report_seconds`: how long building and writing
// them took (shown after the phases' times).
void print_summary(const CampaignOptions& opts, const reports::Report& r, bool written,
                   std::optional<double> report_seconds = std::nullopt);

}  // namespace driftcheck::fuzz
