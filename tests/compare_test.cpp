// driftcheck compare: two backends on the same cases, bit for bit (compare.hpp).
#include <gtest/gtest.h>

#include <atomic>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/compare.hpp"

namespace driftcheck::fuzz {
namespace {

CompareResult run(const std::string& a, const std::string& b, std::uint64_t cases) {
  CompareOptions o;
  o.a = a, o.b = b, o.cases = cases, o.seed = 3;
  return compare_backends(o);
}

std::int64_t count(const CompareResult& r, Agreement a) {
  return std::count_if(r.cases.begin(), r.cases.end(), [a](const auto& c) { return c.agreement == a; });
}

TEST(Compare, ABackendAgainstItselfIsIdenticalEverywhereItRuns) {
  const auto r = run("cpu.dual.fused", "cpu.dual.fused", 20);
  ASSERT_EQ(r.cases.size(), 20u);
  EXPECT_GT(count(r, Agreement::kIdentical), 0);
  EXPECT_EQ(count(r, Agreement::kIdentical) + count(r, Agreement::kUnsupported), 20);
}

// --first starts the stream at a campaign's case index: --first 5 --cases 3 compares cases 5, 6 and 7, the
// same cases (same classes) as those indices of a run from 0.
TEST(Compare, FirstStartsTheStreamAtACaseIndex) {
  CompareOptions o;
  o.a = o.b = "cpu.dual.fused";
  o.cases = 3;
  o.first = 5;
  o.seed = 3;  // run()'s
  const CompareResult part = compare_backends(o);
  ASSERT_EQ(part.cases.size(), 3u);
  const auto whole = run("cpu.dual.fused", "cpu.dual.fused", 8);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(part.cases[i].index, 5 + i);
    EXPECT_EQ(part.cases[i].shape_class, whole.cases[5 + i].shape_class);
    EXPECT_EQ(part.cases[i].agreement, whole.cases[5 + i].agreement);
  }
}

TEST(Compare, ClassesSeparateAnExtraRoundingFromAStructuralBug) {
  // One extra rounding before the weight: at most about an ulp from the one-rounding kernel.
  const auto rounding = run("cpu.dual.fused", "mutant.dual.weight_rounded_early", 20);
  EXPECT_GT(count(rounding, Agreement::kOneUlp), 0);
  EXPECT_EQ(count(rounding, Agreement::kLarger), 0);
  // Swapped halves: far apart.
  const auto swapped = run("cpu.dual.fused", "mutant.dual.halves_swapped", 20);
  EXPECT_GT(count(swapped, Agreement::kLarger), 0);
  // NaN from poisoned page tails on one side only.
  const auto tail = run("cpu.attn.triton_unified", "mutant.attn.masked_p_times_v", 40);
  EXPECT_GT(count(tail, Agreement::kNonFinite), 0);
  const std::string md =
      compare_markdown({"cpu.dual.fused", "mutant.dual.halves_swapped", {}, 3, 20}, swapped);
  EXPECT_NE(md.find("over_4_ulps"), std::string::npos);
}

// A built-in backend that declines every other case at run time (BackendDeclined, as an external worker does
// when it finds only then that it has no kernel for a case) and fails the rest with an error.
class DeclinesAtRun final : public Backend {
 public:
  DeclinesAtRun() : b_(*registry().find("cpu.dual.fused")) {}
  std::string_view name() const override { return "test.declines_at_run"; }
  std::string_view description() const override { return "test"; }
  BackendKind kind() const override { return BackendKind::kExternal; }
  OpKind op() const override { return b_.op(); }
  Support supports(const Case& c) const override { return b_.supports(c); }
  void run(Case& /*c*/) const override {
    if (calls_++ % 2 == 0) throw BackendDeclined("no kernel for this one");
    throw BackendError("the kernel failed");
  }
  Numerics numerics() const override { return b_.numerics(); }

 private:
  const Backend& b_;
  mutable std::atomic<int> calls_{0};
};

TEST(Compare, ADeclineAtRunTimeIsUnsupportedAndAFailureAnError) {
  Registry reg;
  reg.add(std::make_unique<DeclinesAtRun>());
  CompareOptions o;
  o.a = "test.declines_at_run", o.b = "test.declines_at_run", o.cases = 12, o.seed = 3, o.backends = &reg;
  const auto r = compare_backends(o);
  std::int64_t declined = 0, errors = 0;
  for (const auto& c : r.cases) {
    if (c.agreement == Agreement::kUnsupported && c.worst.find("no kernel for this one") != std::string::npos)
      ++declined;
    if (c.agreement == Agreement::kError && c.worst.find("the kernel failed") != std::string::npos) ++errors;
  }
  EXPECT_GT(declined, 0);
  EXPECT_GT(errors, 0);
  EXPECT_EQ(count(r, Agreement::kIdentical), 0);
}

TEST(Compare, UnknownBackendsAndMismatchedOpsAreUsageErrors) {
  EXPECT_THROW(run("cpu.nope", "cpu.dual.fused", 1), UsageError);
  EXPECT_THROW(run("cpu.dual.fused", "cpu.attn.triton_unified", 1), UsageError);
}

}  // namespace
}  // namespace driftcheck::fuzz
