#include "campaign_shrink.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <ostream>
#include <system_error>

#include <fmt/format.h>

#include "driftcheck/fuzz/features.hpp"

namespace driftcheck::fuzz {
bool interrupted(const CampaignOptions& opts) {
  return opts.interrupt != nullptr && opts.interrupt->load();
}

namespace {

// Runs one finding's work, sorting what it throws: a failed write stops the phase (PhaseResult::io_error),
// anything else is an internal error of that finding. False when the phase must stop.
template <class F>
bool guarded(PhaseResult& out, std::mutex& mu, const std::string& signature, F&& work) {
  try {
    work();
    return true;
  } catch (const std::system_error&) {
    std::lock_guard lock(mu);
    if (!out.io_error) out.io_error = std::current_exception();
  } catch (const std::exception& e) {
    std::lock_guard lock(mu);
    out.internal_errors.push_back(fmt::format("internal error while bundling {}: {}", signature, e.what()));
  }
  return false;
}

// Whether a finding's drawn case fits before the limit's deadline (an unknown op: redraw() says so).
bool fits_again(const reports::FindingReport& r, const CampaignOptions& opts, const PhaseLimit& limit) {
  OpKind op;
  return !parse_op(r.op, &op) || limit.fits(draw_locked(op, r.seed, r.case_index, opts.gen).spec);
}

}  // namespace

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::optional<Attempt> attempt(const Backend& b, const CaseSpec& spec, std::uint64_t seed,
                               std::uint64_t index, const EvalOptions& eval) {
  try {
    Case c = materialize(spec);
    c.seed = seed, c.index = index;
    if (!b.supports(c).ok) return std::nullopt;
    Attempt a{prepare(std::move(c)), {}};
    a.evaluation = evaluate(b, a.prepared, eval);
    return a;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The checks a candidate needs to show `verdict` again: the statistical and metamorphic tiers run only on
// outputs within tolerance, so they only matter when the verdict is theirs (and a statistical verdict on the
// way would hide a metamorphic one).
EvalOptions checks_for(Verdict verdict) {
  EvalOptions o;
  o.statistical = verdict == Verdict::kBeyondStatisticalBound;
  o.metamorphic = verdict == Verdict::kNondeterministic || verdict == Verdict::kBatchVariant ||
                  verdict == Verdict::kBlockPermutationVariant;
  return o;
}

// Greedy descent to a fixpoint over shrink_candidates(): take the first candidate that still fails with the
// same verdict, start again from it, and stop when a whole pass accepts nothing (a minimum: no single
// candidate step shrinks it further) or the try/time budget is spent (or the user interrupts). The structure
// comes first in every pass, so a long batch loses its sequences and contexts before anything else is tried.
Shrunk shrink(const Backend& b, Verdict verdict, const CaseSpec& drawn, Attempt first, std::uint64_t seed,
              std::uint64_t index, int max_tries, Clock::time_point deadline,
              const std::atomic<int>* interrupt, const std::vector<std::string>& avoid) {
  Shrunk out{drawn, std::move(first), {}};
  ShrinkCounts& n = out.counts;
  for (bool improved = true; improved;) {
    improved = false;
    for (const CaseSpec& spec : shrink_candidates(out.spec)) {
      if (n.tried >= max_tries || Clock::now() >= deadline) return out;
      if (interrupt != nullptr && interrupt->load()) return out;  // Ctrl-C: within one candidate
      if (!avoid.empty() && has_any(case_features(spec), avoid)) continue;
      ++n.tried;
      auto a = attempt(b, spec, seed, index, checks_for(verdict));
      if (!a || a->evaluation.verdict != verdict) continue;
      out.spec = spec, out.attempt = std::move(*a), ++n.accepted;
      improved = true;
      break;
    }
  }
  n.minimal = true;
  return out;
}

std::optional<Redrawn> redraw(const reports::FindingReport& r, const CampaignOptions& opts, std::string* why,
                              bool any_verdict, const PhaseLimit& limit) {
  const Backend* named = opts.backends->find(r.backend);
  OpKind op;
  if (named == nullptr || !parse_op(r.op, &op)) {
    *why = fmt::format("backend {} or op {} is unknown to this driftcheck", r.backend, r.op);
    return std::nullopt;
  }
  // A mutant is redrawn and shrunk as the campaign judged it: with its twin's known upstream defects
  // repaired.
  std::shared_ptr<const Backend> repaired =
      named->kind() == BackendKind::kMutant
          ? repaired_backend(opts.known_findings ? *opts.known_findings : builtin_known_findings(), *named)
          : nullptr;
  const Backend* b = repaired ? repaired.get() : named;
  DrawnCase drawn = draw_locked(op, r.seed, r.case_index, opts.gen);
  if (!limit.fits(drawn.spec)) {
    *why = "no time left in the budget to run it again";
    return std::nullopt;
  }
  auto first = attempt(*b, drawn.spec, r.seed, r.case_index);
  if (!first || (!any_verdict && verdict_name(first->evaluation.verdict) != r.verdict)) {
    *why =
        first ? fmt::format("it now gives {}", verdict_name(first->evaluation.verdict)) : "it no longer runs";
    return std::nullopt;
  }
  return Redrawn{b, std::move(repaired), std::move(drawn), std::move(*first)};
}

std::mutex& rc_mutex() {
  static std::mutex m;
  return m;
}

DrawnCase draw_locked(OpKind op, std::uint64_t seed, std::uint64_t index, const GenOptions& gen) {
  std::lock_guard lock(rc_mutex());
  rc::Shrinkable<CaseSpec> s = draw_case(op, seed, index, gen);
  CaseSpec spec = s.value();
  return {std::move(s), std::move(spec)};
}

double shrink_budget(const CampaignOptions& opts) {
  return opts.shrink_seconds.value_or(opts.seconds
                                          ? std::min(std::max(5.0, 0.25 * *opts.seconds), 0.5 * *opts.seconds)
                                          : 3 * opts.shrink_seconds_per_finding);
}

PhaseResult bundle_unbundled(Findings& findings, const CampaignOptions& opts, const PhaseLimit& limit) {
  PhaseResult out;
  std::mutex mu;
  std::int64_t no_time = 0;
  for (const std::string& sig : findings.unbundled()) {
    if (interrupted(opts)) break;
    if (limit.passed()) {
      ++no_time;
      continue;
    }
    const bool ok = guarded(out, mu, sig, [&] {
      const reports::FindingReport r = findings.find(sig)->report;
      if (!fits_again(r, opts, limit)) {
        ++no_time;
        return;
      }
      std::string why;
      if (auto again = redraw(r, opts, &why))
        findings.save_bundle(sig, *again->backend, again->drawn.spec, again->first.prepared.input,
                             again->first.evaluation);
      else if (opts.log)
        *opts.log << fmt::format(
            "driftcheck: warning: finding {} has no bundle and its case does not fail again "
            "when redrawn ({}); replay it with: {}\n",
            r.id, why, r.replay);
    });
    if (!ok) break;
  }
  if (no_time > 0 && opts.log)
    *opts.log << fmt::format(
        "driftcheck: {} finding{} left without a bundle: no time left in the budget to run {} case{} again "
        "(each stays replayable from the stream: its replay command)\n",
        no_time, no_time == 1 ? "" : "s", no_time == 1 ? "its" : "their", no_time == 1 ? "" : "s");
  return out;
}

}  // namespace driftcheck::fuzz
