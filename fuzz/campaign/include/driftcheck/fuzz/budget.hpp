// A campaign's time budget (docs/CAMPAIGN.md "Time budget"): `--seconds N` is the whole run's wall clock,
// discovery, the statistical tier, bundles, the grouping phase and the heatmaps together, so each phase gets
// a deadline (BudgetPlan), and a case whose predicted cost (CostModel) exceeds the time its phase has left is
// not started. Internal to the campaign runner.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {

// A case's size in the unit its cost grows with, from its spec alone (before any tensor exists): attention,
// the reference's multiply-adds (each query row against each key of its sequence, over the query heads and
// the head size) plus the cache it reads; the norm family, the elements of its rows.
double case_work(const CaseSpec& s);

// Seconds a case of an op takes, learned from this campaign's own cases: per op a least-squares line
// seconds = a + b * work over every case observed (a >= 0, b >= 0; a line through the origin when the free
// fit's intercept is negative), plus kSpread standard deviations of the cases around it, since cases of one
// size differ (how many metamorphic re-runs a case needs, which backends support it): a prediction is meant
// to be rarely exceeded. Cases run side by side, so what it learns includes their contention, which is what a
// deadline sees. Until an op has kMinCases cases there is no line to fit: a prediction is then the costliest
// case observed (not scaled by work: a fixed cost per run may dominate, and a few cases say nothing of how
// cost grows), so a campaign of a few large cases (a --model profile's) does not start one of them again (a
// heatmap) where it cannot end before the deadline. Thread safe.
class CostModel {
 public:
  void observe(OpKind op, double work, double seconds);
  // nullopt until the op has an observed case.
  std::optional<double> predict(OpKind op, double work) const;

  static constexpr double kMinCases = 8;
  static constexpr double kSpread = 3;

 private:
  struct Sums {
    double n = 0, w = 0, t = 0, ww = 0, wt = 0, tt = 0, most = 0;  // most: the costliest case's seconds
  };
  mutable std::mutex mu_;
  std::map<OpKind, Sums> sums_;
};

// The deadlines of a campaign with a time budget, all measured from the start of this run:
//   end                = start + the budget left (--seconds less what a resumed campaign spent before)
//   heatmaps           until end
//   statistical tier, bundles, grouping   until end - tail
//   discovery          until end - tail - grouping, the grouping share counting only once there are
//                      findings to group
// tail = 3% of the budget left, between 0.25 s and 10 s (the heatmaps: one case per backend, in parallel).
// grouping = --shrink-seconds, else 25% of the budget (at least 5 s) but at most half of it. Without a time
// budget (--cases alone) every deadline is at infinity.
class BudgetPlan {
 public:
  using Clock = std::chrono::steady_clock;

  BudgetPlan() = default;  // no time budget
  BudgetPlan(Clock::time_point start, double seconds_left, double grouping_seconds);

  bool bounded() const { return bounded_; }
  Clock::time_point discovery(bool findings) const;
  Clock::time_point grouping() const;
  Clock::time_point end() const { return end_; }
  double tail_seconds() const { return tail_; }
  double grouping_seconds() const { return grouping_; }

 private:
  bool bounded_ = false;
  Clock::time_point end_ = Clock::time_point::max();
  double tail_ = 0, grouping_ = 0;
};

// A phase's deadline and the model that predicts its cases' cost: a case that does not fit before the
// deadline is not started. The default limits nothing.
struct PhaseLimit {
  BudgetPlan::Clock::time_point deadline = BudgetPlan::Clock::time_point::max();
  const CostModel* costs = nullptr;

  bool passed() const { return BudgetPlan::Clock::now() >= deadline; }
  // Not passed, and the case's predicted cost (when the model knows its op) fits in the time left.
  bool fits(const CaseSpec& s) const;
};

}  // namespace driftcheck::fuzz
