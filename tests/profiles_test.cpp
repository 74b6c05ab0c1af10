// Model profiles (profiles.hpp, `driftcheck fuzz --model NAME`): most cases at the model's real shapes, the
// rest the default generator's edge cases, valid cases that the reference and a twin judge, and a default
// stream that no profile changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/profiles.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {
namespace {

GenOptions model(std::string_view name) {
  GenOptions g;
  g.model = std::string(name);
  return g;
}

bool real_attention(const CaseSpec& s, const ModelProfile& m) {
  const auto& p = std::get<AttentionParams>(s.params);
  return p.num_q_heads == m.q_heads && p.num_kv_heads == m.kv_heads && p.head_dim == m.head_dim &&
         p.block_size == m.block_size && s.kv_dtype == m.kv_dtype && p.has_sinks == m.sinks;
}

std::int64_t total(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{0});
}

TEST(Profiles, TheDefaultStreamIsUnchanged) {
  // An empty model is the default generator, draw for draw (every other test's expectations rely on it).
  for (const OpKind op : kAllOps)
    for (std::uint64_t k = 0; k < 20; ++k)
      EXPECT_EQ(nlohmann::json(draw_case(op, 5, k, GenOptions{}).value()),
                nlohmann::json(draw_case(op, 5, k).value()));
  // A profile draws another stream.
  EXPECT_NE(nlohmann::json(draw_case(OpKind::kAttention, 5, 0, model("minimax-m3")).value()),
            nlohmann::json(draw_case(OpKind::kAttention, 5, 0).value()));
}

TEST(Profiles, AttentionAtRealSizesInMostCases) {
  constexpr int kDraws = 300;
  for (const ModelProfile& m : model_profiles()) {
    int real = 0, long_context = 0, spec = 0, windowed = 0;
    std::set<std::int64_t> batch_sizes;
    for (int k = 0; k < kDraws; ++k) {
      const CaseSpec s =
          draw_case(OpKind::kAttention, 1, static_cast<std::uint64_t>(k), model(m.name)).value();
      if (!real_attention(s, m)) continue;
      ++real;
      batch_sizes.insert(static_cast<std::int64_t>(s.seq_lens.size()));
      EXPECT_LE(total(s.seq_lens), 131072) << m.name << " case " << k << ": the key budget";
      const auto max_len = *std::max_element(s.seq_lens.begin(), s.seq_lens.end());
      long_context += max_len > 65536;
      EXPECT_LE(max_len, m.max_context);
      for (std::size_t i = 0; i < s.query_lens.size(); ++i) {
        EXPECT_LE(s.query_lens[i], s.seq_lens[i]);
        spec += s.query_lens[i] >= m.spec_min + 1 && s.query_lens[i] <= m.spec_max + 1;
      }
      windowed += std::get<AttentionParams>(s.params).window == m.window && m.window > 0;
    }
    // 4 in 5 by construction: 3 standard deviations below 240 of 300 is 219.
    EXPECT_GT(real, 210) << m.name;
    EXPECT_LT(real, kDraws) << m.name << ": the small edge cases come too";
    EXPECT_GT(long_context, 5) << m.name << ": contexts beyond 64k";
    EXPECT_GT(spec, 20) << m.name << ": speculative verification lengths";
    EXPECT_GT(batch_sizes.size(), 20u) << m.name << ": batches of many sizes";
    if (m.window > 0) {
      EXPECT_GT(windowed, 50) << m.name << ": windowed layers";
    }
  }
}

TEST(Profiles, RowOpsAtTheModelsWidth) {
  for (const ModelProfile& m : model_profiles()) {
    for (const OpKind op : {OpKind::kRmsNorm, OpKind::kDualRmsNormCat, OpKind::kConcat}) {
      int real = 0;
      for (std::uint64_t k = 0; k < 100; ++k) {
        const CaseSpec s = draw_case(op, 2, k, model(m.name)).value();
        real += s.hidden == m.hidden && (op != OpKind::kConcat || s.hidden_b == m.hidden) &&
                s.act_dtype == m.act_dtype;
      }
      EXPECT_GT(real, 65) << m.name << " " << op_name(op);
    }
  }
}

// A real-size case of each profile is a valid case: the fp64 reference and the Triton twin judge it, and the
// twin passes (it passes the default stream's cases of every shape).
TEST(Profiles, RealCasesAreJudged) {
  const Backend* twin = registry().find("cpu.attn.triton_unified");
  ASSERT_NE(twin, nullptr);
  for (const ModelProfile& m : model_profiles()) {
    bool judged = false;
    for (std::uint64_t k = 0; k < 200 && !judged; ++k) {
      const CaseSpec s = draw_case(OpKind::kAttention, 3, k, model(m.name)).value();
      if (!real_attention(s, m) || total(s.seq_lens) > 4096) continue;  // small enough for a unit test
      Case c = materialize(s);
      const PreparedCase prepared = prepare(std::move(c));
      ASSERT_TRUE(twin->supports(prepared.input).ok)
          << m.name << " " << twin->supports(prepared.input).reason;
      const Evaluation e = evaluate(*twin, prepared);
      EXPECT_EQ(e.verdict, Verdict::kPass) << m.name << " case " << k << ": " << e.detail;
      judged = true;
    }
    EXPECT_TRUE(judged) << m.name << ": no real case with at most 4096 keys among 200";
  }
}

TEST(Profiles, NamesAreKnownOrRefused) {
  EXPECT_NE(find_model_profile("minimax-m3"), nullptr);
  EXPECT_EQ(find_model_profile("gpt-5"), nullptr);
  EXPECT_THROW(draw_case(OpKind::kRmsNorm, 1, 0, model("gpt-5")).value(), std::exception);
}

}  // namespace
}  // namespace driftcheck::fuzz
