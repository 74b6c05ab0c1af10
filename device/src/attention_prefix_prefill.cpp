// ROCM_ATTN's prefill/extend path: vLLM's Triton context_attention_fwd (prefix_prefill.py), and its
// sliding-window variant.
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

// ---- ROCM_ATTN prefill/extend: vLLM's Triton context_attention_fwd (prefix_prefill.py _fwd_kernel)

// One extend (query length > 1 after a context) of a windowed ROCM_AITER_FA layer: extend_for_sliding_window
// (rocm_aiter_fa.py at 002d0eb6). The builder's swa_seqlen = min(seq_len, query length + window) tokens
// ending at seq_len are gathered from the paged cache by cp_mha_gather_cache into an act workspace (fp8: the
// dequantised value cast back to the cache's fp8 and widened, defect context_requantised; act caches as
// stored), the new tokens included (defect swa_new_kv_from_cache; repaired, their rows from k_new / v_new);
// then one flash_attn_varlen_func pass, causal (bottom-right aligned) with window (w - 1, 0), no softcap
// (defect softcap_dropped), written as the output with no merge. aiter drops a left window >= max_seqlen_k,
// which changes nothing: every gathered key is then within the window.
void AttentionTwin::swa_extend_sequence(const Batch& b, std::int64_t s) const {
  const std::int64_t q0 = b.query_start[s], ql = b.query_start[s + 1] - q0;
  const std::int64_t len = b.seq_lens[static_cast<std::size_t>(s)], w = b.p->window;
  const std::int64_t gathered = std::min(len, ql + w), first = len - gathered;
  const float qk_log2 = static_cast<float>(b.p->scale) * kLog2e;
  const float cap = k_.softcap_dropped ? 0.0f : static_cast<float>(b.p->softcap);
  const float sc = static_cast<float>(b.p->scale);
  const DType kv = b.k->dtype();
  std::vector<float> keys, values, q(static_cast<std::size_t>(b.d));
  const Shape &qs = b.q->strides(), &os = b.o->strides();
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    for (const auto& [cache, scale, out] :
         {std::tuple{b.k, b.p->k_scale, &keys}, std::tuple{b.v, b.p->v_scale, &values}}) {
      gather_one(b, *cache, scale, s, g, *out, len);
      out->erase(out->begin(), out->begin() + first * b.d);
    }
    if (is_fp8(kv)) dequantise_to(k_.fa.context_requantised ? kv : b.act, b, keys, values);
    // The extend mutant's bug is reading the new tokens from the cache: it keeps doing so when the twin's
    // defect is repaired.
    if (!k_.fa.swa_new_kv_from_cache && bug_ != AttnBug::kExtendNewKvFromCache)
      for (const auto& [input, out] : {std::pair{b.k_new, &keys}, std::pair{b.v_new, &values}})
        load_new_rows(*input, q0, ql, g, b.d, out->data() + (gathered - ql) * b.d);
    for (std::int64_t h = g * (b.hq / b.hkv); h < (g + 1) * (b.hq / b.hkv); ++h) {
      for (std::int64_t j = 0; j < ql; ++j) {
        const std::int64_t tok = q0 + j;
        load_run(*b.q->storage(), b.q->offset() + tok * qs[0] + h * qs[1], qs[2], b.d, q.data());
        const std::int64_t hi = gathered - ql + j;  // the row's own position in the gathered window
        const std::int64_t lo = std::max<std::int64_t>(0, hi - w + 1);
        const FaPartial r = fa_varlen_row(b.act, q.data(), keys.data(), values.data(), b.d, lo, hi, qk_log2,
                                          k_.fa.fa_tile, sc, cap);
        const std::int64_t base = b.o->offset() + tok * os[0] + h * os[1];
        for (std::int64_t i = 0; i < b.d; ++i)
          store(*b.o->storage(), base + i * os[2], r.o[static_cast<std::size_t>(i)]);
        store(*b.lse->storage(), b.lse->index({tok, h}), r.lse);
      }
    }
  }
}

// A ROCM_ATTN Triton kernel's logit (prefix prefill, Triton decode): fp32(scale) * dot(q, k), the dot in fp32
// (sequential: the MFMA order is approximated); the backend passes these kernels no softcap (defect
// softcap_dropped; repaired, c * tanh(s / c)).
float AttentionTwin::triton_logit(const Batch& b, const float* q, const float* k) const {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < b.d; ++i) acc += q[i] * k[i];
  const float qk_mul = static_cast<float>(b.p->scale);
  const float s = bug_ == AttnBug::kLogitsRounded ? round_act(b.act, qk_mul * acc) : qk_mul * acc;
  const float cap =
      k_.softcap_dropped || bug_ == AttnBug::kSoftcapMissing ? 0.0f : static_cast<float>(b.p->softcap);
  return cap > 0.0f ? cap * std::tanh(s / cap) : s;
}

// One prefill/extend sequence under ROCM_ATTN (chunked_prefill_paged_decode calls context_attention_fwd with
// skip_decode when some query length is above 1). Per q head and query row j (program block j / BLOCK_M):
// the sink as initial max (l = 1), the context [0, ctx) from the paged cache in tiles of 32 keys with no
// causal mask (fp8: K, V = act(fp32(kv) * scale) before the dots; prefix_prefill.py:163-266), then the new
// tokens from the key/value inputs in tiles of 64 keys up to the block's end, causal (273-334); logits
// `fp32(scale) * dot`, -inf where masked; window `pos - key < SLIDING_WINDOW`; o = act(acc / (l + 1e-10))
// (336). The kernel writes no LSE: the twin reports m + log(l).
void AttentionTwin::prefix_prefill_sequence(const Batch& b, std::int64_t s) const {
  const std::int64_t q0 = b.query_start[s], ql = b.query_start[s + 1] - q0, d = b.d;
  const std::int64_t ctx = b.seq_lens[static_cast<std::size_t>(s)] - ql;
  // SLIDING_WINDOW as the kernel receives it (window - 1: defect window_one_short; 0: none).
  const std::int64_t sw = kernel_window(*b.p);
  const bool masked_pv = k_.masked_p_times_v || bug_ == AttnBug::kMaskedPTimesV;
  std::vector<float> ctx_k, ctx_v, new_k(static_cast<std::size_t>(ql * d)), new_v(new_k.size());
  std::vector<float> q(static_cast<std::size_t>(d)), out(q.size());
  const Shape &qs = b.q->strides(), &os = b.o->strides();
  const auto dot = [&](const float* k) { return triton_logit(b, q.data(), k); };
  PrefillTile tile;
  // Slot i of the tile holds key/value row `row` of (k, v); a masked slot keeps its V (masked P times V).
  const auto put = [&](std::size_t i, const float* k, const float* v, char v_bad, bool visible) {
    tile.v[i] = v;
    tile.v_nonfinite[i] = v_bad;
    if (!visible) return;
    tile.masked[i] = 0;
    tile.scores[i] = dot(k);
  };
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    gather_one(b, *b.k, b.p->k_scale, s, g, ctx_k, std::max<std::int64_t>(ctx, 0));
    gather_one(b, *b.v, b.p->v_scale, s, g, ctx_v, std::max<std::int64_t>(ctx, 0));
    dequantise_to(b.act, b, ctx_k, ctx_v);
    for (const auto& [input, dst] : {std::pair{b.k_new, &new_k}, std::pair{b.v_new, &new_v}})
      load_new_rows(*input, q0, ql, g, d, dst->data());
    const std::vector<char> ctx_bad = nonfinite_rows(ctx_v, std::max<std::int64_t>(ctx, 0), d);
    const std::vector<char> new_bad = nonfinite_rows(new_v, ql, d);
    for (std::int64_t h = 0; h < b.hq; ++h) {
      if (kv_head(b, h) != g) continue;
      for (std::int64_t j = 0; j < ql; ++j) {
        load_run(*b.q->storage(), b.q->offset() + (q0 + j) * qs[0] + h * qs[1], qs[2], d, q.data());
        PrefillRow st = start_row(d, b.sinks, h);
        // Context: every key below ctx, no causal mask; the window measured from the row's position ctx + j.
        for (std::int64_t t0 = 0; t0 < ctx; t0 += k_.prefill.pp_ctx_tile) {
          tile.reset(k_.prefill.pp_ctx_tile);
          for (std::int64_t t = t0; t < std::min(t0 + k_.prefill.pp_ctx_tile, ctx); ++t) {
            put(static_cast<std::size_t>(t - t0), ctx_k.data() + t * d, ctx_v.data() + t * d,
                ctx_bad[static_cast<std::size_t>(t)], !(sw > 0 && ctx + j - t >= sw));
          }
          prefill_step(b.act, d, tile, masked_pv, k_.prefill.nan_row_zeroed, st);
        }
        // New tokens: tiles of BLOCK_N up to the end of the row's BLOCK_M block, causal.
        const std::int64_t block_end = (j / k_.prefill.pp_block_m + 1) * k_.prefill.pp_block_m;
        const std::int64_t hi = j + (bug_ == AttnBug::kCausalOffByOne ? 1 : 0);
        for (std::int64_t n0 = 0; n0 < block_end; n0 += k_.prefill.pp_block_n) {
          tile.reset(k_.prefill.pp_block_n);
          for (std::int64_t n = n0; n < std::min(n0 + k_.prefill.pp_block_n, ql); ++n) {
            put(static_cast<std::size_t>(n - n0), new_k.data() + n * d, new_v.data() + n * d,
                new_bad[static_cast<std::size_t>(n)], !(n > hi || (sw > 0 && j - n >= sw)));
          }
          prefill_step(b.act, d, tile, masked_pv, k_.prefill.nan_row_zeroed, st);
        }
        for (std::int64_t i = 0; i < d; ++i)
          out[static_cast<std::size_t>(i)] =
              round_act(b.act, st.acc[static_cast<std::size_t>(i)] / (st.l + kPrefillDivBias));
        const std::int64_t base = b.o->offset() + (q0 + j) * os[0] + h * os[1];
        for (std::int64_t i = 0; i < d; ++i)
          store(*b.o->storage(), base + i * os[2], out[static_cast<std::size_t>(i)]);
        store(*b.lse->storage(), b.lse->index({q0 + j, h}), st.m + std::log(st.l));
      }
    }
  }
}

}  // namespace driftcheck::twin::attention
