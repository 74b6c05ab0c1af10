// The ll4mi / paged_attention_v1 decode kernels (ROCM_ATTN's custom decode, aiter's paged_attention_v1):
// mfma16 and mfma4 warp sums, partitions and their reduce.
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

// vLLM's addx4: bf16 partials added in fp32 and truncated to bf16 (the upper 16 bits kept); fp16 partials
// added as halves, rounded to nearest.
float add_act(DType act, float x, float y) {
  const float s = x + y;
  return act == DType::kBF16 ? round_act_toward_zero(act, s) : round_act(act, s);
}

// The mfma16 kernels' exp sum over one 64-token warp (pa_kernels.cuh:512-529 at aiter@e4048607, the same in
// vLLM's paged_attention_ll4mi_QKV_mfma16_kernel): the QK MFMA leaves token 16 * d + 4 * r + i (d, i in 0..3)
// in lane row r, each lane sums its 16 tokens in (d, i) order, then __shfl_xor over 32 and 16 lanes adds the
// rows as (s0 + s2) + (s1 + s3). Tokens past the loaded count add nothing (the kernel adds 0.0f).
float mfma16_warp_sum(const float* x, std::int64_t n) {
  constexpr std::int64_t kRows = 4, kTokensPerRowStep = 4, kSteps = 4;
  std::array<float, kRows> row{};
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t d = 0; d < kSteps; ++d)
      for (std::int64_t i = 0; i < kTokensPerRowStep; ++i) {
        const std::int64_t t = d * kRows * kTokensPerRowStep + r * kTokensPerRowStep + i;
        if (t < n) row[static_cast<std::size_t>(r)] += x[t];
      }
  return (row[0] + row[2]) + (row[1] + row[3]);
}

// vLLM's mfma4 kernel's exp sum over one 64-token warp (csrc/rocm/attention.cu:1106-1134 at vllm 4388f06):
// after the 4x4 transpose lane 16 r + 4 k + h holds tokens 16 r + 4 k + i (i in 0..3) of head h and sums them
// in order; `v_add_f32_dpp row_ror:4` then `row_ror:8` add, within each row of 16 lanes, the value of the
// lane 4 (then 8) below, rotating (DPP rotate right: lane i reads lane (i - N) mod 16), so group 0 of row r
// holds R_r = (a_1 + a_2) + (a_3 + a_0); `ds_bpermute` gives group k of every row R_k, and the same two steps
// leave (R_1 + R_2) + (R_3 + R_0) in lanes 0..3, which write the warp's sum. Tokens past the loaded count add
// 0.
float mfma4_warp_sum(const float* x, std::int64_t n) {
  constexpr std::int64_t kRows = 4, kGroups = 4, kTokens = 4;
  const auto rotated = [](const std::array<float, 4>& a) { return (a[1] + a[2]) + (a[3] + a[0]); };
  std::array<float, kRows> row{};
  for (std::int64_t r = 0; r < kRows; ++r) {
    std::array<float, kGroups> group{};
    for (std::int64_t k = 0; k < kGroups; ++k)
      for (std::int64_t i = 0; i < kTokens; ++i) {
        const std::int64_t t = 16 * r + 4 * k + i;
        group[static_cast<std::size_t>(k)] += t < n ? x[t] : 0.0f;
      }
    row[static_cast<std::size_t>(r)] = rotated(group);
  }
  return rotated(row);
}

// One partition of an ll4mi kernel (paged_attention_ll4mi_QKV_mfma16 / _mfma4): per warp of `warp_tokens`
// keys, the max logit m_w and the sum of e^(s - m_w) over the keys below seq_len (a masked key carries
// -FLT_MAX and still counts: e^0 = 1 in a warp with no visible key); the partition max M and sum
// S = sum_w S_w e^(m_w - M); P = act(e^(s - m_w) * (1 / (S + 1e-6) * e^(m_w - M))). P.V runs over every key
// of the partition the kernel loads (whole pages: P = 0 past seq_len): in fp32 over the partition and
// rounded once (mfma16), or per warp, each warp's result rounded and the warps summed in act (mfma4).
Ll4miPartition AttentionTwin::ll4mi_partition(const Batch& b, const Plan& pl, const Row& r,
                                              std::int64_t begin, std::vector<float>& p) const {
  const std::int64_t len = r.panel->valid, end = std::min(begin + k_.ll4mi.partition, len);
  // Whole pages gathered (page_tail_unmasked): the kernel loads V for tokens past seq_len too, each from the
  // last context block at slot t % block_size, and multiplies it with P = 0.
  const bool loads_past = r.panel->rows > len;
  const std::int64_t last_page = (cdiv(len, b.bs) - 1) * b.bs;
  const std::int64_t warps = k_.ll4mi.partition / k_.ll4mi.warp_tokens;
  const bool mfma4 = b.hq / b.hkv <= k_.ll4mi.mfma4_max_gqa;
  std::vector<float> warp_max(static_cast<std::size_t>(warps), kMaskedLogit),
      warp_sum(static_cast<std::size_t>(warps), 0.0f), warp_scale(static_cast<std::size_t>(warps));
  p.assign(static_cast<std::size_t>(k_.ll4mi.partition), 0.0f);
  const auto at = [&](std::int64_t t) -> float& { return p[static_cast<std::size_t>(t - begin)]; };
  Ll4miPartition part;
  for (std::int64_t w = 0; w < warps; ++w) {
    const std::int64_t t0 = begin + w * k_.ll4mi.warp_tokens, t1 = std::min(t0 + k_.ll4mi.warp_tokens, end);
    float& m = warp_max[static_cast<std::size_t>(w)];
    for (std::int64_t t = t0; t < t1; ++t) {
      at(t) = t >= r.lo && t <= r.hi ? logit(b, pl, r, t) : kMaskedLogit;
      m = std::fmax(m, at(t));
    }
    if (bug_ == AttnBug::kNoMaxSubtraction) m = 0.0f;
    for (std::int64_t t = t0; t < t1; ++t) at(t) = exp_of(k_.exp, at(t) - m);
    warp_sum[static_cast<std::size_t>(w)] =
        mfma4 ? mfma4_warp_sum(&at(t0), t1 - t0) : mfma16_warp_sum(&at(t0), t1 - t0);
    part.max = std::fmax(part.max, m);
  }
  for (std::int64_t w = 0; w < warps; ++w) {
    warp_scale[static_cast<std::size_t>(w)] =
        exp_of(k_.exp, warp_max[static_cast<std::size_t>(w)] - part.max);
    // `sum += S_w * e^(m_w - M)`: one expression, contracted to an FMA by hipcc (fp-contract is on for HIP).
    part.sum =
        std::fma(warp_sum[static_cast<std::size_t>(w)], warp_scale[static_cast<std::size_t>(w)], part.sum);
  }
  const float inv = 1.0f / (part.sum + kSumBias);
  // P to act by from_floatx4, or (fp8 MFMAs) to the cache's fp8 by v_cvt_pk_fp8_f32 (pa_kernels.cuh:596-651).
  for (std::int64_t t = begin; t < end; ++t) {
    const float x = at(t) * (inv * warp_scale[static_cast<std::size_t>((t - begin) / k_.ll4mi.warp_tokens)]);
    at(t) = pl.mfma_fp8 == DType::kF32 ? round_act(b.act, x) : static_cast<float>(round_to(pl.mfma_fp8, x));
  }
  const bool per_warp = k_.ll4mi.warp_partials_in_act && mfma4;
  std::vector<float> acc(static_cast<std::size_t>(b.d), 0.0f);
  part.out.assign(static_cast<std::size_t>(b.d), 0.0f);
  for (std::int64_t w = 0; w < warps; ++w) {
    const std::int64_t t0 = begin + w * k_.ll4mi.warp_tokens;
    // Tokens whose V the kernel loads and multiplies: mfma16 (vLLM, aiter pa_v1) runs the SV MFMAs of all
    // four warps' tokens to the partition's end; mfma4 skips a warp that starts at or past seq_len (its
    // output is 0) and runs the others to the warp's end. Past seq_len the V block index is clamped to the
    // last context block, so token t reads that block's slot t % block_size: its tail, and from the next
    // block boundary on its valid slots again.
    const std::int64_t t_end = !loads_past          ? std::min(t0 + k_.ll4mi.warp_tokens, end)
                               : mfma4 && t0 >= len ? t0
                                                    : t0 + k_.ll4mi.warp_tokens;
    for (std::int64_t t = t0; t < t_end; ++t) {
      const float pt = at(t);  // 0 past seq_len
      const std::int64_t row = t < len ? t : last_page + t % b.bs;
      if (pt == 0.0f && !r.panel->v_nonfinite[static_cast<std::size_t>(row)]) continue;
      // Repaired, a valid key outside the row's window stays out of P.V.
      if (t < len && (t < r.lo || t > r.hi) && !k_.masked_p_times_v) continue;
      const float* vt = r.panel->v.data() + row * b.d;
      for (std::int64_t i = 0; i < b.d; ++i) acc[static_cast<std::size_t>(i)] += pt * vt[i];
    }
    if (!per_warp) continue;
    for (std::size_t i = 0; i < acc.size(); ++i) {
      part.out[i] = add_act(b.act, part.out[i], round_act(b.act, acc[i] * pl.v_mul));
      acc[i] = 0.0f;
    }
  }
  if (!per_warp)
    for (std::size_t i = 0; i < acc.size(); ++i) part.out[i] = round_act(b.act, acc[i] * pl.v_mul);
  return part;
}

// ll4mi: the partitions, then paged_attention_ll4mi_reduce_kernel, which runs for a single partition too:
// weights w_j = S_j * expf(M_j - M) (an accurate expf there), G = their butterfly sum, o = (sum_j out_j w_j,
// contracted to FMAs) * (1 / (G + 1e-6)). The kernels write no LSE: the twin reports M + log(G). An empty
// sequence (no partition; the reduce would read partition -1) is written as o = 0, lse = -inf.
float AttentionTwin::ll4mi_row(const Batch& b, const Plan& pl, const Row& r, float* out) const {
  const std::int64_t len = r.panel->valid;
  std::fill(out, out + b.d, 0.0f);
  if (len == 0) return kNegInf;
  std::vector<Ll4miPartition> parts;
  std::vector<float> p;
  for (std::int64_t begin = 0; begin < len; begin += k_.ll4mi.partition)
    parts.push_back(ll4mi_partition(b, pl, r, begin, p));
  float m = parts.front().max;
  for (const Ll4miPartition& q : parts) m = std::fmax(m, q.max);
  // G as the reduce's first warp forms it: lane l holds partitions l, l + 64, ... (NPAR_LOOPS passes, summed
  // in order; slots past the last partition weigh 0), then a __shfl_xor butterfly over masks 32, 16, ..., 1,
  // after which every lane holds the same tree sum.
  constexpr std::size_t kLanes = 64;
  std::vector<float> w;
  std::array<float, kLanes> lane{};
  for (std::size_t j = 0; j < parts.size(); ++j) {
    w.push_back(parts[j].sum * std::exp(parts[j].max - m));
    lane[j % kLanes] = j < kLanes ? w.back() : lane[j % kLanes] + w.back();
  }
  for (std::size_t mask = kLanes / 2; mask >= 1; mask /= 2) {
    std::array<float, kLanes> next{};
    for (std::size_t l = 0; l < kLanes; ++l) next[l] = lane[l] + lane[l ^ mask];
    lane = next;
  }
  const float g = lane[0];
  for (std::size_t j = 0; j < parts.size(); ++j)
    for (std::int64_t i = 0; i < b.d; ++i)
      out[i] = std::fma(parts[j].out[static_cast<std::size_t>(i)], w[j], out[i]);
  if (k_.ll4mi.reduce_padded_slots) {
    // pa_kernels.cuh:1016-1095 at aiter@e4048607 (vLLM's reduce alike): JCHUNK 16, then 32, then MAX_NPAR 64
    // slots per pass; a slot past the last partition reads the last partition's output with weight 0.
    const std::size_t n = parts.size();
    const std::size_t slots = n <= 16 ? 16 : n <= 32 ? 32 : (n + 63) / 64 * 64;
    const std::vector<float>& last = parts.back().out;
    for (std::size_t j = n; j < slots; ++j)
      for (std::int64_t i = 0; i < b.d; ++i)
        out[i] = std::fma(last[static_cast<std::size_t>(i)], 0.0f, out[i]);
  }
  const float inv = 1.0f / (g + kSumBias);
  for (std::int64_t i = 0; i < b.d; ++i) out[i] *= inv;
  return m + std::log(g);
}

}  // namespace driftcheck::twin::attention
