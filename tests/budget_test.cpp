// The time budget (docs/CAMPAIGN.md "Time budget"): the phases' deadlines, the cost model that decides
// whether a case still fits, and a campaign that abandons the cases still running at its discovery deadline.
#include "driftcheck/fuzz/budget.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/reference/reference.hpp"
#include "scratch_dir.hpp"

namespace driftcheck::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

TEST(CostModel, FitsALineThroughTheObservedCases) {
  CostModel m;
  EXPECT_FALSE(m.predict(OpKind::kAttention, 1e6)) << "nothing observed";
  // seconds = 0.001 + 2e-6 * work, exactly.
  for (int i = 0; i < 7; ++i) m.observe(OpKind::kAttention, 1e3 * (i + 1), 0.001 + 2e-6 * 1e3 * (i + 1));
  m.observe(OpKind::kAttention, 1e5, 0.001 + 2e-6 * 1e5);
  ASSERT_TRUE(m.predict(OpKind::kAttention, 1e6));
  EXPECT_NEAR(*m.predict(OpKind::kAttention, 1e6), 0.001 + 2.0, 1e-9) << "on the line: no spread";
  EXPECT_FALSE(m.predict(OpKind::kRmsNorm, 1e6)) << "each op learns alone";
  // Cases of one size taking 1 s or 3 s: the mean 2 s plus kSpread standard deviations (1 s, with n - 2
  // degrees of freedom: sqrt(8 / 6)).
  CostModel spread;
  for (int i = 0; i < 8; ++i) spread.observe(OpKind::kConcat, 100, i % 2 == 0 ? 1.0 : 3.0);
  EXPECT_NEAR(*spread.predict(OpKind::kConcat, 100), 2.0 + CostModel::kSpread * std::sqrt(8.0 / 6.0), 1e-9);
}

// Before kMinCases cases there is no line: the costliest case seen, whatever the work.
TEST(CostModel, AFewCasesPredictTheCostliestSeen) {
  CostModel m;
  EXPECT_FALSE(m.predict(OpKind::kAttention, 1e6)) << "nothing observed";
  m.observe(OpKind::kAttention, 1e3, 2.0);
  EXPECT_DOUBLE_EQ(*m.predict(OpKind::kAttention, 1e3), 2.0);
  EXPECT_DOUBLE_EQ(*m.predict(OpKind::kAttention, 10), 2.0);
  EXPECT_DOUBLE_EQ(*m.predict(OpKind::kAttention, 1e6), 2.0);
  m.observe(OpKind::kAttention, 1e4, 1.0);
  EXPECT_DOUBLE_EQ(*m.predict(OpKind::kAttention, 1e4), 2.0);
  m.observe(OpKind::kAttention, 0, 3.0);
  EXPECT_DOUBLE_EQ(*m.predict(OpKind::kAttention, 1), 3.0);
  EXPECT_FALSE(m.predict(OpKind::kRmsNorm, 1)) << "each op learns alone";
}

TEST(CostModel, ANegativeInterceptFallsBackToALineThroughTheOrigin) {
  CostModel m;
  // seconds = 1e-6 * work - 0.01 would predict less than nothing for small cases.
  for (int i = 1; i <= 8; ++i) m.observe(OpKind::kRmsNorm, 1e4 * i, 1e-6 * 1e4 * i * i / 4.5);
  // Through the origin: b = sum(w t) / sum(w^2); at work 0 only the spread of the cases around it is left.
  double wt = 0, ww = 0;
  for (int i = 1; i <= 8; ++i) wt += 1e4 * i * (1e-6 * 1e4 * i * i / 4.5), ww += 1e4 * i * 1e4 * i;
  const double b = wt / ww;
  double sse = 0;
  for (int i = 1; i <= 8; ++i) sse += std::pow(1e-6 * 1e4 * i * i / 4.5 - b * 1e4 * i, 2);
  const double sigma = std::sqrt(sse / 6);
  EXPECT_NEAR(*m.predict(OpKind::kRmsNorm, 0), CostModel::kSpread * sigma, 1e-12);
  EXPECT_NEAR(*m.predict(OpKind::kRmsNorm, 1e5), b * 1e5 + CostModel::kSpread * sigma, 1e-12);
}

TEST(CostModel, WorkGrowsWithTheReferencesMultiplyAdds) {
  CaseSpec a;
  a.op = OpKind::kAttention;
  AttentionParams p;
  p.num_q_heads = 4, p.num_kv_heads = 2, p.head_dim = 64;
  a.params = p;
  a.query_lens = {1, 16}, a.seq_lens = {100, 200};
  // (1 * 100 + 16 * 200) * 4 * 64 logits and P.V terms, plus (100 + 200) * 2 * 64 cached elements.
  EXPECT_EQ(case_work(a), (1.0 * 100 + 16.0 * 200) * 4 * 64 + 300.0 * 2 * 64);
  CaseSpec n;
  n.op = OpKind::kConcat, n.rows = 3, n.hidden = 10, n.hidden_b = 6;
  EXPECT_EQ(case_work(n), 3.0 * 16);
  n.op = OpKind::kRmsNorm;
  EXPECT_EQ(case_work(n), 3.0 * 10);
}

TEST(BudgetPlan, SplitsTheBudgetIntoPhaseDeadlines) {
  const auto t0 = Clock::now();
  const BudgetPlan p(t0, 100, 25);
  ASSERT_TRUE(p.bounded());
  EXPECT_DOUBLE_EQ(p.tail_seconds(), 3);  // 3% of the budget
  EXPECT_NEAR(seconds_between(t0, p.end()), 100, 1e-6);
  EXPECT_NEAR(seconds_between(t0, p.grouping()), 97, 1e-6);
  EXPECT_NEAR(seconds_between(t0, p.discovery(false)), 97, 1e-6) << "no findings: nothing to group";
  EXPECT_NEAR(seconds_between(t0, p.discovery(true)), 72, 1e-6);
  // The tail stays between 0.25 s and 10 s; the grouping share never takes the tail's time.
  EXPECT_DOUBLE_EQ(BudgetPlan(t0, 1, 0.5).tail_seconds(), 0.25);
  EXPECT_DOUBLE_EQ(BudgetPlan(t0, 1000, 0).tail_seconds(), 10);
  EXPECT_DOUBLE_EQ(BudgetPlan(t0, 1, 5).grouping_seconds(), 0.75);
  // Nothing left (a resumed campaign past its budget): every deadline is now.
  const BudgetPlan spent(t0, -3, 1);
  EXPECT_LE(spent.discovery(true), t0 + std::chrono::milliseconds(1));
  EXPECT_FALSE(BudgetPlan().bounded());
  EXPECT_EQ(BudgetPlan().discovery(true), Clock::time_point::max());
}

TEST(PhaseLimit, ACaseFitsOnlyWhenItsPredictedCostEndsBeforeTheDeadline) {
  CostModel m;
  for (int i = 1; i <= 8; ++i) m.observe(OpKind::kRmsNorm, i, 0.5 * i);  // 0.5 s per row of 1 element
  CaseSpec s;
  s.op = OpKind::kRmsNorm, s.rows = 4, s.hidden = 1;  // predicted 2 s
  EXPECT_TRUE((PhaseLimit{Clock::now() + std::chrono::seconds(60), &m}).fits(s));
  EXPECT_FALSE((PhaseLimit{Clock::now() + std::chrono::seconds(1), &m}).fits(s));
  EXPECT_FALSE((PhaseLimit{Clock::now() - std::chrono::seconds(1), nullptr}).fits(s)) << "passed";
  EXPECT_TRUE((PhaseLimit{Clock::now() + std::chrono::seconds(1), nullptr}).fits(s)) << "no model: fits";
  s.op = OpKind::kConcat;
  EXPECT_TRUE((PhaseLimit{Clock::now() + std::chrono::seconds(1), &m}).fits(s)) << "the op is not known yet";
  m.observe(OpKind::kConcat, 1, 2.0);  // one case of 2 s: a case of it does not fit in 1 s
  EXPECT_FALSE((PhaseLimit{Clock::now() + std::chrono::seconds(1), &m}).fits(s));
  EXPECT_TRUE(PhaseLimit{}.fits(s));
}

// Writes the reference after `seconds` of sleep: a correct kernel, slow.
class SlowBackend : public Backend {
 public:
  SlowBackend(std::string name, double seconds) : name_(std::move(name)), seconds_(seconds) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return "budget test backend: correct, slow"; }
  BackendKind kind() const override { return BackendKind::kCpu; }
  bool available(std::string*) const override { return true; }
  OpKind op() const override { return OpKind::kRmsNorm; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(Case& c) const override {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
    const Outputs ref = reference(c);
    for (const auto& name : op_signature(c).outputs) c.tensor(name).copy_from(ref.at(name).to_f64());
  }

 private:
  std::string name_;
  double seconds_;
};

// Slow on the stream's larger cases (more than 6,000 elements: about a quarter of them), fast on the rest.
class SizedBackend : public SlowBackend {
 public:
  using SlowBackend::SlowBackend;
  void run(Case& c) const override {
    const auto& x = c.tensor("x");
    const bool large = x.shape()[0] * x.shape()[1] > 6000;
    std::this_thread::sleep_for(std::chrono::duration<double>(large ? 0.04 : 0.0005));
    SlowBackend::run(c);
  }
};

// Never destroyed: a thread abandoned inside a case may still use it when the test returns.
const Registry& slow_registry() {
  static const Registry* reg = [] {
    auto* r = new Registry;
    r->add(std::make_unique<SlowBackend>("test.rmsnorm.stuck", 60));
    r->add(std::make_unique<SlowBackend>("test.rmsnorm.slow", 0.01));
    r->add(std::make_unique<SizedBackend>("test.rmsnorm.sized", 0));
    return r;
  }();
  return *reg;
}

// The "deferred" list of the journal's last progress record.
std::vector<std::uint64_t> last_deferred(const std::filesystem::path& dir, std::uint64_t* completed) {
  std::ifstream in(dir / "journal.jsonl");
  std::vector<std::uint64_t> deferred;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("type") != "progress") continue;
    *completed = j.at("completed");
    deferred = j.value("deferred", std::vector<std::uint64_t>{});
  }
  return deferred;
}

CampaignOptions budget_options(const std::string& name, const std::string& backend, double seconds) {
  CampaignOptions o;
  o.ops = {OpKind::kRmsNorm};
  o.backend_globs = backend;
  o.seconds = seconds;
  o.seed = 3;
  o.jobs = 2;
  o.out_dir = testing::fresh_scratch_dir("budget_test", name);
  o.gen.large_shapes = false;
  o.backends = &slow_registry();
  return o;
}

TEST(Budget, CasesStillRunningAtTheDeadlineAreAbandonedAndNotCounted) {
  // Every case takes a minute; the budget is 2 s: both workers' first cases are still running at the
  // discovery deadline, so the campaign ends without them.
  const auto t0 = Clock::now();
  const CampaignResult r = run_campaign(budget_options("stuck", "test.rmsnorm.stuck", 2));
  EXPECT_LT(seconds_between(t0, Clock::now()), 30) << "the campaign waited for a case it should have left";
  EXPECT_EQ(r.report.cases, 0);
  EXPECT_EQ(r.report.cases_abandoned, 2);
  EXPECT_EQ(r.abandoned, 2) << "two threads left inside their cases";
  ASSERT_TRUE(r.report.budget_seconds);
  EXPECT_EQ(*r.report.budget_seconds, 2);
  EXPECT_NE(
      reports::time_line(r.report).find("2 cases started but not finished when discovery ended: --resume "
                                        "runs them"),
      std::string::npos)
      << reports::time_line(r.report);
  // A backend that ran no case is an error of the campaign, as always.
  EXPECT_EQ(r.exit_code, 1);
}

TEST(Budget, ACaseThatNoLongerFitsIsNotStartedAndEveryPhaseIsTimed) {
  // Runs of 10 ms (about ten per case, with the metamorphic re-runs) on one worker, 3 s budget: once the
  // model knows them, the last case that would end past the discovery deadline is not started, so none is
  // abandoned.
  CampaignOptions o = budget_options("slow", "test.rmsnorm.slow", 3);
  o.jobs = 1;
  const CampaignResult r = run_campaign(o);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_GE(r.report.cases, static_cast<std::int64_t>(CostModel::kMinCases));
  EXPECT_EQ(r.report.cases_abandoned, 0) << reports::time_line(r.report);
  std::vector<std::string> names;
  for (const auto& p : r.report.phases) names.push_back(p.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"discovery", "statistical tier", "bundles", "grouping", "heatmaps"}));
  // The worst case's heatmap is one run of 10 ms, which fits in the tail (0.25 s at least):
  // or it is left out and counted, never run past the end.
  EXPECT_EQ(r.report.heatmaps.size() + static_cast<std::size_t>(r.report.heatmaps_left_out), 1u);
}

TEST(Budget, ACaseThatDoesNotFitIsDeferredTheStreamGoesOnAndResumeRunsItFirst) {
  // Large cases take about 0.4 s (ten runs of 40 ms), small ones about 5 ms. Near the deadline a large case
  // no longer fits while small ones still do: the large one is deferred, the small ones after it are counted.
  CampaignOptions o = budget_options("sized", "test.rmsnorm.sized", 4);
  const CampaignResult first = run_campaign(o);
  EXPECT_EQ(first.exit_code, 0);
  std::uint64_t completed = 0;
  const std::vector<std::uint64_t> deferred = last_deferred(o.out_dir, &completed);
  EXPECT_GE(first.report.cases_not_started, 1) << reports::time_line(first.report);
  EXPECT_EQ(first.report.cases_deferred, static_cast<std::int64_t>(deferred.size()));
  ASSERT_FALSE(deferred.empty());
  EXPECT_EQ(first.report.cases, static_cast<std::int64_t>(completed - deferred.size()))
      << "the cases above a deferred one are counted";
  EXPECT_NE(
      reports::time_line(first.report).find("not started (predicted to end past the discovery deadline)"),
      std::string::npos)
      << reports::time_line(first.report);

  // Four more seconds: the deferred cases run first (no prediction yet in a new process), then the stream
  // goes on from where it stopped.
  o.resume = true, o.seconds = 8;
  const CampaignResult second = run_campaign(o);
  EXPECT_EQ(second.exit_code, 0);
  std::uint64_t completed2 = 0;
  const std::vector<std::uint64_t> deferred2 = last_deferred(o.out_dir, &completed2);
  for (std::uint64_t d : deferred)
    EXPECT_EQ(std::count(deferred2.begin(), deferred2.end(), d), 0) << "case " << d << " was not run again";
  EXPECT_GT(completed2, completed);
  EXPECT_EQ(second.report.cases, static_cast<std::int64_t>(completed2 - deferred2.size()));
  EXPECT_GE(second.report.cases, first.report.cases + static_cast<std::int64_t>(deferred.size()));
}

TEST(Budget, ShrinkSecondsMustLeaveDiscoveryTime) {
  CampaignOptions o = budget_options("shrink", "test.rmsnorm.slow", 10);
  o.shrink_seconds = 10;
  EXPECT_THROW(run_campaign(o), UsageError);
}

}  // namespace
}  // namespace driftcheck::fuzz
