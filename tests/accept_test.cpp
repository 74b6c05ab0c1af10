// The acceptance proxy (docs/ACCEPT.md): the acceptance estimate's arithmetic, and both directions on a small
// drafter: correct backends keep (nearly) every token, structural mutants lose most of them, and the report
// survives a JSON round trip.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/accept.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/reports/accept_report.hpp"
#include "expect_error.hpp"

namespace driftcheck::fuzz {
namespace {

TEST(ExpectedAccepted, CountsLeadingAcceptancesWithinEachSequence) {
  // Two sequences of 4: chains of 3 start at 0, 1 (first) and 4, 5 (second) and never cross the boundary.
  const std::vector<double> acc = {1, 1, 1, 0, 1, 1, 1, 1};
  EXPECT_DOUBLE_EQ(expected_accepted(acc, {0, 4}, 8, 3, 1.0), (3 + 2 + 3 + 3) / 4.0);
  // A rejection stops the chain: [0, 1, 1] accepts nothing.
  EXPECT_DOUBLE_EQ(expected_accepted({0, 1, 1}, {0}, 3, 3, 1.0), 0.0);
  // Everything agreeing with a per-token acceptance a0: a0 + a0^2 drafted tokens accepted for k = 2.
  EXPECT_DOUBLE_EQ(expected_accepted({1, 1, 1, 1}, {0}, 4, 2, 0.5), 0.75);
  // Sampling: probabilities multiply along the chain.
  EXPECT_DOUBLE_EQ(expected_accepted({0.5, 0.5}, {0}, 2, 2, 1.0), 0.5 + 0.25);
}

AcceptOptions small(const std::string& backends) {
  AcceptOptions o;
  // Head size 32: TRITON_ATTN's minimum.
  o.model.hidden = 64, o.model.num_q_heads = 4, o.model.num_kv_heads = 2, o.model.head_dim = 32;
  o.model.intermediate = 160, o.model.vocab = 3000, o.model.positions = 160;
  o.backend_globs = backends;
  o.jobs = 2;
  return o;
}

const reports::AcceptRow& row(const reports::AcceptReport& r, const std::string& name) {
  for (const auto& row : r.rows)
    if (row.backend == name) return row;
  throw std::runtime_error("no row " + name);
}

TEST(Accept, CorrectBackendsKeepTokensStructuralMutantsCollapse) {
  const auto r = run_accept(
      small("cpu.dual.fused,cpu.attn.triton_unified,cpu.rmsnorm.fused_add,mutant.dual.halves_swapped,"
            "mutant.attn.gqa_modulo,mutant.rmsnorm.stride_ignored,mutant.attn.masked_p_times_v"));
  // One rounding, as the reference's correctly rounded outputs: no token may change.
  EXPECT_GE(row(r, "cpu.dual.fused").top1_agreement, 0.99);
  for (const char* correct : {"cpu.attn.triton_unified", "cpu.rmsnorm.fused_add"}) {
    EXPECT_GE(row(r, correct).top1_agreement, 0.95) << correct;
    EXPECT_FALSE(row(r, correct).beyond_budget) << correct;
    EXPECT_TRUE(row(r, correct).error.empty()) << correct << ": " << row(r, correct).error;
  }
  for (const char* mutant : {"mutant.dual.halves_swapped", "mutant.attn.gqa_modulo",
                             "mutant.rmsnorm.stride_ignored", "mutant.attn.masked_p_times_v"}) {
    EXPECT_LT(row(r, mutant).top1_agreement, 0.5) << mutant;
    EXPECT_LT(row(r, mutant).greedy_k3, 0.5) << mutant;
    EXPECT_TRUE(row(r, mutant).beyond_budget) << mutant;
  }
  // Garbage V reaches the logits as NaN: no distribution, so KL is infinite and the positions are counted.
  EXPECT_GT(row(r, "mutant.attn.masked_p_times_v").nonfinite_positions, 0);
  EXPECT_EQ(r.exit_code, 1);
  // The fused residual norm substitutes only where the chain adds a residual.
  EXPECT_EQ(row(r, "cpu.rmsnorm.fused_add").substituted,
            (std::vector<std::string>{"post_attention_norm", "final_norm"}));
}

TEST(Accept, TwinsReadingNewKeysFromInputsGetTheLayersOwn) {
  // aiter_fa's extend path and ROCM_ATTN's prefill kernel read the new tokens' K/V from k_new / v_new
  // (new_kv = "inputs"), not from the cache: the drafter must hand them the layer's own keys and values. Head
  // size 64: paged_attention_v1's smallest.
  auto o = small("cpu.attn.aiter_fa,cpu.attn.rocm_custom");
  o.model.hidden = 128, o.model.num_q_heads = 2, o.model.num_kv_heads = 1, o.model.head_dim = 64;
  const auto r = run_accept(o);
  for (const char* correct : {"cpu.attn.aiter_fa", "cpu.attn.rocm_custom"}) {
    EXPECT_TRUE(row(r, correct).error.empty()) << correct << ": " << row(r, correct).error;
    EXPECT_GE(row(r, correct).top1_agreement, 0.95) << correct;
    EXPECT_FALSE(row(r, correct).beyond_budget) << correct;
  }
}

TEST(Accept, ReportRoundTripsThroughJson) {
  const auto r = run_accept(small("cpu.concat.copy"));
  ASSERT_EQ(r.rows.size(), 1u);
  // A bit-exact copy changes nothing at all.
  EXPECT_EQ(r.rows[0].top1_agreement, 1.0);
  EXPECT_EQ(r.rows[0].kl_mean, 0.0);
  EXPECT_EQ(r.exit_code, 0);
  const auto back = reports::accept_report_from_json(reports::to_json(r));
  EXPECT_EQ(reports::to_json(back), reports::to_json(r));
  EXPECT_NE(reports::to_markdown(r).find("cpu.concat.copy"), std::string::npos);
  nlohmann::json bad = reports::to_json(r);
  bad["format_version"] = 99;
  EXPECT_THROW(reports::accept_report_from_json(bad), std::runtime_error);
  // A float where an integer goes was converted without a range check (undefined behaviour); each field of
  // the wrong kind is one error naming it.
  for (const auto& [edit, message] :
       std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>>{
           {[](nlohmann::json& j) { j["model"]["hidden"] = 4.44e68; },
            "malformed driftcheck.accept: field 'model.hidden': expected an integer, got number"},
           {[](nlohmann::json& j) { j["rows"][0]["positions"] = 2.5; },
            "malformed driftcheck.accept: field 'rows[0].positions': expected an integer, got number"},
           {[](nlohmann::json& j) { j["top_k"] = std::int64_t{1} << 40; },
            "malformed driftcheck.accept: field 'top_k': 1099511627776 is too large"}}) {
    nlohmann::json j = reports::to_json(r);
    edit(j);
    testing::expect_error_message<std::runtime_error>([&] { reports::accept_report_from_json(j); }, message);
  }
}

TEST(Accept, BadSizesAreUsageErrors) {
  AcceptOptions o = small("cpu.concat.copy");
  o.model.num_q_heads = 3;  // not a multiple of 2 KV heads
  EXPECT_THROW(run_accept(o), UsageError);
  o = small("no.such.backend");
  EXPECT_THROW(run_accept(o), UsageError);
}

}  // namespace
}  // namespace driftcheck::fuzz
