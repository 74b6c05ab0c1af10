// The attention twins: what each accepts and declines (as the real backend routes it), against the fp64
// reference within their declared numerics, poisoned cache slots never read, and each modelled kernel path's
// reduction, masking and rounding details on probe cases.
#include <gtest/gtest.h>

#include "twin_checks.hpp"

namespace driftcheck {
namespace {

using namespace twin_checks;

TEST(AttentionSupport, RestrictedKernelsDeclineWithTheirReason) {
  AttentionSpec decode = attn_spec(DType::kBF16, DType::kBF16, 128);
  decode.query_lens = {1, 1, 1};
  EXPECT_TRUE(reason_has(supports("cpu.attn.rocm_custom", decode), "16 and 32"));
  EXPECT_TRUE(reason_has(supports("cpu.attn.aiter_fa", decode), "16 and 32"));
  EXPECT_TRUE(supports("cpu.attn.triton_unified", decode).ok);
  EXPECT_TRUE(supports("cpu.attn.aiter_unified_mi300x", decode).ok);  // MultipleOf(16), tile 64 < page

  decode.params.block_size = 16;
  EXPECT_TRUE(supports("cpu.attn.rocm_custom", decode).ok);
  // What the custom decode kernel lacks sends ROCM_ATTN's decode rows to its Triton decode kernel.
  AttentionSpec s = decode;
  s.params.head_dim = 96;
  EXPECT_TRUE(supports("cpu.attn.rocm_custom", s).ok);
  s.params.head_dim = 48;
  EXPECT_TRUE(reason_has(supports("cpu.attn.rocm_custom", s), "32, 64, 96"));
  s = decode;
  s.params.num_q_heads = 64;
  EXPECT_TRUE(supports("cpu.attn.rocm_custom", s).ok);
  s = decode;
  s.params.window = 8;
  EXPECT_TRUE(supports("cpu.attn.rocm_custom", s).ok);
  s = decode;
  s.params.has_sinks = true;
  EXPECT_TRUE(supports("cpu.attn.rocm_custom", s).ok);
  EXPECT_TRUE(reason_has(supports("cpu.attn.rocm_custom", attn_spec(DType::kBF16, DType::kBF16, 16)),
                         "(k_new, v_new)"));
  s = decode;
  s.params.softcap = 30;
  EXPECT_TRUE(supports("cpu.attn.rocm_custom", s).ok);  // accepted and dropped, as ROCM_ATTN does
  s = decode;
  s.kv_dtype = DType::kF8E5M2;
  EXPECT_TRUE(reason_has(supports("cpu.attn.rocm_custom", s), "e4m3"));
  EXPECT_TRUE(supports("cpu.attn.aiter_unified_mi355x", s).ok);  // fp8_e5m2, read as e4m3fn
  EXPECT_TRUE(supports("cpu.attn.triton_unified", s).ok);
  s.kv_dtype = DType::kF8E4M3FNUZ;
  EXPECT_TRUE(reason_has(supports("cpu.attn.triton_unified", s), "e4m3fn or fp8_e5m2"));
  EXPECT_TRUE(supports("cpu.attn.aiter_unified_mi300x", s).ok);
  s = decode;
  s.params.head_dim = 16;
  EXPECT_TRUE(reason_has(supports("cpu.attn.triton_unified", s), "head sizes 32.."));
  EXPECT_TRUE(reason_has(supports("cpu.attn.aiter_unified_mi300x", s), "head sizes 32.."));
  s = decode;
  s.params.causal = false;
  EXPECT_TRUE(reason_has(supports("cpu.attn.aiter_unified_mi300x", s), "asserts causal"));
  EXPECT_TRUE(reason_has(supports("cpu.attn.triton_unified", s), "asserts causal"));
  s = decode;
  s.params.block_size = 24;
  EXPECT_TRUE(reason_has(supports("cpu.attn.triton_unified", s), "multiple of 16"));
  for (const Backend* b : registry().match("cpu.attn.*", false)) {
    EXPECT_TRUE(reason_has(b->supports(builders::attention_case(attn_spec(DType::kF32, DType::kBF16, 16), 1)),
                           "bf16 and fp16"))
        << b->name();
    EXPECT_TRUE(reason_has(b->supports(builders::attention_case(attn_spec(DType::kBF16, DType::kF32, 16), 1)),
                           "KV cache fp32"))
        << b->name();
  }
}

TEST(AttentionSupport, AiterFaDeclinesThePathsItDoesNotModel) {
  AttentionSpec decode = attn_spec(DType::kBF16, DType::kBF16, 16);
  decode.query_lens = {1, 1, 1};
  EXPECT_TRUE(supports("cpu.attn.aiter_fa", decode).ok);
  AttentionSpec windowed = decode;
  windowed.params.window = 9;
  EXPECT_TRUE(supports("cpu.attn.aiter_fa", windowed).ok);
  windowed.kv_dtype = DType::kF8E4M3FN;
  EXPECT_TRUE(supports("cpu.attn.aiter_fa", windowed).ok);
  AttentionSpec capped = decode;
  capped.params.softcap = 30;
  EXPECT_TRUE(supports("cpu.attn.aiter_fa", capped).ok);
  const std::vector<std::pair<std::function<void(AttentionSpec&)>, std::string_view>> declined = {
      {[](AttentionSpec& s) {
         s.query_lens = {3, 1, 2};
       },
       "extend path"},
      {[](AttentionSpec& s) { s.params.has_sinks = true; }, "sinks"},
      {[](AttentionSpec& s) { s.params.head_dim = 96; }, "64, 128 and 256"},
  };
  for (const auto& [edit, reason] : declined) {
    AttentionSpec s = decode;
    edit(s);
    EXPECT_TRUE(reason_has(supports("cpu.attn.aiter_fa", s), reason)) << reason;
  }
  // fp8 decode rows run paged_attention_v1's fp8 MFMAs, which convert q to the cache's fp8 without a clamp:
  // a q beyond the format's range (240 for e4m3fnuz) is declined, one inside it runs; a prefill row's q
  // never reaches that conversion.
  AttentionSpec fp8 = decode;
  fp8.kv_dtype = DType::kF8E4M3FNUZ;
  Case c = builders::attention_case(fp8, 1);
  EXPECT_TRUE(get("cpu.attn.aiter_fa").supports(c).ok);
  c.tensor("q").set({1, 0, 3}, 240.0);
  EXPECT_TRUE(get("cpu.attn.aiter_fa").supports(c).ok);
  c.tensor("q").set({1, 0, 3}, -248.0);
  EXPECT_TRUE(reason_has(get("cpu.attn.aiter_fa").supports(c), "beyond fp8_e4m3fnuz's largest value 240"));
  AttentionSpec mixed = fp8;
  mixed.query_lens = {1, 3, 1};
  Case m = with_new_kv(mixed, 1);
  m.tensor("q").set({2, 0, 0}, 1000.0);  // a token of the sequence with query length 3
  EXPECT_TRUE(get("cpu.attn.aiter_fa").supports(m).ok) << get("cpu.attn.aiter_fa").supports(m).reason;
}

// ROCM_ATTN sends the rows of sequences with query length > 1 to the Triton prefix prefill
// (chunked_prefill_paged_decode -> context_attention_fwd) and decode rows to the custom paged kernel when
// use_rocm_custom_paged_attention holds (no window past 1, no sinks, head sizes 64/128, GQA <= 16), else to
// the Triton kernel_paged_attention_2d: only the custom kernel rejects e5m2, and only for batches whose
// decode rows it runs; the Triton decode kernel skips only query lengths above 1, so a sequence of query
// length 0 in a batch it runs is declined; the prefill rows need the inputs, causal attention and a query no
// longer than its sequence.
TEST(AttentionSupport, RocmAttnRoutesRowsAsChunkedPrefillPagedDecodeDoes) {
  AttentionSpec mixed = attn_spec(DType::kBF16, DType::kBF16, 16);  // query lengths 1, 5, 1
  EXPECT_TRUE(get("cpu.attn.rocm_custom").supports(with_new_kv(mixed, 1)).ok);
  AttentionSpec prefill = mixed;
  prefill.query_lens = {3, 5, 2};
  const Backend& b = get("cpu.attn.rocm_custom");
  const std::vector<std::function<void(AttentionSpec&)>> triton_decode = {
      [](AttentionSpec& s) { s.params.window = 9; },
      [](AttentionSpec& s) { s.params.has_sinks = true; },
      [](AttentionSpec& s) { s.params.head_dim = 96; },
      [](AttentionSpec& s) { s.params.num_q_heads = 64; },
  };
  for (std::size_t i = 0; i < triton_decode.size(); ++i) {
    AttentionSpec with_decode = mixed, without = prefill;
    triton_decode[i](with_decode);
    triton_decode[i](without);
    EXPECT_TRUE(b.supports(with_new_kv(with_decode, 2)).ok)
        << i << ": " << b.supports(with_new_kv(with_decode, 2)).reason;
    EXPECT_TRUE(b.supports(with_new_kv(without, 2)).ok)
        << i << ": " << b.supports(with_new_kv(without, 2)).reason;
    // e5m2 is the custom kernel's refusal only.
    with_decode.kv_dtype = DType::kF8E5M2;
    EXPECT_TRUE(b.supports(with_new_kv(with_decode, 2)).ok)
        << i << ": " << b.supports(with_new_kv(with_decode, 2)).reason;
  }
  for (const std::int64_t window : {0, 1}) {  // both reach the custom kernel
    AttentionSpec e5 = mixed, e5_prefill = prefill;
    e5.kv_dtype = e5_prefill.kv_dtype = DType::kF8E5M2;
    e5.params.window = e5_prefill.params.window = window;
    EXPECT_TRUE(reason_has(b.supports(with_new_kv(e5, 2)), "e4m3")) << "window " << window;
    EXPECT_TRUE(b.supports(with_new_kv(e5_prefill, 2)).ok) << "window " << window;
  }
  AttentionSpec empty = mixed;
  empty.query_lens = {1, 0, 1};
  EXPECT_TRUE(b.supports(with_new_kv(empty, 5)).ok);  // the custom kernel returns for it
  empty.params.window = 9;
  EXPECT_TRUE(reason_has(b.supports(with_new_kv(empty, 5)), "query length 0"));
  const std::vector<std::pair<std::function<void(AttentionSpec&)>, std::string_view>> declined = {
      {[](AttentionSpec& s) { s.params.causal = false; }, "causally"},
      {[](AttentionSpec& s) { s.params.head_dim = 48; }, "32, 64, 96"},
      {[](AttentionSpec& s) { s.params.block_size = 64; }, "16 and 32"},
      {[](AttentionSpec& s) {
         s.query_lens = {3, 21, 2};
       },
       "query length 21 > seq_len 20"},
  };
  for (const auto& [edit, reason] : declined) {
    AttentionSpec s = prefill;
    edit(s);
    EXPECT_TRUE(reason_has(b.supports(with_new_kv(s, 3)), reason)) << reason;
  }
  AttentionSpec noncausal_decode = mixed;
  noncausal_decode.query_lens = {1, 1, 1};
  noncausal_decode.params.causal = false;  // one query sees every key either way
  EXPECT_TRUE(b.supports(with_new_kv(noncausal_decode, 4)).ok);
}

TEST(AttentionTwins, MatchTheReferenceWithinTheirDeclaredNumerics) {
  const auto specs = attention_specs();
  for (const Backend* twin : registry().match("cpu.attn.*", false)) {
    const Backend* b = &numerics_of(*twin);
    int ran = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const Case c = with_new_kv(specs[i], 100 + i);
      if (!b->supports(c).ok) continue;
      ++ran;
      std::string where;
      EXPECT_LE(attention_ratio(*b, b->numerics_for(c), c, &where), 1.0)
          << b->name() << " spec " << i << ": " << where;
    }
    EXPECT_GE(ran, 8) << b->name();
  }
}

// ROCM_ATTN's mfma4 kernel (GQA <= 4) rounds each 64-token warp's P.V to bf16 and adds the warps' results
// in fp32 truncated to bf16; its mfma16 kernel (GQA 5..16) sums the partition in fp32 and rounds once. All
// 256 logits 0 gives P = act(1 / (256 + 1e-6)) = 2^-8; V[., 0] = 4 in warp 0 and 1.5 * 2^-6 in warp 1 gives
// warp results 1 and 1.5 * 2^-8, whose sum truncates to 1 and rounds to 1 + 2^-7; the reduce keeps both.
TEST(AttentionTwins, RocmCustomMfma4TruncatesTheWarpSumWhereMfma16RoundsOnce) {
  for (const std::int64_t hq : {1, 8}) {
    AttentionSpec s = builders::one_head(DType::kBF16, 1, 256);
    s.params.num_q_heads = hq;
    s.params.head_dim = 64;
    s.poison_unused = false;
    Case c = builders::attention_case(s, 3);
    const std::vector<double> zeros(static_cast<std::size_t>(c.tensor("k_cache").numel()), 0.0);
    c.tensor("k_cache").copy_from(zeros);
    c.tensor("v_cache").copy_from(zeros);
    for (std::int64_t t = 0; t < 128; ++t) {
      const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, t / 16}));
      c.tensor("v_cache").set({page, t % 16, 0, 0}, t < 64 ? 4.0 : 1.5 / 64);
    }
    const Case out = run_clone(get("cpu.attn.rocm_custom"), c);
    for (std::int64_t h = 0; h < hq; ++h)
      EXPECT_EQ(out.tensor("o").at({0, h, 0}), hq == 1 ? 1.0 : 1.0078125) << "GQA " << hq;
  }
}

// The mfma16 ll4mi kernels (ROCM_ATTN for GQA 5..16, aiter paged_attention_v1 for every GQA) sum a warp's
// 64 exponentials per lane row (row r holds tokens 16 d + 4 r + i), then across rows as (s0 + s2) + (s1 + s3)
// (__shfl_xor 32, 16; pa_kernels.cuh:512-529 at aiter@e4048607). Token 0 with logit 0 and 63 tokens with
// logit -17 (p ~ 4.1e-8, below half an ulp of 1): added one by one to 1 each p is lost, summed per row first
// they are not. One partition, so the twin's lse is log(S).
TEST(AttentionTwins, Ll4miMfma16SumsAWarpByLaneRows) {
  const float p = std::exp2(-17.0f * 1.44269504088896340736f);
  std::array<float, 4> row{};
  for (int t = 0; t < 64; ++t) row[static_cast<std::size_t>((t % 16) / 4)] += t == 0 ? 1.0f : p;
  const float by_rows = (row[0] + row[2]) + (row[1] + row[3]);
  float in_order = 0.0f;
  for (int t = 0; t < 64; ++t) in_order += t == 0 ? 1.0f : p;
  ASSERT_NE(by_rows, in_order);
  for (const auto& [twin, hq] : {std::pair{"cpu.attn.rocm_custom", 8}, std::pair{"cpu.attn.aiter_fa", 1}}) {
    Case c = probe_case(hq, 64, 1.0, 4);
    for (std::int64_t t = 1; t < 64; ++t) set_key(c, t, -17.0);
    const Case out = run_clone(get(twin), c);
    for (std::int64_t h = 0; h < hq; ++h)
      EXPECT_EQ(out.tensor("lse").at({0, h}), static_cast<double>(std::log(by_rows)))
          << twin << " head " << h;
  }
}

// vLLM's mfma4 kernel (GQA 1..4) sums a warp's 64 exponentials per lane (tokens 16 r + 4 k + i of lane group
// k of row r, in order), then by DPP `row_ror:4`, `row_ror:8` within each row (rotate right: lane i adds lane
// (i - N) mod 16), `ds_bpermute` across rows and the two rotations again (csrc/rocm/attention.cu:1106-1134 at
// vllm 4388f06): S = (R_1 + R_2) + (R_3 + R_0), R_r = (a_1 + a_2) + (a_3 + a_0). Token 0 with logit 0 and 63
// tokens with logit -17 (p ~ 4.1e-8, below half an ulp of 1): the order shows in the lse = log(S).
TEST(AttentionTwins, Ll4miMfma4SumsAWarpByDppRotations) {
  const float p = std::exp2(-17.0f * 1.44269504088896340736f);
  const auto rotated = [](const std::array<float, 4>& a) { return (a[1] + a[2]) + (a[3] + a[0]); };
  std::array<float, 4> row{};
  for (int r = 0; r < 4; ++r) {
    std::array<float, 4> group{};
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 4; ++i) group[static_cast<std::size_t>(k)] += 16 * r + 4 * k + i == 0 ? 1.0f : p;
    row[static_cast<std::size_t>(r)] = rotated(group);
  }
  const float dpp = rotated(row);
  float in_order = 0.0f;
  for (int t = 0; t < 64; ++t) in_order += t == 0 ? 1.0f : p;
  ASSERT_NE(dpp, in_order);
  for (const std::int64_t hq : {1, 4}) {
    Case c = probe_case(hq, 64, 1.0, 15);
    for (std::int64_t t = 1; t < 64; ++t) set_key(c, t, -17.0);
    const Case out = run_clone(get("cpu.attn.rocm_custom"), c);
    for (std::int64_t h = 0; h < hq; ++h)
      EXPECT_EQ(out.tensor("lse").at({0, h}), static_cast<double>(std::log(dpp)))
          << "GQA " << hq << " head " << h;
  }
}

// Both ll4mi kernels form the partition sum as `sum += S_w * e^(m_w - M)` (pa_kernels.cuh:578-583 at
// aiter@e4048607; vLLM's mfma16 and mfma4 kernels alike), which hipcc contracts to an FMA. Warp 0 holds 64
// logits 0 (S_0 = 64, M = 0), warp 1 three logits x (S_1 = 3, weight e^x): where rounding 3 e^x before the
// add changes log(S), the twin must keep the FMA's value. One partition, so the twin's lse is log(S).
TEST(AttentionTwins, Ll4miPartitionSumIsAnFma) {
  float x = 0.0f, fused = 0.0f;
  for (int scale = 16; scale <= 128 && x == 0.0f; scale *= 2)
    for (int k = 1; k < 256 && x == 0.0f; ++k) {
      const float xi = -static_cast<float>(k) / static_cast<float>(scale);  // exact in bf16
      const float e = std::exp2(xi * 1.44269504088896340736f);
      if (std::log(std::fma(3.0f, e, 64.0f)) != std::log(64.0f + 3.0f * e)) {
        x = xi;
        fused = std::fma(3.0f, e, 64.0f);
      }
    }
  ASSERT_NE(x, 0.0f);
  for (const char* twin : {"cpu.attn.rocm_custom", "cpu.attn.aiter_fa"}) {
    Case c = probe_case(1, 67, 1.0, 6);
    for (std::int64_t t = 64; t < 67; ++t) set_key(c, t, static_cast<double>(x));
    const Case out = run_clone(get(twin), c);
    EXPECT_EQ(out.tensor("lse").at({0, 0}), static_cast<double>(std::log(fused))) << twin << " x " << x;
  }
}

// The ll4mi reduce sums 16 partition slots on a short context; the 15 past the only partition repeat its
// output with weight 0 (pa_kernels.cuh:1016-1056 at aiter@e4048607, vLLM's reduce alike), so an infinite V at
// a visible key, an infinite partition output, becomes NaN: `Inf * w + Inf * 0`. Repaired, the twin keeps
// Inf.
TEST(AttentionTwins, Ll4miReducePaddedSlotsTurnAnInfiniteOutputIntoNaN) {
  for (const char* twin : {"cpu.attn.rocm_custom", "cpu.attn.aiter_fa"}) {
    Case c = probe_case(1, 64, 1.0, 8);
    const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, 0}));
    c.tensor("v_cache").set({page, 5, 0, 0}, std::numeric_limits<double>::infinity());
    const Case out = run_clone(get(twin), c);
    const auto fixed = get(twin).without_defects({"reduce_padded_slots"});
    ASSERT_NE(fixed, nullptr) << twin << " does not model the padded reduce slots";
    const Case repaired = run_clone(*fixed, c);
    EXPECT_TRUE(std::isnan(out.tensor("o").at({0, 0, 0}))) << twin;
    EXPECT_EQ(repaired.tensor("o").at({0, 0, 0}), std::numeric_limits<double>::infinity()) << twin;
    EXPECT_EQ(out.tensor("o").at({0, 0, 1}), repaired.tensor("o").at({0, 0, 1})) << twin;
  }
}

// The ll4mi reduce forms the global exp sum G in its first warp: lane l holds partition l's weight
// w_l = S_l * expf(M_l - M) (0 past the last partition), then __shfl_xor over 32, 16, ..., 1 (attention.cu:
// 1344-1373 at vllm 4388f06; pa_kernels.cuh _paged_attention_ll4mi_reduce_kernel at aiter@e4048607): with
// three partitions G = (w0 + w2) + w1, not (w0 + w1) + w2. Partition j's 256 keys all have logit x_j, so S_j
// = 256; x_0 = 0 is the max, and the twin's lse is log(G).
TEST(AttentionTwins, Ll4miReduceSumsThePartitionWeightsByButterfly) {
  float x1 = 0.0f, x2 = 0.0f, tree = 0.0f;
  for (int a = 1; a < 200 && tree == 0.0f; ++a)
    for (int b = 1; b < 200 && tree == 0.0f; ++b) {
      const float w1 = 256.0f * std::exp(-static_cast<float>(a) / 16.0f);
      const float w2 = 256.0f * std::exp(-static_cast<float>(b) / 16.0f);
      if (std::log((256.0f + w2) + w1) != std::log((256.0f + w1) + w2)) {
        x1 = -static_cast<float>(a) / 16.0f;
        x2 = -static_cast<float>(b) / 16.0f;
        tree = (256.0f + w2) + w1;
      }
    }
  ASSERT_NE(tree, 0.0f);
  for (const auto& [twin, hq] : {std::pair{"cpu.attn.rocm_custom", 1}, std::pair{"cpu.attn.rocm_custom", 8},
                                 std::pair{"cpu.attn.aiter_fa", 1}}) {
    Case c = probe_case(hq, 768, 1.0, 10);
    for (std::int64_t t = 256; t < 768; ++t) set_key(c, t, static_cast<double>(t < 512 ? x1 : x2));
    const Case out = run_clone(get(twin), c);
    for (std::int64_t h = 0; h < hq; ++h)
      EXPECT_EQ(out.tensor("lse").at({0, h}), static_cast<double>(std::log(tree)))
          << twin << " x1 " << x1 << " x2 " << x2;
  }
}

// Past seq_len the ll4mi kernels load V from the last context block at slot t % block_size: mfma16 (ROCM_ATTN
// GQA 5..16, aiter paged_attention_v1) for every token to the partition's end (attention.cu:479-490 at vllm
// 4388f06, pa_kernels.cuh:274-287 at aiter@e4048607), mfma4 (GQA 1..4) for every token of a warp that starts
// below seq_len (attention.cu:892-899), and multiply it with P = 0. With seq_len 20 and blocks of 16 the
// tokens 32..63 re-read the last block's valid slots, so an infinite V at visible key 17 (reference and P.V
// +inf) also meets P = 0: NaN. The padded reduce slots (a separate defect, repaired here) would hide it.
TEST(AttentionTwins, Ll4miReReadsTheLastBlocksValidSlotsPastSeqLen) {
  for (const auto& [twin, hq] : {std::pair{"cpu.attn.rocm_custom", 1}, std::pair{"cpu.attn.rocm_custom", 8},
                                 std::pair{"cpu.attn.aiter_fa", 1}}) {
    Case c = probe_case(hq, 20, 1.0, 9);
    const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, 1}));
    c.tensor("v_cache").set({page, 1, 0, 0}, std::numeric_limits<double>::infinity());
    const auto kernel = get(twin).without_defects({"reduce_padded_slots"});
    ASSERT_NE(kernel, nullptr) << twin;
    const auto repaired = get(twin).without_defects({"reduce_padded_slots", "page_tail_unmasked"});
    const Case out = run_clone(*kernel, c);
    const Case fixed = run_clone(*repaired, c);
    for (std::int64_t h = 0; h < hq; ++h) {
      EXPECT_TRUE(std::isnan(out.tensor("o").at({0, h, 0}))) << twin << " GQA " << hq;
      EXPECT_EQ(fixed.tensor("o").at({0, h, 0}), std::numeric_limits<double>::infinity()) << twin;
      EXPECT_EQ(out.tensor("o").at({0, h, 1}), fixed.tensor("o").at({0, h, 1})) << twin;
    }
  }
}

// The ll4mi kernels read q at `q + token * q_stride + head * HEAD_SIZE` (attention.cu:391-392, 905-917 at
// vllm 4388f06; pa_kernels.cuh:137-140 at aiter@e4048607) and their reduce writes o at `out + (token *
// num_heads + head) * HEAD_SIZE` (attention.cu:1474-1481; pa_kernels.cuh:1101-1111): q's token stride is
// honoured, its head stride and o's strides are not. On a q and o with heads 8 elements apart the twin must
// read and write those addresses: what it writes at o's dense addresses is what it computes for a contiguous
// q holding q's storage read densely. Repaired, it honours the strides.
TEST(AttentionTwins, Ll4miAddressQAndOAsDenseHeads) {
  for (const char* twin : {"cpu.attn.rocm_custom", "cpu.attn.aiter_fa"}) {
    AttentionSpec s = attn_spec(DType::kBF16, DType::kBF16, 16);
    s.query_lens = {1, 1, 1};
    s.poison_unused = false;  // finite outputs, compared by value
    const Case plain = builders::attention_case(s, 11);
    const std::int64_t t = 3, hq = s.params.num_q_heads, d = s.params.head_dim, pad = 8;
    Case padded = plain.clone();
    for (const char* name : {"q", "o"}) {
      Tensor x = Tensor::padded(DType::kBF16, {t, hq, d}, d + pad, 3, d + 8);
      std::vector<double> fill(static_cast<std::size_t>(x.storage()->numel()));
      for (std::size_t i = 0; i < fill.size(); ++i) fill[i] = 0.25 * static_cast<double>(i % 7) - 0.75;
      x.storage()->store_f64(0, 1, x.storage()->numel(), fill.data());
      padded.tensors[name] = x;
    }
    padded.tensor("q").copy_from(plain.tensor("q").to_f64());
    const Tensor& pq = padded.tensor("q");
    const Tensor dense_q = Tensor::view(pq.storage(), {t, hq, d}, {pq.strides()[0], d, 1}, pq.offset());
    Case as_read = plain.clone();
    as_read.tensor("q").copy_from(dense_q.to_f64());
    const Case out = run_clone(get(twin), padded);
    const Case want = run_clone(get(twin), as_read);
    const Tensor& po = out.tensor("o");
    const Tensor dense_o = Tensor::view(po.storage(), {t, hq, d}, {hq * d, d, 1}, po.offset());
    EXPECT_EQ(dense_o.to_f64(), want.tensor("o").to_f64()) << twin;
    const auto repaired = get(twin).without_defects({"heads_addressed_dense"});
    ASSERT_NE(repaired, nullptr) << twin;
    EXPECT_EQ(run_clone(*repaired, padded).tensor("o").to_f64(),
              run_clone(*repaired, plain).tensor("o").to_f64())
        << twin;
  }
}

// ROCM_AITER_FA sends decode rows of a layer with a sliding window to aiter's Triton unified_attention
// (rocm_aiter_fa.py AiterFlashAttentionImpl.forward, `use_unified_attention`, at vllm 002d0eb6), called on
// the decode rows with max_seqlen_q = 1: a window forces its 2D path, so the aiter unified twins' decode
// numerics (tile min(64, next_pow2(block_size)), exp2 with folded scales) whatever the CU count.
TEST(AttentionTwins, AiterFaWindowedDecodeRunsTheUnifiedKernel) {
  for (DType kv : {DType::kBF16, DType::kF8E4M3FNUZ}) {
    AttentionSpec s = attn_spec(DType::kBF16, kv, 16);
    s.query_lens = {1, 1, 1};
    s.params.window = 40;
    s.poison_unused = false;
    if (kv != DType::kBF16) s.params.k_scale = s.params.v_scale = 0.75;
    const Case c = builders::attention_case(s, 12);
    ASSERT_TRUE(get("cpu.attn.aiter_fa").supports(c).ok) << dtype_name(kv);
    const Case fa = run_clone(get("cpu.attn.aiter_fa"), c);
    EXPECT_FALSE(outputs_differ(fa, run_clone(get("cpu.attn.aiter_unified_mi300x"), c))) << dtype_name(kv);
    // Without a window the decode rows run paged_attention_v1, another arithmetic.
    AttentionSpec open = s;
    open.params.window = 0;
    if (kv == DType::kBF16) {
      const Case c0 = builders::attention_case(open, 12);
      EXPECT_TRUE(outputs_differ(run_clone(get("cpu.attn.aiter_fa"), c0),
                                 run_clone(get("cpu.attn.aiter_unified_mi300x"), c0)));
    }
  }
}

// paged_attention_v1 applies the softcap as ck_tile's LogitsSoftCap, `c * tanhf(s * rcp)` with
// rcp = 1.f / c formed on the host (pa_v1.cpp.jinja:64-68, pa_kernels.cuh:465-484 at aiter@e4048607; CK's
// variants.hpp read at composable_kernel 23d348a6). One key: the twin's lse is the capped logit itself. A
// logit where `s * rcp` and `s / c` give different tanh arguments tells the two apart.
TEST(AttentionTwins, AiterFaDecodeSoftcapIsLogitsSoftCapWithTheHostReciprocal) {
  const float cap = 30.0f, rcp = 1.0f / cap;
  float x = 0.0f, expected = 0.0f;
  for (int k = 1; k < 4096 && x == 0.0f; ++k) {
    const float xi = static_cast<float>(k) / 16.0f;  // exact in bf16 up to 256
    const float with_rcp = cap * std::tanh(xi * rcp);
    if (with_rcp != cap * std::tanh(xi / cap)) {
      x = xi;
      expected = with_rcp;
    }
  }
  ASSERT_NE(x, 0.0f);
  Case c = probe_case(1, 1, 1.0, 13);
  std::get<AttentionParams>(c.params).softcap = cap;
  set_key(c, 0, static_cast<double>(x));
  ASSERT_TRUE(get("cpu.attn.aiter_fa").supports(c).ok);
  EXPECT_EQ(run_clone(get("cpu.attn.aiter_fa"), c).tensor("lse").at({0, 0}), static_cast<double>(expected))
      << "x " << x;
}

// ROCM_ATTN keeps the layer's logits_soft_cap and passes it to no kernel (rocm_attn.py RocmAttentionImpl at
// vllm f65b079; chunked_prefill_paged_decode takes none), and its custom decode kernel has no soft cap: a
// softcap case's decode rows give exactly what they give uncapped. Repaired (defect softcap_dropped), the
// logits are capped.
TEST(AttentionTwins, RocmCustomDropsTheSoftcap) {
  AttentionSpec s = attn_spec(DType::kBF16, DType::kBF16, 16);
  s.query_lens = {1, 1, 1};
  s.q_stddev = 4.0;
  s.poison_unused = false;
  const Case plain = builders::attention_case(s, 16);
  Case capped = plain.clone();
  std::get<AttentionParams>(capped.params).softcap = 5.0;
  ASSERT_TRUE(get("cpu.attn.rocm_custom").supports(capped).ok);
  const Case plain_out = run_clone(get("cpu.attn.rocm_custom"), plain);
  EXPECT_FALSE(outputs_differ(run_clone(get("cpu.attn.rocm_custom"), capped), plain_out));
  const auto repaired = get("cpu.attn.rocm_custom").without_defects({"softcap_dropped"});
  ASSERT_NE(repaired, nullptr);
  EXPECT_TRUE(outputs_differ(run_clone(*repaired, capped), plain_out));
  // The prefill/extend rows: context_attention_fwd takes no softcap either.
  s.query_lens = {3, 5, 2};
  const Case prefill = with_new_kv(s, 17);
  Case prefill_capped = prefill.clone();
  std::get<AttentionParams>(prefill_capped.params).softcap = 5.0;
  ASSERT_TRUE(get("cpu.attn.rocm_custom").supports(prefill_capped).ok);
  const Case prefill_out = run_clone(get("cpu.attn.rocm_custom"), prefill);
  EXPECT_FALSE(outputs_differ(run_clone(get("cpu.attn.rocm_custom"), prefill_capped), prefill_out));
  EXPECT_TRUE(outputs_differ(run_clone(*repaired, prefill_capped), prefill_out));
}

// ROCM_AITER_FA's prefill and extend passes call flash_attn_varlen_func without the layer's logits soft cap
// (rocm_aiter_fa.py forward, extend_forward at vllm 002d0eb6): a prefill row of a softcap case gives exactly
// what it gives uncapped. Repaired (defect softcap_dropped), the passes cap the logits.
TEST(AttentionTwins, AiterFaPrefillPassesDropTheSoftcap) {
  AttentionSpec s = attn_spec(DType::kBF16, DType::kBF16, 16);
  s.query_lens = {1, 7};
  s.seq_lens = {37, 7};
  s.q_stddev = 4.0;
  s.poison_unused = false;
  Case c = builders::attention_case(s, 14);
  // The new tokens' inputs: the cache's values of the prefill sequence's tokens (a bf16 cache stores them).
  const std::int64_t hkv = s.params.num_kv_heads, d = s.params.head_dim;
  for (const auto& [input, cache] : {std::pair{"k_new", "k_cache"}, std::pair{"v_new", "v_cache"}}) {
    Tensor x = Tensor::zeros(DType::kBF16, {8, hkv, d});
    for (std::int64_t j = 0; j < 7; ++j) {
      const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({1, j / 16}));
      for (std::int64_t g = 0; g < hkv; ++g)
        for (std::int64_t i = 0; i < d; ++i) x.set({1 + j, g, i}, c.tensor(cache).at({page, j % 16, g, i}));
    }
    c.tensors[input] = x;
  }
  Case capped = c.clone();
  std::get<AttentionParams>(capped.params).softcap = 5.0;
  ASSERT_TRUE(get("cpu.attn.aiter_fa").supports(capped).ok);
  const Case plain_out = run_clone(get("cpu.attn.aiter_fa"), c);
  const Case capped_out = run_clone(get("cpu.attn.aiter_fa"), capped);
  const auto prefill_rows = [](const Case& x) {
    std::vector<double> v;
    for (std::int64_t tok = 1; tok < 8; ++tok)
      for (std::int64_t h = 0; h < x.tensor("o").size(1); ++h)
        for (std::int64_t i = 0; i < x.tensor("o").size(2); ++i) v.push_back(x.tensor("o").at({tok, h, i}));
    return v;
  };
  EXPECT_EQ(prefill_rows(capped_out), prefill_rows(plain_out));
  EXPECT_NE(capped_out.tensor("o").at({0, 0, 0}), plain_out.tensor("o").at({0, 0, 0}));  // decode row capped
  const auto repaired = get("cpu.attn.aiter_fa").without_defects({"softcap_dropped"});
  ASSERT_NE(repaired, nullptr);
  EXPECT_NE(prefill_rows(run_clone(*repaired, capped)), prefill_rows(plain_out));
}

// ROCM_AITER_UNIFIED_ATTN at vllm@00e5aa02 accepts block sizes that are multiples of 16 and head sizes from
// 32 up, and lists fp8_e5m2 (rocm_aiter_unified_attn.py supports_block_size, supports_head_size,
// supported_kv_cache_dtypes); aiter's select_3d_config (unified_attention.py at aiter@e4048607) asserts
// TILE_SIZE % block_size == 0 when min(64, next_pow2(block_size)) exceeds the block: block 48 on the 3D path
// (no window, max_seqlen_k > 512, a 2D grid of at most 4 programs per CU) only.
TEST(AttentionSupport, AiterUnifiedAcceptsWhatVllmsBackendAccepts) {
  for (const char* twin : {"cpu.attn.aiter_unified_mi300x", "cpu.attn.aiter_unified_mi355x"}) {
    AttentionSpec s = attn_spec(DType::kBF16, DType::kBF16, 64);
    s.query_lens = {1, 1, 1};
    for (const std::int64_t bs : {48, 64, 80, 128, 256}) {
      s.params.block_size = bs;
      EXPECT_TRUE(supports(twin, s).ok) << twin << " block " << bs;  // max seq_len 300: the 2D path
    }
    for (const std::int64_t d : {320, 512, 1024}) {
      AttentionSpec w = attn_spec(DType::kBF16, DType::kBF16, 16);
      w.params.head_dim = d;
      EXPECT_TRUE(supports(twin, w).ok) << twin << " head " << d;
    }
    AttentionSpec e = attn_spec(DType::kBF16, DType::kF8E5M2, 16);
    EXPECT_TRUE(supports(twin, e).ok) << twin;
    // One decode sequence of 600 keys, 2 KV heads: 2 programs, far below 4 per CU: the 3D path.
    AttentionSpec three = attn_spec(DType::kBF16, DType::kBF16, 48);
    three.query_lens = {1};
    three.seq_lens = {600};
    EXPECT_TRUE(reason_has(supports(twin, three), "TILE_SIZE needs to be divisible by block_size")) << twin;
    three.params.block_size = 64;
    EXPECT_TRUE(supports(twin, three).ok) << twin;
    three.params.block_size = 48;
    three.params.window = 128;  // a window keeps the 2D path, which has no such assert
    EXPECT_TRUE(supports(twin, three).ok) << twin;
  }
}

// vLLM views every quantised cache as the platform's fp8 dtype (rocm_aiter_unified_attn.py forward:
// key_cache.view(self.fp8_dtype), current_platform.fp8_dtype()), so an fp8_e5m2 cache's bytes reach the
// kernel as e4m3: byte 0x3C, 1.0 in e5m2 (exponent 15 - 15, mantissa 0), is 0 0111 100 in e4m3, 1.5 * 2^(7 -
// 8) = 0.75 as e4m3fnuz (bias 8, MI300X) and 1.5 * 2^(7 - 7) = 1.5 as e4m3fn (bias 7, MI355X). One key: o is
// the value as decoded; repaired, 1.0.
TEST(AttentionTwins, AiterUnifiedReadsAnE5m2CacheAsThePlatformsE4m3) {
  AttentionSpec s = builders::one_head(DType::kBF16, 1, 1);
  s.kv_dtype = DType::kF8E5M2;
  s.poison_unused = false;
  Case c = builders::attention_case(s, 3);
  c.tensor("k_cache").copy_from(
      std::vector<double>(static_cast<std::size_t>(c.tensor("k_cache").numel()), 0.0));
  std::fill(c.tensor("v_cache").storage()->bytes.begin(), c.tensor("v_cache").storage()->bytes.end(),
            std::byte{0x3C});
  for (const auto& [twin, expected] :
       {std::pair{"cpu.attn.aiter_unified_mi300x", 0.75}, std::pair{"cpu.attn.aiter_unified_mi355x", 1.5}}) {
    const Backend& b = get(twin);
    ASSERT_TRUE(b.supports(c).ok) << twin;
    EXPECT_EQ(run_clone(b, c).tensor("o").at({0, 0, 0}), expected) << twin;
    const auto repaired = b.without_defects({"e5m2_read_as_e4m3"});
    ASSERT_NE(repaired, nullptr) << twin;
    EXPECT_EQ(run_clone(*repaired, c).tensor("o").at({0, 0, 0}), 1.0) << twin;
  }
}

// From head size 512 aiter's use_2d_kernel takes the 2D path for every batch with a prefill
// (unified_attention .py at aiter@e4048607), where the prefill tile is 16. Block 64, one sequence of 600 keys
// with 2 queries: without that rule the batch would take the 3D path (max_seqlen_k > 512, 2 programs), whose
// tile min(64, 64) = 64 equals the block and loads the last page unmasked, so the NaN poison past seq_len
// would reach P.V; on the 2D path's 16-key tiles the tail is masked and the output finite.
TEST(AttentionTwins, AiterUnifiedWideHeadsPrefillOnThe2dPath) {
  AttentionSpec s = builders::one_head(DType::kBF16, 2, 600);
  s.params.head_dim = 512;
  s.params.block_size = 64;
  s.params.scale = 1.0 / std::sqrt(512.0);
  ASSERT_TRUE(s.poison_unused);
  const Case c = builders::attention_case(s, 5);
  for (const char* twin : {"cpu.attn.aiter_unified_mi300x", "cpu.attn.aiter_unified_mi355x"}) {
    const Backend& b = get(twin);
    ASSERT_TRUE(b.supports(c).ok) << twin;
    const Case out = run_clone(b, c);
    for (const double v : out.tensor("o").to_f64()) ASSERT_TRUE(std::isfinite(v)) << twin;
  }
}

// aiter's 2D kernel declares `scale` a tl.constexpr, so `qk_scale = scale * RCP_LN2` is folded in double and
// rounded to fp32 once (_triton_kernels/attention/unified_attention.py at aiter@e4048607, lines 66 and
// 111-112); its 3D kernel multiplies a runtime fp32 scale (475, 524). One key with q.k = 1 and k_scale 1
// leaves M = qk_scale and L = 1, so the twin's lse, M * ln 2, shows the multiplier's fp32 bits: a scale
// 1/sqrt(d) where one and two roundings give different lse tells the two apart.
TEST(AttentionTwins, AiterUnified2dFoldsTheConstexprScaleInDouble) {
  constexpr double kRcpLn2 = 1.4426950408889634;
  constexpr float kLn2 = 0.69314718055994530942f;
  double scale = 0.0;
  float expected = 0.0f;
  for (int d = 2; d <= 4096 && scale == 0.0; ++d) {
    const double sc = 1.0 / std::sqrt(static_cast<double>(d));
    const float once = static_cast<float>(sc * kRcpLn2) * kLn2;
    const float twice = static_cast<float>(sc) * static_cast<float>(kRcpLn2) * kLn2;
    if (once != twice) {
      scale = sc;
      expected = once;
    }
  }
  ASSERT_NE(scale, 0.0);
  Case c = probe_case(1, 1, scale, 5);  // seq_len 1 <= 512: the 2D kernel
  set_key(c, 0, 1.0);
  for (const char* twin : {"cpu.attn.aiter_unified_mi300x", "cpu.attn.aiter_unified_mi355x"}) {
    const Case out = run_clone(get(twin), c);
    EXPECT_EQ(out.tensor("lse").at({0, 0}), static_cast<double>(expected)) << twin << " scale " << scale;
  }
}

// aiter's kernels update `L = L * alpha + l_j` (unified_attention.py:409, 816 at aiter@e4048607), which
// Triton's AMD backend contracts to an FMA as the NVIDIA one does (enable_fp_fusion defaults to true). Tile 0
// (block 16 = tile 16) holds three keys at log2-domain logit s_a and 13 whose P underflows to 0 (L = 3);
// tile 1 one key at 0 (alpha = 2^s_a, l_j = 1): where rounding 3 alpha before the add changes the lse, the
// twin must keep the FMA's value.
TEST(AttentionTwins, AiterUnifiedRunningSumIsAnFma) {
  constexpr float kLn2 = 0.69314718055994530942f;
  const float qk = static_cast<float>(1.4426950408889634);  // scale 1 folded with RCP_LN2 (2D)
  float a = 0.0f, expected = 0.0f;
  for (int k = 1; k < 256 && a == 0.0f; ++k) {
    const float ak = -static_cast<float>(k) / 16.0f;  // exact in bf16
    const float alpha = std::exp2(qk * ak);
    const float fused = std::log2(std::fma(3.0f, alpha, 1.0f)) * kLn2;
    if (fused != std::log2(3.0f * alpha + 1.0f) * kLn2) {
      a = ak;
      expected = fused;
    }
  }
  ASSERT_NE(a, 0.0f);
  Case c = probe_case(1, 17, 1.0, 7);
  for (std::int64_t t = 0; t < 16; ++t) set_key(c, t, t < 3 ? static_cast<double>(a) : -200.0);
  for (const char* twin : {"cpu.attn.aiter_unified_mi300x", "cpu.attn.aiter_unified_mi355x"}) {
    const Case out = run_clone(get(twin), c);
    EXPECT_EQ(out.tensor("lse").at({0, 0}), static_cast<double>(expected)) << twin << " a " << a;
  }
}

// The builders poison every unused slot with NaN; the same case without poison must give the same bits,
// except for a twin that reproduces a kernel loading whole pages (aiter unified with tile == block size):
// there the poison must show, and must vanish once that defect is repaired.
TEST(AttentionTwins, NeverReadPoisonedSlots) {
  for (const Backend* b : registry().match("cpu.attn.*", false)) {
    const auto defects = b->modelled_defects();
    const bool reads_tail = std::find(defects.begin(), defects.end(), "page_tail_unmasked") != defects.end();
    for (DType kv : {DType::kBF16, DType::kF8E4M3FNUZ, DType::kF8E4M3FN}) {
      AttentionSpec s = attn_spec(DType::kBF16, kv, 16);
      s.query_lens = {1, 1, 1};
      AttentionSpec clean = s;
      clean.poison_unused = false;
      const Case poisoned = builders::attention_case(s, 7);
      if (!b->supports(poisoned).ok) continue;
      const Case unpoisoned = builders::attention_case(clean, 7);
      EXPECT_EQ(outputs_differ(run_clone(*b, poisoned), run_clone(*b, unpoisoned)), reads_tail) << b->name();
      if (reads_tail) {
        const auto repaired = b->without_defects({"page_tail_unmasked"});
        EXPECT_FALSE(outputs_differ(run_clone(*repaired, poisoned), run_clone(*repaired, unpoisoned)))
            << b->name();
      }
    }
  }
}

// The window: ROCM_ATTN passes the first element of its (window - 1, 0) tuple as SLIDING_WINDOW
// (rocm_attn.py RocmAttentionImpl at f65b0793; chunked_prefill_paged_decode hands it on), and the kernel
// keeps `pos - key < SLIDING_WINDOW` (prefix_prefill.py:305-310): window - 1 keys, and none of the window
// for 1. All logits 0 make o the mean of the visible V[0] = key index: row 7 of 8 with window 4 sees
// keys 5..7 (mean 6) where the window's 4..7 give 5.5; window 1 sees all 8 (3.5) where only key 7 (7)
// belongs. Repaired, the twin keeps the window. The inputs, not the cache rows of the new tokens (-1000), are
// read.
TEST(AttentionTwins, RocmAttnPrefillWindowIsOneShort) {
  const auto fixed = get("cpu.attn.rocm_custom").without_defects({"window_one_short"});
  ASSERT_NE(fixed, nullptr);
  for (const auto& [w, faulty, repaired] : {std::tuple{4, 6.0, 5.5}, std::tuple{1, 3.5, 7.0}}) {
    Case c = prefill_probe(8, 0, w);
    for (std::int64_t n = 0; n < 8; ++n) c.tensor("v_new").set({n, 0, 0}, static_cast<double>(n));
    EXPECT_EQ(run_clone(get("cpu.attn.rocm_custom"), c).tensor("o").at({7, 0, 0}), faulty) << "window " << w;
    EXPECT_EQ(run_clone(*fixed, c).tensor("o").at({7, 0, 0}), repaired) << "window " << w;
  }
}

// Masked keys stay in the tile's P.V with P = 0 (prefix_prefill.py:261-263, 329-331): an infinite V at a new
// token after the row (causal) or at a context key outside the row's window makes the row NaN. Repaired,
// row 1 is the mean of V[0] over keys 0 and 1 of the new tokens (ctx 0) or of its window (ctx 40, window 3
// after the defect's own repair: keys 39..41).
TEST(AttentionTwins, RocmAttnPrefillMaskedPTimesV) {
  const auto fixed = get("cpu.attn.rocm_custom").without_defects({"masked_p_times_v", "window_one_short"});
  ASSERT_NE(fixed, nullptr);
  const double inf = std::numeric_limits<double>::infinity();
  Case causal = prefill_probe(4, 0);
  for (std::int64_t n = 0; n < 4; ++n) causal.tensor("v_new").set({n, 0, 0}, n == 3 ? inf : double(n));
  EXPECT_TRUE(std::isnan(run_clone(get("cpu.attn.rocm_custom"), causal).tensor("o").at({1, 0, 0})));
  EXPECT_EQ(run_clone(*fixed, causal).tensor("o").at({1, 0, 0}), 0.5);
  Case window = prefill_probe(2, 40, 3);
  set_cache(window, "v_cache", 0, inf);  // far outside the window
  set_cache(window, "v_cache", 39, 3.0);
  window.tensor("v_new").set({0, 0, 0}, 6.0);
  EXPECT_TRUE(std::isnan(run_clone(get("cpu.attn.rocm_custom"), window).tensor("o").at({1, 0, 0})));
  EXPECT_EQ(run_clone(*fixed, window).tensor("o").at({1, 0, 0}), 3.0);  // (3 + 6 + 0) / 3
}

// tl.max / tl.maximum drop NaN (maxnum), and the kernel zeroes p and alpha where the max is -inf
// (prefix_prefill.py:235-240): row 0 of a prefill sees key 0 alone, and a NaN there leaves m = -inf, so the
// row writes 0 where the math gives NaN (defect nan_row_zeroed). Row 1 also sees a finite key: NaN either
// way. Repaired, the max propagates the NaN.
TEST(AttentionTwins, RocmAttnPrefillRowOfNanLogitsIsZeroed) {
  Case c = prefill_probe(2, 0);
  c.tensor("k_new").set({0, 0, 0}, std::numeric_limits<double>::quiet_NaN());
  c.tensor("v_new").set({0, 0, 1}, 3.0);
  const Case out = run_clone(get("cpu.attn.rocm_custom"), c);
  const auto fixed = get("cpu.attn.rocm_custom").without_defects({"nan_row_zeroed"});
  ASSERT_NE(fixed, nullptr);
  const Case repaired = run_clone(*fixed, c);
  EXPECT_EQ(out.tensor("o").at({0, 0, 1}), 0.0);
  EXPECT_EQ(out.tensor("lse").at({0, 0}), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(repaired.tensor("o").at({0, 0, 1})));
  EXPECT_TRUE(std::isnan(out.tensor("o").at({1, 0, 1})));
  EXPECT_TRUE(std::isnan(repaired.tensor("o").at({1, 0, 1})));
}

// Tile widths and the running sum: three keys at logit a (< 0) first, then one at 0 at position 20 of the
// context (ctx 40) or of the new tokens (ctx 0, row 69 of 70). In one tile of 32 context keys (BLOCK_SIZE =
// 32, prefix_prefill.py context_attention_fwd) or 64 new-token keys (BLOCK_N) the sum is one tl.sum,
// ((e + e) + e) + 1 with e = exp(a) (sequential, as the twin sums); with tiles of 16 it would be the running
// update fma(3, e, 1). Every other key has logit -200 (p = 0 in fp32). The lse the twin reports is log(l):
// for an `a` where the two sums differ, it shows the tile width.
TEST(AttentionTwins, RocmAttnPrefillTilesOf32ContextAnd64NewKeys) {
  float a = 0.0f, one_tile = 0.0f;
  for (int k = 1; k < 512 && a == 0.0f; ++k) {
    const float ak = -static_cast<float>(k) / 32.0f;  // exact in bf16
    const float e = std::exp2(ak * 1.44269504088896340736f);
    const float summed = ((e + e) + e) + 1.0f;
    if (std::log(summed) != std::log(std::fma(3.0f, e, 1.0f))) {
      a = ak;
      one_tile = summed;
    }
  }
  ASSERT_NE(a, 0.0f);
  Case context = prefill_probe(2, 40);
  Case fresh = prefill_probe(70, 0);
  for (std::int64_t t = 0; t < 40; ++t) set_cache(context, "k_cache", t, t < 3 ? a : t == 20 ? 0.0 : -200.0);
  for (std::int64_t n = 0; n < 2; ++n) context.tensor("k_new").set({n, 0, 0}, -200.0);
  for (std::int64_t n = 0; n < 70; ++n)
    fresh.tensor("k_new").set({n, 0, 0}, n < 3 ? a : n == 20 ? 0.0 : -200.0);
  EXPECT_EQ(run_clone(get("cpu.attn.rocm_custom"), context).tensor("lse").at({0, 0}),
            static_cast<double>(std::log(one_tile)))
      << "a " << a;
  EXPECT_EQ(run_clone(get("cpu.attn.rocm_custom"), fresh).tensor("lse").at({69, 0}),
            static_cast<double>(std::log(one_tile)))
      << "a " << a;
}

// The running sum across tiles, `l_i = l_i * alpha + l_ij` (prefix_prefill.py:265, 333), is one FMA (Triton
// contracts it): three context keys at a in the first 32-key tile, the key at 0 in the second (position 32).
// Where rounding 3 alpha first changes log(l), the twin must keep the FMA's value.
TEST(AttentionTwins, RocmAttnPrefillRunningSumIsAnFma) {
  float a = 0.0f, fused = 0.0f;
  for (int k = 1; k < 512 && a == 0.0f; ++k) {
    const float ak = -static_cast<float>(k) / 32.0f;
    const float alpha = std::exp2(ak * 1.44269504088896340736f);
    if (std::log(std::fma(3.0f, alpha, 1.0f)) != std::log(3.0f * alpha + 1.0f)) {
      a = ak;
      fused = std::fma(3.0f, alpha, 1.0f);
    }
  }
  ASSERT_NE(a, 0.0f);
  Case c = prefill_probe(2, 40);
  for (std::int64_t t = 0; t < 40; ++t) set_cache(c, "k_cache", t, t < 3 ? a : t == 32 ? 0.0 : -200.0);
  for (std::int64_t n = 0; n < 2; ++n) c.tensor("k_new").set({n, 0, 0}, -200.0);
  EXPECT_EQ(run_clone(get("cpu.attn.rocm_custom"), c).tensor("lse").at({0, 0}),
            static_cast<double>(std::log(fused)))
      << "a " << a;
}

// ROCM_AITER_FA's extend of a windowed layer (extend_for_sliding_window, rocm_aiter_fa.py at 002d0eb6): the
// last min(seq_len, query length + window) tokens are gathered from the cache, the new tokens included, and
// attended in one causal pass with window (w - 1, 0). One head of 64, bf16, 4 new tokens after a context of
// 40, window 3, all logits 0 (q = e_0, keys 0): o is the mean of V[0] over the row's 3 keys. V[0] = key index
// in the inputs and the context's cache slots, -1000 in the new tokens' cache slots (a real act cache holds
// the inputs there; the probe tells the two apart). Row 3 (position 43) sees keys 41..43: -1000 from the
// cache, 42 from the inputs once the defect is repaired; row 0 sees context keys 38, 39 and new token 40: 39
// repaired.
TEST(AttentionTwins, AiterFaWindowedExtendAttendsTheWindowGatheredFromTheCache) {
  AttentionSpec s = builders::one_head(DType::kBF16, 4, 44);
  s.params.head_dim = 64;
  s.params.window = 3;
  s.poison_unused = false;
  Case c = builders::attention_case(s, 13);
  for (const char* name : {"k_cache", "v_cache", "q"})
    c.tensor(name).copy_from(std::vector<double>(static_cast<std::size_t>(c.tensor(name).numel()), 0.0));
  for (std::int64_t j = 0; j < 4; ++j) c.tensor("q").set({j, 0, 0}, 1.0);
  for (std::int64_t t = 0; t < 44; ++t) set_cache(c, "v_cache", t, t < 40 ? static_cast<double>(t) : -1000.0);
  for (const char* name : {"k_new", "v_new"}) c.tensors[name] = Tensor::zeros(DType::kBF16, {4, 1, 64});
  for (std::int64_t j = 0; j < 4; ++j) c.tensor("v_new").set({j, 0, 0}, static_cast<double>(40 + j));
  const Backend& b = get("cpu.attn.aiter_fa");
  ASSERT_TRUE(b.supports(c).ok) << b.supports(c).reason;
  const Case out = run_clone(b, c);
  EXPECT_EQ(out.tensor("o").at({3, 0, 0}), -1000.0);
  const auto fixed = b.without_defects({"swa_new_kv_from_cache"});
  ASSERT_NE(fixed, nullptr);
  const Case repaired = run_clone(*fixed, c);
  EXPECT_EQ(repaired.tensor("o").at({3, 0, 0}), 42.0);
  EXPECT_EQ(repaired.tensor("o").at({0, 0, 0}), 39.0);
}

// ROCM_AITER_FA gathers an extend's context in chunks of _CP_TOKENS_PER_ITER_ROCM / num_extends = 32768 / 64
// = 512 tokens when 64 extends share the batch (rocm_aiter_fa.py at 002d0eb6: the builder's
// max_context_chunk, extend_forward's chunk loop), attends each chunk in its own pass and merges the chunk
// outputs in order with merge_attn_states into an act output. Sequence 0: 2 new tokens after 1024 context
// tokens, all logits 0 (q = 0), V[0] 1 except the last key of chunk 0 (key 511: 2.203125) and the first of
// chunk 1 (key 512: 4.59375): the chunk means 1.00235 and 1.00703 round to bf16 1 and 1.0078125, and their
// merge 1.00390625 ties to 1; one pass over the 1024 keys rounds their mean 1.00468 to 1.0078125, and so does
// any chunk of 513 or more (both marked keys in chunk 0: an extend count of 63 or fewer). The new token's
// V[0] is 1 and weighs 1/1025. With the other 63 sequences decodes (one extend: one chunk) the same sequence
// gives 1.0078125: the backend's output for a sequence depends on how many extends share its batch (declared:
// not batch invariant for such a batch).
TEST(AttentionTwins, AiterFaExtendContextInChunksOfTheBatchsShare) {
  const auto run_o = [](std::int64_t other_query_len) {
    AttentionSpec s = builders::one_head(DType::kBF16, 2, 1026);
    s.params.head_dim = 64;
    s.poison_unused = false;
    for (int x = 0; x < 63; ++x) {
      s.query_lens.push_back(other_query_len);
      s.seq_lens.push_back(3);
    }
    Case c = builders::attention_case(s, 17);
    for (const char* name : {"k_cache", "v_cache", "q"})
      c.tensor(name).copy_from(std::vector<double>(static_cast<std::size_t>(c.tensor(name).numel()), 0.0));
    const std::int64_t tokens = c.tensor("q").size(0);
    for (const char* name : {"k_new", "v_new"})
      c.tensors[name] = Tensor::zeros(DType::kBF16, {tokens, 1, 64});
    for (std::int64_t t = 0; t < 1024; ++t)
      set_cache(c, "v_cache", t, t == 511 ? 2.203125 : t == 512 ? 4.59375 : 1.0);
    c.tensor("v_new").set({0, 0, 0}, 1.0);
    const Backend& b = get("cpu.attn.aiter_fa");
    EXPECT_TRUE(b.supports(c).ok) << b.supports(c).reason;
    EXPECT_EQ(b.numerics_for(c).batch_invariant, other_query_len == 1);
    return run_clone(b, c).tensor("o").at({0, 0, 0});
  };
  EXPECT_EQ(run_o(2), 1.0);        // 64 extends: two chunks of 512, merged in bf16
  EXPECT_EQ(run_o(1), 1.0078125);  // one extend: one pass over the context
}

// ROCM_AITER_FA's paged_attention_v1 with an fp8 cache runs QK and P.V on fp8 MFMAs (pa_kernels.cuh:378-411,
// 623-651, 775-812 at aiter@e4048607): q and the normalised P are converted to the cache's fp8 first, K and V
// enter as stored codes, k_scale multiplies the dot and v_scale the P.V result. One decode row over two keys,
// scale 1, k_scale 0.75, v_scale 0.5: q[0] = 1.1 (bf16 1.1015625; e4m3 1.125), K codes -1 and 0, so the
// logits are 1.125 * -1 * 0.75 = -0.84375 and 0 (q * k_scale rounded instead would give -0.8125); the weights
// 0.30074 and 0.69926, which e4m3 holds as 0.3125 and 0.6875. V codes are e_0 for the first key and e_1 for
// the second, so o[0] and o[1] are those weights times 0.5, and lse = log(1 + e^(logit)) shows q's rounding.
// With a bf16 cache (scales 1, K -0.75) q stays 1.1015625 (logit -0.826171875) and the first weight 0.304455
// is rounded to bf16, 0.3046875.
TEST(AttentionTwins, AiterFaFp8DecodeConvertsQAndPToTheCacheFormat) {
  const Backend& b = get("cpu.attn.aiter_fa");
  const auto probe = [](DType kv, double k_scale, double v_scale, double key0) {
    AttentionSpec s = builders::one_head(DType::kBF16, 1, 2);
    s.kv_dtype = kv;
    s.params.head_dim = 64;
    s.params.k_scale = k_scale;
    s.params.v_scale = v_scale;
    Case c = builders::attention_case(s, 3);
    for (const char* name : {"q", "k_cache", "v_cache"}) {
      Tensor& t = c.tensor(name);
      t.copy_from(std::vector<double>(static_cast<std::size_t>(t.numel()), 0.0));
    }
    c.tensor("q").set({0, 0, 0}, 1.1);
    const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, 0}));
    c.tensor("k_cache").set({page, 0, 0, 0}, key0);
    c.tensor("v_cache").set({page, 0, 0, 0}, 1.0);
    c.tensor("v_cache").set({page, 1, 0, 1}, 1.0);
    return c;
  };
  for (const DType kv : {DType::kF8E4M3FNUZ, DType::kF8E4M3FN}) {
    const Case c = probe(kv, 0.75, 0.5, -1.0);
    ASSERT_TRUE(b.supports(c).ok) << b.supports(c).reason;
    EXPECT_TRUE(b.numerics_for(c).fp8_mfma_decode);
    const Case out = run_clone(b, c);
    EXPECT_EQ(out.tensor("o").at({0, 0, 0}), 0.15625) << dtype_name(kv);
    EXPECT_EQ(out.tensor("o").at({0, 0, 1}), 0.34375) << dtype_name(kv);
    EXPECT_NEAR(out.tensor("lse").at({0, 0}), std::log1p(std::exp(-0.84375)), 1e-6) << dtype_name(kv);
    EXPECT_GT(std::fabs(out.tensor("lse").at({0, 0}) - std::log1p(std::exp(-0.8125))), 1e-3);
    EXPECT_GT(std::fabs(out.tensor("lse").at({0, 0}) - std::log1p(std::exp(-0.826171875))), 1e-3);
  }
  // The same row with a bf16 cache keeps q and P in act.
  const Case a = probe(DType::kBF16, 1.0, 1.0, -0.75);
  EXPECT_FALSE(b.numerics_for(a).fp8_mfma_decode);
  const Case out_act = run_clone(b, a);
  EXPECT_EQ(out_act.tensor("o").at({0, 0, 0}), 0.3046875);
  EXPECT_NEAR(out_act.tensor("lse").at({0, 0}), std::log1p(std::exp(-0.826171875)), 1e-6);
}

// The fp8 MFMA tolerance term (docs/ORACLE.md section 5) in both directions on generated cases: on the first
// 30 cases of seed 1 whose decode rows cpu.attn.aiter_fa runs on fp8 MFMAs, the twin with its upstream
// defects repaired passes every check with the declared numerics, and judged without fp8_mfma_decode some
// case's decode rows go beyond their tolerance (the declaration is needed). Prints the measured counts and
// the median of each case's worst decode-row error / tolerance, with and without the term.
TEST(AttentionTwins, AiterFaFp8MfmaTermIsNeededAndHoldsOnGeneratedCases) {
  const Backend& twin = get("cpu.attn.aiter_fa");
  const auto repaired = twin.without_defects(twin.modelled_defects());
  ASSERT_NE(repaired, nullptr);
  std::vector<double> with, without;
  int beyond_without = 0;
  for (std::uint64_t k = 0; k < 4000 && with.size() < 30; ++k) {
    const Case c = fuzz::materialize(fuzz::draw_case(OpKind::kAttention, 1, k).value());
    if (!repaired->supports(c).ok || !repaired->numerics_for(c).fp8_mfma_decode) continue;
    const fuzz::PreparedCase pc = fuzz::prepare(c);
    const fuzz::Evaluation ev = fuzz::evaluate(*repaired, pc);
    EXPECT_EQ(ev.verdict, fuzz::Verdict::kPass) << "seed 1 case " << k << ": " << ev.detail;
    const Numerics n = repaired->numerics_for(c);
    Numerics bare = n;
    bare.fp8_mfma_decode = false;
    const fuzz::PreparedCase& j = pc.judged_as(n);
    const fuzz::ErrorModel& m = j.model.at("o");
    const auto o = ev.outputs.at("o").to_f64(), ref = j.reference.at("o").to_f64();
    double w = 0, wo = 0;
    for (std::size_t i = 0; i < o.size(); ++i) {
      if (m.fp8_logit_error[i] == 0 || !std::isfinite(o[i]) || !std::isfinite(ref[i])) continue;
      const double e = std::fabs(o[i] - ref[i]);
      w = std::max(w, e / fuzz::tolerance(m, n, i, ref[i]));
      wo = std::max(wo, e / fuzz::tolerance(m, bare, i, ref[i]));
    }
    with.push_back(w);
    without.push_back(wo);
    beyond_without += wo > 1;
  }
  ASSERT_EQ(with.size(), 30U);
  EXPECT_GT(beyond_without, 0);
  std::sort(with.begin(), with.end());
  std::sort(without.begin(), without.end());
  std::printf(
      "fp8 decode cases %zu: beyond without the term %d; median worst ratio %.3g with, %.3g without\n",
      with.size(), beyond_without, with[with.size() / 2], without[without.size() / 2]);
}

// Which decode kernel a ROCM_ATTN batch's decode rows run is use_rocm_custom_paged_attention's choice
// (vllm/platforms/rocm.py, gfx9), made with the window ROCM_ATTN passes, window - 1: a window of 1 reaches
// the custom kernel, which has none, so the row sees every key, as with no window; a window of 2 reaches
// kernel_paged_attention_2d, which keeps 2 - 1 = 1 key. V[0] = key index, all logits 0: o = the mean of the
// visible indices.
TEST(AttentionTwins, RocmAttnDecodeRowsTakeTheKernelVllmRoutesThemTo) {
  const Backend& b = get("cpu.attn.rocm_custom");
  const auto run_o = [&](std::int64_t window) {
    Case c = decode_probe(40, window, 64);
    for (std::int64_t t = 0; t < 40; ++t) set_slot(c, "v_cache", t, static_cast<double>(t));
    EXPECT_TRUE(b.supports(c).ok) << "window " << window << ": " << b.supports(c).reason;
    return run_clone(b, c).tensor("o").at({0, 0, 0});
  };
  EXPECT_EQ(run_o(0), 19.5);
  EXPECT_EQ(run_o(1), run_o(0));  // the custom kernel, no window
  EXPECT_EQ(run_o(2), 39.0);      // kernel_paged_attention_2d, SLIDING_WINDOW 1
  EXPECT_EQ(run_o(5), 37.5);      // keys 36..39
  // The same rows through the Triton kernel's repaired window: the layer's w keys.
  const auto fixed = b.without_defects({"window_one_short"});
  ASSERT_NE(fixed, nullptr);
  Case c = decode_probe(40, 2, 64);
  for (std::int64_t t = 0; t < 40; ++t) set_slot(c, "v_cache", t, static_cast<double>(t));
  EXPECT_EQ(run_clone(*fixed, c).tensor("o").at({0, 0, 0}), 38.5);
}

// kernel_paged_attention_2d masks a key outside the window with the finite logit -10000
// (chunked_prefill_paged_decode.py: `S = tl.where((context_len - seq_offset) < SLIDING_WINDOW, S, -10000)`).
// (1) An infinite V outside the window: the first page (keys 0..15, all outside a window of 4 at position 39)
// has the running max -10000 and P = 1, so acc = inf, and the page that holds the window rescales it by
// alpha = exp(-10000 - 0) = 0: NaN. (2) Visible logits of -20480 (q[0] = -20480, k[0] = 1 in the window): the
// max is the masked keys' -10000, the visible keys' P = exp(-10480) = 0, and the row is the mean of the 37
// keys it must not see (V[0] = index: 18) where the window's keys give 38. Repaired, both rows are the
// window's (keys 37..39, one short).
TEST(AttentionTwins, RocmAttnTritonDecodeMasksTheWindowWithAFiniteLogit) {
  const Backend& b = get("cpu.attn.rocm_custom");
  const auto fixed = b.without_defects({"window_logit_finite"});
  ASSERT_NE(fixed, nullptr);
  Case inf_v = decode_probe(40, 4);
  for (std::int64_t t = 0; t < 40; ++t) set_slot(inf_v, "v_cache", t, static_cast<double>(t));
  set_slot(inf_v, "v_cache", 0, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(run_clone(b, inf_v).tensor("o").at({0, 0, 0})));
  EXPECT_EQ(run_clone(*fixed, inf_v).tensor("o").at({0, 0, 0}), 38.0);
  Case low = decode_probe(40, 4);
  low.tensor("q").set({0, 0, 0}, -20480.0);
  for (std::int64_t t = 0; t < 40; ++t) {
    set_slot(low, "v_cache", t, static_cast<double>(t));
    set_slot(low, "k_cache", t, 1.0);
  }
  EXPECT_EQ(run_clone(b, low).tensor("o").at({0, 0, 0}), 18.0);
  EXPECT_EQ(run_clone(*fixed, low).tensor("o").at({0, 0, 0}), 38.0);
}

// kernel_paged_attention_2d loads whole pages with only the head-size mask: the last page's slots past
// seq_len (40..47 of page 2) enter P.V with P = 0, and the NaN a case keeps there makes the row NaN.
// Repaired, the tail is loaded as 0 and the row is the mean of V[0] = index over its keys (19.5).
TEST(AttentionTwins, RocmAttnTritonDecodeReadsTheLastPagesTail) {
  const Backend& b = get("cpu.attn.rocm_custom");
  Case c = decode_probe(40, 0, 32, 16, /*poison=*/true);
  for (std::int64_t t = 0; t < 40; ++t) set_slot(c, "v_cache", t, static_cast<double>(t));
  EXPECT_TRUE(std::isnan(run_clone(b, c).tensor("o").at({0, 0, 0})));
  const auto fixed = b.without_defects({"paged_2d_tail_unmasked"});
  ASSERT_NE(fixed, nullptr);
  EXPECT_EQ(run_clone(*fixed, c).tensor("o").at({0, 0, 0}), 19.5);
}

// The Triton decode kernel's tiles are pages (BLOCK_SIZE = block_size): three keys at logit a (< 0), then
// one at 0 at position 20; every other key at -200 (P = 0). With pages of 32 one tile holds all four and the
// sum is one tl.sum, ((e + e) + e) + 1; with pages of 16 the key at 0 is in the second tile and the running
// update gives fma(3, e, 1) (L * alpha + l_j contracted). For an `a` where the two differ, log(L) (the lse
// the twin reports) shows the tile.
TEST(AttentionTwins, RocmAttnTritonDecodeTilesArePages) {
  float a = 0.0f, one_tile = 0.0f, two_tiles = 0.0f;
  for (int k = 1; k < 512 && a == 0.0f; ++k) {
    const float ak = -static_cast<float>(k) / 32.0f;  // exact in bf16
    const float e = std::exp2(ak * 1.44269504088896340736f);
    const float summed = ((e + e) + e) + 1.0f, fused = std::fma(3.0f, e, 1.0f);
    if (std::log(summed) != std::log(fused)) a = ak, one_tile = summed, two_tiles = fused;
  }
  ASSERT_NE(a, 0.0f);
  for (const auto& [bs, expected] :
       {std::pair{std::int64_t{32}, one_tile}, std::pair{std::int64_t{16}, two_tiles}}) {
    Case c = decode_probe(30, 0, 32, bs);
    for (std::int64_t t = 0; t < 30; ++t) set_slot(c, "k_cache", t, t < 3 ? a : t == 20 ? 0.0 : -200.0);
    EXPECT_EQ(run_clone(get("cpu.attn.rocm_custom"), c).tensor("lse").at({0, 0}),
              static_cast<double>(std::log(expected)))
        << "block size " << bs << ", a " << a;
  }
}

// A batch whose decode rows run the Triton decode kernel rounds the dequantised fp8 K/V to act in every row,
// so the twin declares kv_dequant_rounded for it; on the custom kernel only the prefill rows round.
TEST(AttentionTwins, RocmAttnDeclaresTheRoundingOfThePathABatchTakes) {
  const Backend& b = get("cpu.attn.rocm_custom");
  AttentionSpec s = attn_spec(DType::kBF16, DType::kF8E4M3FN, 16);
  s.query_lens = {1, 1, 1};
  EXPECT_FALSE(b.numerics_for(builders::attention_case(s, 1)).kv_dequant_rounded);
  EXPECT_TRUE(b.numerics_for(builders::attention_case(s, 1)).kv_dequant_rounded_prefill);
  s.params.window = 9;
  EXPECT_TRUE(b.numerics_for(builders::attention_case(s, 1)).kv_dequant_rounded);
  s.params.window = 1;  // passed as 0: the custom kernel
  EXPECT_FALSE(b.numerics_for(builders::attention_case(s, 1)).kv_dequant_rounded);
  s.params.window = 0;
  s.params.head_dim = 96;
  EXPECT_TRUE(b.numerics_for(builders::attention_case(s, 1)).kv_dequant_rounded);
  EXPECT_FALSE(b.numerics().kv_dequant_rounded);  // what `driftcheck list` shows: the common path
}

}  // namespace
}  // namespace driftcheck
