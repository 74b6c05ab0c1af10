#include "campaign_shrink.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <ostream>
#include <set>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "thread_group.hpp"

namespace driftcheck::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

bool interrupted(const CampaignOptions& opts) {
  return opts.interrupt != nullptr && opts.interrupt->load();
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The evaluation of one (possibly shrunk) spec on one backend; nullopt when the spec does not make a case
// this backend runs (a shrink can leave the backend's supported space).
struct Attempt {
  PreparedCase prepared;
  Evaluation evaluation;
};
std::optional<Attempt> attempt(const Backend& b, const CaseSpec& spec, std::uint64_t seed,
                               std::uint64_t index, const EvalOptions& eval = {}) {
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

struct Shrunk {
  CaseSpec spec;
  Attempt attempt;
  ShrinkCounts counts;
};

// Greedy descent to a fixpoint over shrink_candidates(): take the first candidate that still fails with the
// same verdict, start again from it, and stop when a whole pass accepts nothing (a minimum: no single
// candidate step shrinks it further) or the try/time budget is spent (or the user interrupts). The structure
// comes first in every pass, so a long batch loses its sequences and contexts before anything else is tried.
Shrunk shrink(const Backend& b, Verdict verdict, const CaseSpec& drawn, Attempt first, std::uint64_t seed,
              std::uint64_t index, int max_tries, Clock::time_point deadline,
              const std::atomic<bool>* interrupt = nullptr) {
  Shrunk out{drawn, std::move(first), {}};
  ShrinkCounts& n = out.counts;
  for (bool improved = true; improved;) {
    improved = false;
    for (const CaseSpec& spec : shrink_candidates(out.spec)) {
      if (n.tried >= max_tries || Clock::now() >= deadline) return out;
      if (interrupt != nullptr && interrupt->load()) return out;  // Ctrl-C: within one candidate
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

// A finding's drawn case evaluated again on its backend; nullopt (with the reason in `why`) when the case no
// longer fails the same way.
struct Redrawn {
  const Backend* backend;
  std::shared_ptr<const Backend> repaired;  // owns `backend` when it is a repaired mutant
  DrawnCase drawn;
  Attempt first;
};
std::optional<Redrawn> redraw(const reports::FindingReport& r, const CampaignOptions& opts,
                              std::string* why) {
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
  auto first = attempt(*b, drawn.spec, r.seed, r.case_index);
  if (!first || verdict_name(first->evaluation.verdict) != r.verdict) {
    *why =
        first ? fmt::format("it now gives {}", verdict_name(first->evaluation.verdict)) : "it no longer runs";
    return std::nullopt;
  }
  return Redrawn{b, std::move(repaired), std::move(drawn), std::move(*first)};
}

void shrink_one(Findings& findings, const std::string& signature, const CampaignOptions& opts,
                Clock::time_point deadline) {
  const std::optional<FindingState> state = findings.find(signature);
  const reports::FindingReport& r = state->report;
  std::string why;
  auto again = redraw(r, opts, &why);
  // A failure that does not come back (a nondeterministic backend) keeps the bundle of the drawn case.
  if (!again) return;
  if (!state->bundled)
    findings.save_bundle(signature, *again->backend, again->drawn.spec, again->first.prepared.input,
                         again->first.evaluation, {}, false);
  const Verdict verdict = again->first.evaluation.verdict;
  Shrunk s = shrink(*again->backend, verdict, again->drawn.spec, std::move(again->first), r.seed,
                    r.case_index, opts.shrink_steps, deadline, opts.interrupt);
  findings.save_bundle(signature, *again->backend, s.spec, s.attempt.prepared.input, s.attempt.evaluation,
                       s.counts, true);
}

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
    out.internal_errors.push_back(fmt::format("internal error while shrinking {}: {}", signature, e.what()));
  }
  return false;
}

// In order of discovery, the first finding of each (backend, verdict) first: a minimal repro of a new bug
// class is worth more than a smaller copy of one already minimised, and the earliest findings are the ones
// a budget must not starve.
std::vector<std::string> shrink_queue(const Findings& findings) {
  std::vector<std::pair<std::string, reports::FindingReport>> found;
  for (const auto& [sig, f] : findings.snapshot())
    if (!f.shrunk) found.emplace_back(sig, f.report);
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.found_after_s, a.second.case_index) <
           std::tie(b.second.found_after_s, b.second.case_index);
  });
  std::vector<std::string> queue, later;
  std::set<std::string> classes;
  for (const auto& [sig, r] : found)
    (classes.insert(r.backend + "|" + r.verdict).second ? queue : later).push_back(sig);
  queue.insert(queue.end(), later.begin(), later.end());
  return queue;
}

}  // namespace

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
  return opts.shrink_seconds.value_or(opts.seconds ? std::max(5.0, 0.25 * *opts.seconds)
                                                   : 3 * opts.shrink_seconds_per_finding);
}

PhaseResult bundle_unbundled(Findings& findings, const CampaignOptions& opts) {
  PhaseResult out;
  std::mutex mu;
  for (const std::string& sig : findings.unbundled()) {
    if (interrupted(opts)) break;
    const bool ok = guarded(out, mu, sig, [&] {
      const reports::FindingReport r = findings.find(sig)->report;
      std::string why;
      if (auto again = redraw(r, opts, &why))
        findings.save_bundle(sig, *again->backend, again->drawn.spec, again->first.prepared.input,
                             again->first.evaluation, {}, false);
      else if (opts.log)
        *opts.log << fmt::format(
            "driftcheck: warning: finding {} has no bundle and its case does not fail again "
            "when redrawn ({}); replay it with: {}\n",
            r.id, why, r.replay);
    });
    if (!ok) break;
  }
  return out;
}

// Shrinking runs after the discovery budget so that finding every bug class fast is never delayed by
// shrinking the first ones.
PhaseResult shrink_phase(Findings& findings, const CampaignOptions& opts, int jobs) {
  PhaseResult out;
  const std::vector<std::string> queue = shrink_queue(findings);
  const double budget = shrink_budget(opts);
  if (queue.empty() || budget <= 0) return out;
  if (opts.log) *opts.log << fmt::format("shrinking {} findings (budget {:.0f} s)\n", queue.size(), budget);
  const auto deadline = after(budget);
  std::mutex mu;
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < queue.size() && Clock::now() < deadline && !stop && !interrupted(opts);
         i = next++) {
      const auto cap = std::min(deadline, after(opts.shrink_seconds_per_finding));
      if (!guarded(out, mu, queue[i], [&] { shrink_one(findings, queue[i], opts, cap); })) stop = true;
    }
  };
  ThreadGroup threads([&stop] { stop = true; });
  std::string why;
  for (int i = 1; i < jobs; ++i)
    if (!threads.start(work, &why)) break;  // fewer threads, same work: the calling thread shrinks too
  work();
  threads.join();
  return out;
}

}  // namespace driftcheck::fuzz
