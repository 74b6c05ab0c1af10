// The proof in both directions, at test scale: every correct CPU twin passes the oracle on a few hundred
// generated cases of its op, except where a known finding (a defect of the upstream kernel the twin
// faithfully reproduces, golden/known-findings.toml) explains the failure; and every mutant is caught (a
// failure no known finding explains) within a bounded number of cases. The long version is `driftcheck fuzz`
// over tens of thousands of cases.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/device/twin_norm.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {
namespace {

constexpr std::uint64_t kSeed = 20261130;

std::size_t cases_for(OpKind op) {
  return op == OpKind::kAttention ? 200 : 300;
}

// Prepared once per op and shared by both directions: the reference is the expensive part.
const std::vector<PreparedCase>& prepared(OpKind op) {
  static std::map<OpKind, std::vector<PreparedCase>> cache;
  auto& v = cache[op];
  if (v.empty()) {
    for (std::uint64_t i = 0; i < cases_for(op); ++i) {
      Case c = materialize(draw_case(op, kSeed, i).value());
      c.seed = kSeed;
      c.index = i;
      v.push_back(prepare(std::move(c)));
    }
  }
  return v;
}

TEST(Proof, EveryCorrectTwinPassesItsOp) {
  std::size_t twins = 0;
  for (const auto& b : registry().all()) {
    if (b->kind() != BackendKind::kCpu) continue;
    ++twins;
    std::map<Verdict, int> counts;
    std::map<std::string, StatisticalClass> classes;  // the statistical tier's class tests see no bias either
    std::map<std::string, int> known;
    std::string first_failure;
    for (const PreparedCase& pc : prepared(b->op())) {
      const Evaluation ev = evaluate(*b, pc);
      if (is_failure(ev.verdict)) {
        const auto why = explain_failure(builtin_known_findings(), *b, pc);
        for (const KnownFinding* f : why) ++known[f->id];
        if (!why.empty()) continue;
      }
      ++counts[ev.verdict];
      if (ev.verdict == Verdict::kPass)
        classes[shape_class(draw_case(b->op(), kSeed, pc.input.index).value())].add(ev.stat_p_value,
                                                                                    pc.input.index);
      if (is_failure(ev.verdict) && first_failure.empty())
        first_failure = "case " + std::to_string(pc.input.index) + " (" +
                        shape_class(draw_case(b->op(), kSeed, pc.input.index).value()) + ") " +
                        std::string(verdict_name(ev.verdict)) + ": " + ev.detail;
    }
    int failures = 0;
    for (const auto& [v, n] : counts) failures += is_failure(v) ? n : 0;
    EXPECT_EQ(failures, 0) << b->name() << ": " << first_failure;
    for (const auto& [shape, c] : classes) {
      const auto beyond = judge_class(c, shape);
      EXPECT_FALSE(beyond) << b->name() << ": " << beyond->why;
    }
    EXPECT_GT(counts[Verdict::kPass], 0)
        << b->name() << " passed no case: a check that ran nothing is no proof";
    std::cout << "[proof] " << b->name() << ": " << counts[Verdict::kPass] << " pass, "
              << counts[Verdict::kUnsupported] << " unsupported, " << failures << " failures";
    for (const auto& [id, n] : known) std::cout << ", known finding " << id << " x" << n;
    std::cout << "\n";
  }
  EXPECT_GE(twins, 4u);
}

TEST(Proof, EveryMutantIsCaught) {
  const auto mutants = registry().match("mutant.*", true);
  ASSERT_FALSE(mutants.empty());
  for (const Backend* m : mutants) {
    std::string why;
    if (!m->available(&why)) {  // mutant.gpu.* without a GPU: tests/gpu_test.cpp proves them on one
      std::cout << "[proof] " << m->name() << ": not run here (" << why << ")\n";
      continue;
    }
    const auto& cases = prepared(m->op());
    std::size_t index = 0;
    Evaluation caught;
    // The mutant with its twin's known upstream defects repaired: a failure must come from the mutant's own
    // bug, not from a defect the twin reproduces on purpose.
    const auto repaired = repaired_backend(builtin_known_findings(), *m);
    const Backend& probe = repaired ? *repaired : *m;
    for (; index < cases.size(); ++index) {
      caught = evaluate(probe, cases[index]);
      if (is_failure(caught.verdict)) break;
    }
    EXPECT_LT(index, cases.size()) << m->name() << " (" << m->bug_class() << ") survived " << cases.size()
                                   << " cases";
    if (index < cases.size())
      std::cout << "[proof] " << m->name() << ": caught at case " << index << " as "
                << verdict_name(caught.verdict) << " ("
                << shape_class(draw_case(m->op(), kSeed, index).value()) << "): " << caught.detail << "\n";
  }
}

// mutant.gpu.dual.batch_variant_block before any GPU run: on a warp of 32 it computes what the dual twin with
// NormBug::kBatchVariantBlock computes (its plan is that order, gpu_reduce_test; its roundings are the
// twin's, GpuTwins), so this CPU model must be caught within the cases tests/gpu_test.cpp gives the GPU
// mutant (the same seed and count), and by the batch-invariance check, the only one the bug class can fail.
TEST(Proof, GpuBatchVariantClassIsCaughtOnTheFusedDualKernel) {
  const auto model = twin::make_dual_backend(
      twin::mutant_info(twin::dual_fused_info(), "mutant.dual.batch_variant_block (CPU model)", "", ""),
      twin::dual_fused_kernel(), twin::NormBug::kBatchVariantBlock);
  const auto& cases = prepared(OpKind::kDualRmsNormCat);
  std::size_t index = 0;
  Evaluation caught;
  for (; index < cases.size(); ++index) {
    caught = evaluate(*model, cases[index]);
    if (is_failure(caught.verdict)) break;
  }
  ASSERT_LT(index, cases.size()) << "survived " << cases.size() << " cases";
  EXPECT_EQ(caught.verdict, Verdict::kBatchVariant) << caught.detail;
  std::cout << "[proof] " << model->name() << ": caught at case " << index << ": " << caught.detail << "\n";
}

// The block table's row stride (issue #12): a kernel that reads row s at s * max_blocks is right on every
// dense table, so it is found only because the generator draws tables that are slices of wider ones.
TEST(Proof, TableStrideBugIsFoundThroughStridedTables) {
  const Backend* found = registry().find("mutant.attn.table_stride_ignored");
  ASSERT_NE(found, nullptr);
  // Judged with its twin's known upstream defects repaired, as every mutant proof: a dense-table case must
  // fail only through the mutant's own bug.
  const auto repaired = repaired_backend(builtin_known_findings(), *found);
  const Backend* m = repaired ? repaired.get() : found;
  int dense = 0, strided_caught = 0;
  for (const PreparedCase& pc : prepared(OpKind::kAttention)) {
    const Tensor& t = pc.input.tensor("block_table");
    const bool strided = t.size(0) > 1 && t.strides()[0] != t.size(1);
    const Evaluation ev = evaluate(*m, pc, EvalOptions{false});
    if (ev.verdict == Verdict::kUnsupported) continue;
    if (!strided) {
      ++dense;
      EXPECT_FALSE(is_failure(ev.verdict)) << "case " << pc.input.index << ": " << ev.detail;
    } else {
      strided_caught += is_failure(ev.verdict) ? 1 : 0;
    }
  }
  EXPECT_GT(dense, 50);
  EXPECT_GT(strided_caught, 10);
  std::cout << "[proof] table_stride_ignored: " << dense << " dense-table cases pass, " << strided_caught
            << " strided-table cases caught\n";
}

// The statistical tier (docs/ORACLE.md section 9) on the mutants written for it: each is caught on cases the
// worst-case tier passes, and on at least one case in ten it reaches.
TEST(Proof, StatisticalTierCatchesWhatTheWorstCaseTierMisses) {
  for (const char* name :
       {"mutant.rmsnorm.squares_in_act", "mutant.rmsnorm.one_plus_weight_rounded",
        "mutant.rmsnorm.fast_rsqrt", "mutant.rmsnorm.output_toward_zero", "mutant.attn.logits_rounded"}) {
    const Backend* m = registry().find(name);
    ASSERT_NE(m, nullptr) << name;
    int ran = 0, worst = 0, statistical_only = 0;
    for (const PreparedCase& pc : prepared(m->op())) {
      const Evaluation ev = evaluate(*m, pc, EvalOptions{false, false});
      if (ev.verdict == Verdict::kUnsupported) continue;
      ++ran;
      if (is_failure(ev.verdict)) {
        ++worst;
        continue;
      }
      statistical_only += judge_statistical(pc, m->numerics(), ev.outputs).p_value <= kStatisticalAlpha;
    }
    EXPECT_GT(statistical_only, 0) << name;
    EXPECT_GT(worst + statistical_only, ran / 10) << name;
    std::cout << "[proof] " << name << ": " << ran << " cases, worst-case tier " << worst
              << ", statistical tier only " << statistical_only << "\n";
  }
}

}  // namespace
}  // namespace driftcheck::fuzz
