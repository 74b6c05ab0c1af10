// Shrinking a finding's drawn case to a minimum, as the grouping phase (campaign_groups.hpp) uses it, and
// the bundles of findings a kill left without one (docs/CAMPAIGN.md "Findings, deduplication, shrinking").
// Internal to the campaign runner.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "driftcheck/fuzz/budget.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/campaign_findings.hpp"

namespace driftcheck::fuzz {

// RapidCheck keeps implicit parameters (the handler gen::exec uses) in process-wide stacks, and a Shrinkable
// may regenerate its value lazily through them, so every draw, value() and shrinks() walk holds this lock.
std::mutex& rc_mutex();

// Case k of the stream with its shrink tree, drawn under rc_mutex().
struct DrawnCase {
  rc::Shrinkable<CaseSpec> shrinkable;
  CaseSpec spec;
};
DrawnCase draw_locked(OpKind op, std::uint64_t seed, std::uint64_t index, const GenOptions& gen);

// The grouping phase's budget: --shrink-seconds, else 25% of --seconds (at least 5 s, at most half of it),
// else 3x --shrink-seconds-per-finding. With --seconds it is part of that budget (BudgetPlan).
double shrink_budget(const CampaignOptions& opts);

using Clock = std::chrono::steady_clock;
Clock::time_point after(double seconds);
bool interrupted(const CampaignOptions& opts);  // the user's Ctrl-C or SIGTERM

// The evaluation of one (possibly shrunk) spec on one backend; nullopt when the spec does not make a case
// this backend runs (a shrink can leave the backend's supported space).
struct Attempt {
  PreparedCase prepared;
  Evaluation evaluation;
};
std::optional<Attempt> attempt(const Backend& b, const CaseSpec& spec, std::uint64_t seed,
                               std::uint64_t index, const EvalOptions& eval = {});

// The checks a candidate needs to show `verdict` again (only the tiers that can give it).
EvalOptions checks_for(Verdict verdict);

struct Shrunk {
  CaseSpec spec;
  Attempt attempt;
  ShrinkCounts counts;
};
// Greedy descent to a fixpoint over shrink_candidates(): the first candidate that still fails with the same
// verdict replaces the case and the pass starts again from it, until a whole pass accepts nothing (a minimum)
// or the try/time budget is spent (or the user interrupts). Candidates with any of the `avoid` features
// (features.hpp) are not tried: a shrink must not bring back a feature ablation showed the failure does not
// need.
Shrunk shrink(const Backend& b, Verdict verdict, const CaseSpec& drawn, Attempt first, std::uint64_t seed,
              std::uint64_t index, int max_tries, Clock::time_point deadline,
              const std::atomic<int>* interrupt = nullptr, const std::vector<std::string>& avoid = {});

// A finding's drawn case evaluated again on the backend the campaign judged it with (a mutant with its
// twin's known upstream defects repaired); nullopt, with the reason in `why`, when the case no longer fails
// the same way (with `any_verdict`: only when it no longer runs at all).
struct Redrawn {
  const Backend* backend;
  std::shared_ptr<const Backend> repaired;  // owns `backend` when it is a repaired mutant
  DrawnCase drawn;
  Attempt first;
  Verdict verdict() const { return first.evaluation.verdict; }
};
// With a `limit`, a case whose predicted cost does not fit before its deadline is not run (nullopt, why says
// so).
std::optional<Redrawn> redraw(const reports::FindingReport& r, const CampaignOptions& opts, std::string* why,
                              bool any_verdict = false, const PhaseLimit& limit = {});

// What a phase that writes bundles ran into. It stops at the first failed write (disk full), whose
// std::system_error is kept to be rethrown once the campaign has stopped its threads.
struct PhaseResult {
  std::vector<std::string> internal_errors;
  std::exception_ptr io_error;
  int abandoned = 0;  // threads left inside a case by an interrupt (ThreadGroup::wait)
};

// Resume, before discovery: writes the bundle of the drawn case of every finding journaled without one (a
// kill landed between the finding's record and its bundle, or the bundle went missing). A finding that does
// not fail again when redrawn (a nondeterministic backend) stays without a bundle, with a warning on
// opts.log. Stops early on opts.interrupt.
// A finding whose case does not fit before the limit's deadline stays without a bundle (one line on opts.log
// says how many), replayable from the stream.
PhaseResult bundle_unbundled(Findings& findings, const CampaignOptions& opts, const PhaseLimit& limit = {});

}  // namespace driftcheck::fuzz
