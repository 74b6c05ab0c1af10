// Heatmaps of where the error sits in each backend's worst case of a campaign (report.hpp Heatmap).
// Internal to the campaign runner.
#pragma once

#include <vector>

#include "driftcheck/fuzz/budget.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/campaign_stats.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {

// One heatmap per backend that ran: its worst case (largest error / tolerance) replayed from the stream, the
// output holding the worst element pooled to at most 24 x 64 cells, each the largest ratio it covers. The
// cases run on up to `jobs` threads; one whose predicted cost does not fit before the limit's deadline is not
// run, and its backend's heatmap is left out (counted in `left_out`). In the selection's order.
struct Heatmaps {
  std::vector<reports::Heatmap> heatmaps;
  std::int64_t left_out = 0;
};
Heatmaps worst_case_heatmaps(const CampaignOptions& opts, const Selection& sel, const Stats& stats,
                             int jobs = 1, const PhaseLimit& limit = {});

}  // namespace driftcheck::fuzz
