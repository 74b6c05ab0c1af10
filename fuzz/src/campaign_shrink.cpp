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

// A shrink spends at most this long on one finding, so one huge attention case cannot eat the whole phase.
constexpr double kShrinkSecondsPerFinding = 10.0;

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
                               std::uint64_t index) {
  try {
    Case c = materialize(spec);
    c.seed = seed, c.index = index;
    if (!b.supports(c).ok) return std::nullopt;
    Attempt a{prepare(std::move(c)), {}};
    a.evaluation = evaluate(b, a.prepared);
    return a;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

struct Shrunk {
  CaseSpec spec;
  Attempt attempt;
  std::int64_t steps = 0;
};

// Greedy descent of RapidCheck's shrink tree: take the first shrink that still fails with the same verdict
// and start again from it, until no shrink fails or the step/time budget is spent.
Shrunk shrink(const Backend& b, Verdict verdict, rc::Shrinkable<CaseSpec> current, Attempt first,
              std::uint64_t seed, std::uint64_t index, int max_steps, Clock::time_point deadline) {
  std::unique_lock lock(rc_mutex());
  Shrunk out{current.value(), std::move(first), 0};
  bool improved = true;
  while (improved && out.steps < max_steps && Clock::now() < deadline) {
    improved = false;
    auto candidates = current.shrinks();
    while (out.steps < max_steps && Clock::now() < deadline) {
      auto next = candidates.next();
      if (!next) break;
      const CaseSpec spec = next->value();
      lock.unlock();
      ++out.steps;
      auto a = attempt(b, spec, seed, index);
      lock.lock();
      if (a && a->evaluation.verdict == verdict) {
        current = std::move(*next);
        out.spec = spec;
        out.attempt = std::move(*a);
        improved = true;
        break;
      }
    }
  }
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
    findings.save_bundle(signature, *b, drawn.spec, first->prepared.input, first->evaluation, 0, false);
  const Verdict verdict = first->evaluation.verdict;
  Shrunk s = shrink(*b, verdict, drawn.shrinkable, std::move(*first), r.seed, r.case_index, opts.shrink_steps,
                    deadline);
  findings.save_bundle(signature, *b, s.spec, s.attempt.prepared.input, s.attempt.evaluation, s.steps, true);
}

// The first finding of each (backend, verdict) goes first: a minimal repro of a new bug class is worth more
// than a smaller copy of one already minimised.
std::vector<std::string> shrink_queue(const Findings& findings) {
  std::vector<std::string> queue, later;
  std::set<std::string> classes;
  for (const auto& [sig, f] : findings.snapshot()) {
    if (f.shrunk) continue;
    (classes.insert(f.report.backend + "|" + f.report.verdict).second ? queue : later).push_back(sig);
  }
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
                                                   : 3 * kShrinkSecondsPerFinding);
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
        shrink_one(findings, queue[i], opts, std::min(deadline, after(kShrinkSecondsPerFinding)));
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
