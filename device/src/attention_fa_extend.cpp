// ROCM_AITER_FA's prefill/extend path: the context gathered in chunks, then FlashAttention varlen over it.
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

// ---- ROCM_AITER_FA prefill/extend

// Context rows [0, ctx) as cp_mha_gather_cache writes them to the act workspace (fp8: `(k.to(fp32) *
// k_scale).to(kv_dtype)`, a second quantisation of the dequantised value (defect context_requantised;
// repaired: rounded to act); otherwise the stored value, no scale), and the new tokens' rows from the inputs.
void AttentionTwin::extend_panels(const Batch& b, std::int64_t s, std::int64_t g, Panel& context,
                                  Panel& fresh) const {
  const std::int64_t q0 = b.query_start[s], ql = b.query_start[s + 1] - q0;
  context.valid = context.rows = b.seq_lens[static_cast<std::size_t>(s)] - ql;
  gather_one(b, *b.k, b.p->k_scale, s, g, context.k, context.rows);
  gather_one(b, *b.v, b.p->v_scale, s, g, context.v, context.rows);
  const DType kv = b.k->dtype();
  if (is_fp8(kv)) dequantise_to(k_.fa.context_requantised ? kv : b.act, b, context.k, context.v);
  fresh.valid = fresh.rows = ql;
  if (bug_ == AttnBug::kExtendNewKvFromCache) {
    // The mutant: the new tokens' rows [ctx, seq_len) read back from their cache slots (what the cache write
    // stored: fp8 codes dequantised with the scale and rounded to act once; act caches as stored) instead of
    // the inputs. The same values as the inputs wherever the cache holds them exactly.
    std::vector<float> all;
    for (const auto& [cache, scale, out] :
         {std::tuple{b.k, b.p->k_scale, &fresh.k}, std::tuple{b.v, b.p->v_scale, &fresh.v}}) {
      gather_one(b, *cache, scale, s, g, all, context.rows + ql);
      out->assign(all.begin() + context.rows * b.d, all.end());
      if (is_fp8(kv))
        for (float& e : *out) e = static_cast<float>(round_to(b.act, e * static_cast<float>(scale)));
    }
    return;
  }
  for (const auto& [input, out] : {std::pair{b.k_new, &fresh.k}, std::pair{b.v_new, &fresh.v}}) {
    out->resize(static_cast<std::size_t>(ql * b.d));
    load_new_rows(*input, q0, ql, g, b.d, out->data());
  }
}

// One prefill/extend sequence: per row, the new tokens attended causally (flash_attn_varlen_func on the
// inputs), the context non-causally (on the gathered workspace), both o in act and merged by
// merge_attn_states (context as the prefix); a prefill (no context) is the first pass alone. The kernels
// write no LSE for the caller: the twin reports the merge's (or the pass's).
void AttentionTwin::extend_sequence(const Batch& b, std::int64_t s) const {
  const std::int64_t q0 = b.query_start[s], ql = b.query_start[s + 1] - q0;
  const std::int64_t ctx = b.seq_lens[static_cast<std::size_t>(s)] - ql, w = b.p->window;
  const float qk_log2 = static_cast<float>(b.p->scale) * kLog2e;
  // vLLM passes the passes no logits_soft_cap (defect softcap_dropped); repaired, they cap the logits.
  const float cap = k_.softcap_dropped ? 0.0f : static_cast<float>(b.p->softcap);
  const float sc = static_cast<float>(b.p->scale);
  // The context's chunks (extend_chunk_size). A sequence with a shorter context than the batch's longest gets
  // empty chunks after its own; merging one (o = 0, LSE -inf, or +inf, which the merge reads as -inf) leaves
  // the merged output and LSE as they were, so they are not run.
  const std::int64_t chunk = b.context_chunk;
  Panel context, fresh;
  std::vector<float> q(static_cast<std::size_t>(b.d)), out(q.size());
  const Shape &qs = b.q->strides(), &os = b.o->strides();
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    extend_panels(b, s, g, context, fresh);
    for (std::int64_t h = g * (b.hq / b.hkv); h < (g + 1) * (b.hq / b.hkv); ++h) {
      for (std::int64_t j = 0; j < ql; ++j) {
        const std::int64_t tok = q0 + j;
        load_run(*b.q->storage(), b.q->offset() + tok * qs[0] + h * qs[1], qs[2], b.d, q.data());
        const std::int64_t lo =
            w > 0 ? std::max<std::int64_t>(0, j - w + 1) : 0;  // w > 0 only without context
        const FaPartial suffix = fa_varlen_row(b.act, q.data(), fresh.k.data(), fresh.v.data(), b.d, lo, j,
                                               qk_log2, k_.fa.fa_tile, sc, cap);
        float lse = suffix.lse;
        if (ctx > 0) {
          // The context in chunks of `chunk` tokens, one non-causal pass each; the chunk outputs merged in
          // order (prefix: the chunks so far, suffix: the next), each merge stored in act with its LSE.
          FaPartial prefix = fa_varlen_row(b.act, q.data(), context.k.data(), context.v.data(), b.d, 0,
                                           std::min(chunk, ctx) - 1, qk_log2, k_.fa.fa_tile, sc, cap);
          for (std::int64_t c0 = chunk; c0 < ctx; c0 += chunk) {
            const FaPartial next =
                fa_varlen_row(b.act, q.data(), context.k.data(), context.v.data(), b.d, c0,
                              std::min(c0 + chunk, ctx) - 1, qk_log2, k_.fa.fa_tile, sc, cap);
            FaPartial merged;
            merged.o.resize(static_cast<std::size_t>(b.d));
            merged.lse = merge_attn_states_row(b.act, prefix, next, merged.o.data());
            prefix = std::move(merged);
          }
          lse = merge_attn_states_row(b.act, prefix, suffix, out.data());
        } else {
          out = suffix.o;
        }
        const std::int64_t base = b.o->offset() + tok * os[0] + h * os[1];
        for (std::int64_t i = 0; i < b.d; ++i)
          store(*b.o->storage(), base + i * os[2], out[static_cast<std::size_t>(i)]);
        store(*b.lse->storage(), b.lse->index({tok, h}), lse);
      }
    }
  }
}

}  // namespace driftcheck::twin::attention
