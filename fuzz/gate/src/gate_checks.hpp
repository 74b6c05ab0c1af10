// The checks of a gate run, one per backend x op: corpus (every regression case), budget (the campaign's
// drift statistics against the config's budget) and baseline (against the checked-in statistics). Internal to
// the gate.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/corpus.hpp"
#include "driftcheck/fuzz/gate_baseline.hpp"
#include "driftcheck/fuzz/gate_config.hpp"
#include "driftcheck/fuzz/golden.hpp"
#include "driftcheck/reports/gate_report.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {

// Golden and corpus checks name the known findings that explained failing cases as properties
// "known.<id>" = cases; the gate lists them apart (reports::GateKnownFinding).
inline constexpr std::string_view kKnownPropertyPrefix = "known.";

// A backend the gate judges, and the backend whose budget and baseline it is held to: itself, or for a mutant
// (--mutants) the correct backend it breaks.
struct GateBackend {
  const Backend* backend = nullptr;
  std::string held_to;
  Budget budget;  // held_to's
};

// Whether one judged case is within a budget: an allowed verdict and a worst ratio no larger than max_ratio.
// (max_share_beyond bounds the campaign's statistics; one case's share is part of its verdict here.)
bool within_budget(const Evaluation& e, const Budget& budget);

// The golden checks: for each op with golden cases, whether its reference is bit-identical to the stored one
// (backend "reference"); for each backend, every golden case of its op it supports, against the stored
// reference. `dir` names the golden directory in replay commands. Stops after the case in flight once
// `*interrupt` is set (the checks then are incomplete: the gate has no verdict).
std::vector<reports::GateCheck> golden_checks(const std::vector<GoldenCase>& golden,
                                              const std::vector<GateBackend>& backends,
                                              const std::filesystem::path& dir,
                                              const std::atomic<int>* interrupt);

// Runs every corpus entry on every gate backend of its op (`jobs` threads over entries; each entry's
// reference is computed once). One check per backend. Stops after the entries in flight once `*interrupt` is
// set.
std::vector<reports::GateCheck> corpus_checks(const std::vector<CorpusEntry>& corpus,
                                              const std::vector<GateBackend>& backends, int jobs,
                                              const std::function<void(std::size_t done)>& progress,
                                              const std::atomic<int>* interrupt);

// The budget check of one backend from its campaign report (its drift statistics per format).
reports::GateCheck budget_check(const GateBackend& b, const reports::BackendReport& campaign,
                                const Budget& budget, std::uint64_t seed);

// The baseline check of one backend: `changes` are its statistics' changes against the baseline (backend
// named as run), `stats` its campaign statistics (for replay commands).
reports::GateCheck baseline_check(const GateBackend& b, const std::vector<reports::BaselineChange>& changes,
                                  const reports::BackendReport& campaign, bool in_baseline,
                                  std::uint64_t seed);

// Drift statistics per format of a backend, as baseline entries held to `held_to`'s name.
std::vector<BaselineEntry> entries_of(const reports::BackendReport& campaign, const std::string& held_to);

}  // namespace driftcheck::fuzz
