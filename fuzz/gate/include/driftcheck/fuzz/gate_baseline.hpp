// The gate's baseline: the drift statistics each (backend, op, format) is held to, and the ratchet that
// updates them. A baseline only tightens on its own: `driftcheck baseline update` takes every statistic that
// got better; one that got worse is kept unless the update is given --allow-loosen with a reason, which the
// file keeps with the date and every loosened value. Format "driftcheck.baseline" v1, JSON, byte by byte in
// docs/GATE.md.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/fuzz/gate_config.hpp"
#include "driftcheck/reports/gate_report.hpp"

namespace driftcheck::fuzz {

inline constexpr std::string_view kBaselineFormatName = "driftcheck.baseline";
inline constexpr int kBaselineFormatVersion = 1;

// Ratios (error / tolerance, share of elements) below this are noise, not drift: the relative margin applies
// to max(value, floor). 1% of a tolerance.
inline constexpr double kRatioFloor = 0.01;

struct BaselineEntry {
  std::string backend;
  std::string op;
  std::string format;
  std::int64_t cases = 0;                        // fewer is worse: the backend declines cases it used to run
  std::map<std::string, std::int64_t> failures;  // failing verdict -> cases: more is worse
  double worst_ratio = 0;
  double p99_ratio = 0;
  double mean_signed_ulps = 0;  // farther from 0 is worse
  double max_share_beyond = 0;
};

// One update of the file: what changed, when, and why (loosening only with a reason).
struct BaselineEvent {
  std::string date;    // UTC, ISO 8601 (SOURCE_DATE_EPOCH when set, for reproducible files)
  std::string action;  // create, tighten, loosen, restream
  std::string reason;
  std::vector<std::string> changes;  // "cpu.x rmsnorm bf16 worst_ratio 0.5 -> 0.61"
};

struct Baseline {
  std::string stream;                  // GateConfig::stream() of the runs it was measured on
  std::vector<BaselineEntry> entries;  // sorted by backend, op, format
  std::vector<BaselineEvent> history;  // oldest first
};

// Throws InputError("baseline", "FILE: ...") for a missing, malformed or foreign-version file.
Baseline read_baseline(const std::filesystem::path& path);
Baseline parse_baseline(std::string_view text, const std::filesystem::path& name);
// Atomically (temp file + rename).
void write_baseline(const std::filesystem::path& path, const Baseline& b);

BaselineEntry baseline_entry(const reports::GateStatsEntry& e);

// Every statistic that differs between the baseline and a run, worst first (BaselineChange::severity > 1 is
// measurably worse). Entries the run has and the baseline lacks are not changes (they are new); entries the
// baseline has and the run lacks lost all their cases.
std::vector<reports::BaselineChange> compare_with_baseline(const Baseline& base,
                                                           const std::vector<BaselineEntry>& now,
                                                           const Margin& margin);

struct RatchetResult {
  Baseline baseline;  // what to write
  std::vector<std::string> tightened;
  std::vector<std::string> loosened;  // taken because loosening was allowed
  std::vector<std::string> refused;   // worse beyond the margin and not allowed: kept at the baseline value
};
// The ratchet. `base` is nullptr when no baseline exists yet (the run becomes the baseline, action "create").
// A run of another stream replaces every statistic, only with allow_loosen (action "restream"); without it
// everything is refused.
RatchetResult ratchet(const Baseline* base, const std::string& stream, const std::vector<BaselineEntry>& now,
                      const Margin& margin, bool allow_loosen, const std::string& reason);

// The current UTC time as ISO 8601, or SOURCE_DATE_EPOCH's when that is set.
std::string utc_now_iso8601();

}  // namespace driftcheck::fuzz
