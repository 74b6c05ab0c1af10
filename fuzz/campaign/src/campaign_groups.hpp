// Findings grouped by cause (docs/CAMPAIGN.md "Finding groups"). A group is one backend, one verdict and the
// smallest set of case features (features.hpp) that still fails: the grouping phase shrinks one finding,
// then removes each remaining feature in turn (ablation) and keeps the removal whenever the failure stays, so
// the features left are each needed. Every finding whose drawn case has a group's features is explained by
// it; only findings that no group explains are shrunk. Internal to the campaign runner.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "campaign_shrink.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/campaign_findings.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {

// After discovery, within shrink_budget(opts), on `jobs` threads: per (backend, verdict), the earliest
// finding no group explains is shrunk (each within opts.shrink_seconds_per_finding) and ablated into a new
// group with a representative bundle; classes take turns, so every class gets its first group before any
// gets a second. Stops within one candidate of opts.interrupt, and at the first failed write; a candidate
// still being evaluated opts.grace_seconds after the interrupt is abandoned (PhaseResult::abandoned), its
// thread keeping `owner` (what holds `findings` and `opts`) alive. The findings of `quarantined` backends are
// left as they are (those backends are not run again). A worker fault (crash, timeout) is not shrunk: its
// group is the fault itself, its drawn case run once more alone within the finding's deadline; every
// request of a candidate is bound by that deadline too (CallPolicy), so a hanging worker cannot hold the
// phase beyond its budget.
// Within `limit` too: the phase ends at the earlier of its budget and the limit's deadline, and a finding
// whose case does not fit before it is left ungrouped.
PhaseResult group_phase(Findings& findings, const CampaignOptions& opts, int jobs,
                        std::shared_ptr<const void> owner, const std::set<std::string>& quarantined = {},
                        const PhaseLimit& limit = {});

// Failing cases by finding id: how many, and the worst one's case_ratio and index (Stats::failing and
// failing_worst).
struct FailingCases {
  const std::map<std::string, std::int64_t>& counts;
  const std::map<std::string, std::pair<double, std::uint64_t>>& worst;
};

// One finding's failing cases: how many, and the worst one's case_ratio and index.
struct FailingOf {
  std::int64_t cases;
  double worst_ratio;
  std::uint64_t worst_case;
};
FailingOf failing_of(const reports::FindingReport& r, const FailingCases& failing);

// The report's groups, worst first (reports::worse_group): each finding joins the most specific group of its
// (backend, verdict) whose features its drawn case has (a representative always joins its own group);
// findings no group explains form one unshrunk group per (backend, verdict). A group's count and worst are
// over its members' failing cases.
std::vector<reports::FindingGroup> report_groups(const std::map<std::string, FindingState>& findings,
                                                 const std::vector<GroupDef>& groups,
                                                 const FailingCases& failing);

}  // namespace driftcheck::fuzz
