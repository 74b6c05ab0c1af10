// The golden cases: the configurations the incident and the seeds' kernels run, plus the edges a
// reference most easily gets wrong. Changing one of these is a `driftcheck golden update` on purpose.
#include <cmath>

#include "driftcheck/fuzz/golden.hpp"

namespace driftcheck::fuzz {
namespace {

CaseSpec row_spec(OpKind op, OpParams params, DType t, std::int64_t rows, std::int64_t hidden,
                  std::uint64_t value_seed) {
  CaseSpec s;
  s.op = op, s.params = std::move(params), s.act_dtype = s.kv_dtype = t;
  s.rows = rows, s.hidden = s.hidden_b = hidden, s.value_seed = value_seed;
  return s;
}

// A drafter's attention: 64 query heads over 4 KV heads (GQA 16), head size 128, pages of 128 tokens.
CaseSpec attention_spec(DType kv, std::vector<std::int64_t> query_lens, std::vector<std::int64_t> seq_lens,
                        std::uint64_t value_seed) {
  AttentionParams p;
  p.num_q_heads = 64, p.num_kv_heads = 4, p.head_dim = 128, p.block_size = 128;
  p.scale = 1.0 / std::sqrt(128.0);
  CaseSpec s;
  s.op = OpKind::kAttention, s.params = p, s.act_dtype = DType::kBF16, s.kv_dtype = kv;
  s.query_lens = std::move(query_lens), s.seq_lens = std::move(seq_lens), s.value_seed = value_seed;
  return s;
}

// Queries past the end of a causal context see no key: o = 0 and lse = -inf (or the sink's logit).
CaseSpec masked_spec(bool sinks) {
  AttentionParams p;
  p.num_q_heads = 8, p.num_kv_heads = 2, p.head_dim = 64, p.block_size = 16, p.scale = 0.125;
  p.has_sinks = sinks;
  CaseSpec s;
  s.op = OpKind::kAttention, s.params = p, s.act_dtype = s.kv_dtype = DType::kBF16;
  s.query_lens = {4}, s.seq_lens = {2}, s.value_seed = sinks ? 71 : 70;
  return s;
}

void zero_row(Case& c, const char* tensor, std::int64_t row) {
  Tensor& t = c.tensor(tensor);
  for (std::int64_t i = 0; i < t.size(1); ++i) t.set({row, i}, 0.0);
}

std::vector<GoldenDefinition> make_definitions() {
  std::vector<GoldenDefinition> d;
  const RmsNormParams llama{1e-5, WeightMode::kPlain, true};
  d.push_back({"rmsnorm_h4096_bf16_residual",
               "fused residual add + RMSNorm, hidden 4096, 4 tokens (1 + 3 speculative), eps 1e-5",
               row_spec(OpKind::kRmsNorm, llama, DType::kBF16, 4, 4096, 11),
               "",
               {}});
  d.push_back({"dual_h4096_bf16",
               "EAGLE3 layer 0: dual RMSNorm + concat of embedding and hidden state, hidden 4096",
               row_spec(OpKind::kDualRmsNormCat, DualRmsNormCatParams{1e-5, WeightMode::kPlain}, DType::kBF16,
                        4, 4096, 12),
               "",
               {}});
  d.push_back({"dual_h6144_bf16",
               "EAGLE3 layer 0, hidden 6144, 3 tokens (1 + 2 speculative), eps 1e-6",
               row_spec(OpKind::kDualRmsNormCat, DualRmsNormCatParams{1e-6, WeightMode::kPlain}, DType::kBF16,
                        3, 6144, 13),
               "",
               {}});
  d.push_back({"concat_h4096_bf16",
               "the concat of layer 0 alone: [4, 4096] + [4, 4096]",
               row_spec(OpKind::kConcat, ConcatParams{}, DType::kBF16, 4, 4096, 14),
               "",
               {}});
  CaseSpec subnormal =
      row_spec(OpKind::kRmsNorm, RmsNormParams{1e-6, WeightMode::kPlain, false}, DType::kF16, 4, 256, 15);
  subnormal.distribution = Distribution::kSubnormal;
  d.push_back({"rmsnorm_edge_subnormal_zero_rows_fp16",
               "rows of fp16 subnormals (3 of 4 values below the smallest normal) and a row of zeros (y = 0)",
               subnormal, "x row 2 set to zero", [](Case& c) { zero_row(c, "x", 2); }});
  CaseSpec spec = attention_spec(DType::kF8E4M3FN, {3, 4}, {1025, 768}, 16);
  auto& sp = std::get<AttentionParams>(spec.params);
  sp.k_scale = 0.017, sp.v_scale = 0.5;
  d.push_back(
      {"attn_spec_decode_gqa16_fp8",
       "64 q / 4 kv heads, head 128, block 128, fp8 e4m3fn KV with k_scale 0.017 and v_scale 0.5; 2 and 3 "
       "speculative tokens on contexts of 1025 (one token into a page) and 768 (page-aligned)",
       spec,
       "",
       {}});
  // A long context, where error grows with the number of keys a row reduces over (ORACLE.md): one KV head
  // keeps 16k tokens of fp8 K and V at 4 MB; pages of 16 tokens, as the ROCm kernels take.
  CaseSpec long_ctx = attention_spec(DType::kF8E4M3FN, {4}, {16385}, 18);
  auto& lp = std::get<AttentionParams>(long_ctx.params);
  lp.num_q_heads = 16, lp.num_kv_heads = 1, lp.block_size = 16, lp.k_scale = 0.017, lp.v_scale = 0.5;
  d.push_back({"attn_spec_decode_long_gqa16_fp8",
               "16 q / 1 kv head, head 128, block 16, fp8 e4m3fn KV with k_scale 0.017 and v_scale 0.5; 3 "
               "speculative tokens on a context of 16385 (one token into a page)",
               long_ctx,
               "",
               {}});
  CaseSpec prefill = attention_spec(DType::kBF16, {8}, {130}, 17);
  auto& pp = std::get<AttentionParams>(prefill.params);
  pp.window = 64, pp.softcap = 30.0;
  d.push_back(
      {"attn_prefill_window_softcap_bf16",
       "prefill chunk of 8 tokens at the end of a 130-token context (two tokens into the second page), "
       "sliding window 64, softcap 30, bf16 KV",
       prefill,
       "",
       {}});
  d.push_back({"attn_edge_fully_masked_rows",
               "4 queries over a 2-token causal context: the first 2 see no key",
               masked_spec(false),
               "",
               {}});
  d.push_back({"attn_edge_fully_masked_rows_sinks",
               "the same with attention sinks: o = 0, lse = the sink's logit",
               masked_spec(true),
               "",
               {}});
  return d;
}

}  // namespace

const std::vector<GoldenDefinition>& golden_definitions() {
  static const std::vector<GoldenDefinition> d = make_definitions();
  return d;
}

}  // namespace driftcheck::fuzz
