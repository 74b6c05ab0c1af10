// What the Markdown and HTML writers of the campaign report both need to say the same thing. Internal to
// dc_reports.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "driftcheck/reports/report.hpp"

namespace driftcheck::reports {

// The columns of a known finding's row, as both writers show it: id, summary, backends, failing cases (the
// count, "not reproduced" when its backends ran cases without meeting it, or "not run"), cases its backends
// ran, upstream, replay.
inline constexpr std::size_t kKnownColumns = 7;
std::array<std::string, kKnownColumns> known_cells(const KnownFindingReport& k);
// "GQA + fp8 e4m3fn KV", "any case (no feature needed)", "... (not shrunk)"; a worker fault's group: the
// fault and whether it reproduced.
std::string group_cause(const FindingGroup& g);
// Whether a backend's workers faulted (restarts, cases skipped, a quarantine): the reports then show what it
// cost. quarantine_text: why it was quarantined and how many cases that left unjudged.
bool has_worker_faults(const BackendReport& b);
std::string quarantine_text(const BackendReport& b);
// The group's worst case over its members (worst_cell and its case) and its representative's worst element
// (verdict_detail); for an unshrunk group, which records no worst element, its first finding's oracle detail.
std::string group_worst(const FindingGroup& g);
// The backends of one op's divergence matrix, in the report's backend order.
std::vector<std::string> divergence_names(const Report& r, const std::string& op);
// The cell of a pair in either order, or nullptr.
const DivergenceCell* find_divergence(const Report& r, const std::string& op, const std::string& a,
                                      const std::string& b);

}  // namespace driftcheck::reports
