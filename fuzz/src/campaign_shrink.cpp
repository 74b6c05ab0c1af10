#include "campaign_shrink.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ostream>
#include <set>
#include <thread>

#include <fmt/format.h>

namespace driftcheck::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

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
// candidate step shrinks it further) or the try/time budget is spent. The structure comes first in every
// pass, so a long batch loses its sequences and contexts before anything else is tried.
Shrunk shrink(const Backend& b, Verdict verdict, const CaseSpec& drawn, Attempt first, std::uint64_t seed,
              std::uint64_t index, int max_tries, Clock::time_point deadline) {
  Shrunk out{drawn, std::move(first), {}};
  ShrinkCounts& n = out.counts;
  for (bool improved = true; improved;) {
    improved = false;
    for (const CaseSpec& spec : shrink_candidates(out.spec)) {
      if (n.tried >= max_tries || Clock::now() >= deadline) return out;
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

void shrink_one(Findings& findings, const std::string& signature, const CampaignOptions& opts,
                Clock::time_point deadline) {
  const std::optional<FindingState> state = findings.find(signature);
  const reports::FindingReport& r = state->report;
  const Backend* b = opts.backends->find(r.backend);
  OpKind op;
  if (b == nullptr || !parse_op(r.op, &op)) return;
  DrawnCase drawn = draw_locked(op, r.seed, r.case_index, opts.gen);
  auto first = attempt(*b, drawn.spec, r.seed, r.case_index);
  // A failure that does not come back (a nondeterministic backend) keeps the bundle of the drawn case.
  if (!first || verdict_name(first->evaluation.verdict) != r.verdict) return;
  if (!state->bundled)
    findings.save_bundle(signature, *b, drawn.spec, first->prepared.input, first->evaluation, {}, false);
  const Verdict verdict = first->evaluation.verdict;
  Shrunk s =
      shrink(*b, verdict, drawn.spec, std::move(*first), r.seed, r.case_index, opts.shrink_steps, deadline);
  findings.save_bundle(signature, *b, s.spec, s.attempt.prepared.input, s.attempt.evaluation, s.counts, true);
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

// Shrinking runs after the discovery budget so that finding every bug class fast is never delayed by
// shrinking the first ones. Findings journaled by a killed run (resume) are handled here too: redrawn from
// (op, seed, index), bundled and shrunk.
std::vector<std::string> shrink_phase(Findings& findings, const CampaignOptions& opts, int jobs) {
  const std::vector<std::string> queue = shrink_queue(findings);
  if (queue.empty()) return {};
  const double budget = shrink_budget(opts);
  if (opts.log) *opts.log << fmt::format("shrinking {} findings (budget {:.0f} s)\n", queue.size(), budget);
  const auto deadline = after(budget);
  std::mutex errors_mu;
  std::vector<std::string> errors;
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < queue.size() && Clock::now() < deadline; i = next++) {
      try {
        shrink_one(findings, queue[i], opts, std::min(deadline, after(opts.shrink_seconds_per_finding)));
      } catch (const std::exception& e) {
        std::lock_guard lock(errors_mu);
        errors.push_back(fmt::format("internal error while shrinking {}: {}", queue[i], e.what()));
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < jobs; ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace driftcheck::fuzz
