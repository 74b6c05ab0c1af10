#include "driftcheck/fuzz/budget.hpp"

#include <algorithm>
#include <cmath>
#include <variant>

namespace driftcheck::fuzz {

double case_work(const CaseSpec& s) {
  if (const auto* a = std::get_if<AttentionParams>(&s.params)) {
    double logits = 0, cache = 0;
    for (std::size_t i = 0; i < s.seq_lens.size(); ++i) {
      const double q = i < s.query_lens.size() ? static_cast<double>(s.query_lens[i]) : 1.0;
      logits += q * static_cast<double>(s.seq_lens[i]);
      cache += static_cast<double>(s.seq_lens[i]);
    }
    const auto d = static_cast<double>(a->head_dim);
    return logits * static_cast<double>(a->num_q_heads) * d +
           cache * static_cast<double>(a->num_kv_heads) * d;
  }
  const double width =
      static_cast<double>(s.hidden) +
      (s.op == OpKind::kConcat || s.op == OpKind::kDualRmsNormCat ? static_cast<double>(s.hidden_b) : 0.0);
  return static_cast<double>(s.rows) * width;
}

void CostModel::observe(OpKind op, double work, double seconds) {
  if (!(std::isfinite(work) && std::isfinite(seconds) && work >= 0 && seconds >= 0)) return;
  std::lock_guard lock(mu_);
  Sums& s = sums_[op];
  s.n += 1, s.w += work, s.t += seconds, s.ww += work * work, s.wt += work * seconds,
      s.tt += seconds * seconds;
  s.most = std::max(s.most, seconds);
}

std::optional<double> CostModel::predict(OpKind op, double work) const {
  Sums s;
  {
    std::lock_guard lock(mu_);
    const auto it = sums_.find(op);
    if (it == sums_.end() || it->second.n == 0) return std::nullopt;
    s = it->second;
  }
  if (s.n < kMinCases) return s.most;
  const double var = s.ww - s.w * s.w / s.n;  // n * variance of the work
  double a = s.t / s.n, b = 0;
  if (var > 0) {
    b = (s.wt - s.w * s.t / s.n) / var;
    a = (s.t - b * s.w) / s.n;
    if (a < 0 && s.ww > 0) a = 0, b = s.wt / s.ww;  // through the origin
    if (b < 0) a = s.t / s.n, b = 0;                // no growth seen: the mean
  }
  // The line's residual spread over the observed cases: sum (t - a - b w)^2 expanded in the sums.
  const double sse = s.tt - 2 * a * s.t - 2 * b * s.wt + s.n * a * a + 2 * a * b * s.w + b * b * s.ww;
  const double sigma = std::sqrt(std::max(0.0, sse) / std::max(1.0, s.n - 2));
  return a + b * work + kSpread * sigma;
}

BudgetPlan::BudgetPlan(Clock::time_point start, double seconds_left, double grouping_seconds)
    : bounded_(true) {
  const double left = std::max(0.0, seconds_left);
  tail_ = std::clamp(0.03 * left, std::min(0.25, left), 10.0);
  grouping_ = std::clamp(grouping_seconds, 0.0, std::max(0.0, left - tail_));
  end_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(left));
}

namespace {

BudgetPlan::Clock::time_point minus(BudgetPlan::Clock::time_point t, double seconds) {
  if (t == BudgetPlan::Clock::time_point::max()) return t;
  return t - std::chrono::duration_cast<BudgetPlan::Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

BudgetPlan::Clock::time_point BudgetPlan::discovery(bool findings) const {
  return minus(end_, tail_ + (findings ? grouping_ : 0.0));
}

BudgetPlan::Clock::time_point BudgetPlan::grouping() const {
  return minus(end_, tail_);
}

bool PhaseLimit::fits(const CaseSpec& s) const {
  const auto now = BudgetPlan::Clock::now();
  if (now >= deadline) return false;
  if (costs == nullptr || deadline == BudgetPlan::Clock::time_point::max()) return true;
  const std::optional<double> predicted = costs->predict(s.op, case_work(s));
  return !predicted || std::chrono::duration<double>(deadline - now).count() >= *predicted;
}

}  // namespace driftcheck::fuzz
