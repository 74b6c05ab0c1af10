// Heatmaps of where the error sits in each backend's worst case of a campaign (report.hpp Heatmap).
// Internal to the campaign runner.
#pragma once

#include <vector>

#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/campaign_stats.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {

// One heatmap per backend that ran: its worst case (largest error / tolerance) replayed from the stream, the
// output holding the worst element pooled to at most 24 x 64 cells, each the largest ratio it covers.
std::vector<reports::Heatmap> worst_case_heatmaps(const CampaignOptions& opts, const Selection& sel,
                                                  const Stats& stats);

}  // namespace driftcheck::fuzz
