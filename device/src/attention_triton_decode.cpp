// ROCM_ATTN's Triton paged 2D decode kernel (chunked_prefill_paged_decode.py) for the decode rows the custom
// kernel does not take.
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

// One decode sequence (query length 1) under ROCM_ATTN's Triton kernel_paged_attention_2d
// (chunked_prefill_paged_decode.py at 69f87df), per q head of each KV head: the sink as the initial max (L =
// 1); tiles of one page over [0, cdiv(seq_len, block_size) * block_size), K and V loaded through the block
// table without the sequence mask (the last page's tail slots enter P.V with P = 0: defect
// paged_2d_tail_unmasked; repaired, loaded as 0), fp8 dequantised to act before the dots; logits -inf past
// seq_len; keys outside the window (`context_len - key >= SLIDING_WINDOW`, context_len = seq_len - 1) at the
// finite -10000 (defect window_logit_finite; repaired, out of the softmax and P.V); the prefix prefill's
// softmax step; o = act(acc / (L + 1e-10)). q and o are addressed through their token and head strides, their
// elements as dense (the kernel adds tl.arange to the row address). The kernel writes no LSE: the twin
// reports m + log(L).
void AttentionTwin::triton_decode_sequence(const Batch& b, std::int64_t s) const {
  const std::int64_t tok = b.query_start[s], d = b.d, bs = b.bs;
  const std::int64_t len = b.seq_lens[static_cast<std::size_t>(s)];
  const std::int64_t loaded = cdiv(len, bs) * bs;
  const std::int64_t sw = kernel_window(*b.p);
  const bool tail = k_.triton_decode.paged_2d_tail_unmasked || bug_ == AttnBug::kMaskedPTimesV;
  std::vector<float> keys, values, q(static_cast<std::size_t>(d)), out(q.size());
  const Shape &qs = b.q->strides(), &os = b.o->strides();
  PrefillTile tile;
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    gather_one(b, *b.k, b.p->k_scale, s, g, keys, loaded);
    gather_one(b, *b.v, b.p->v_scale, s, g, values, loaded);
    dequantise_to(b.act, b, keys, values);
    const std::vector<char> bad = nonfinite_rows(values, loaded, d);
    for (std::int64_t h = 0; h < b.hq; ++h) {
      if (kv_head(b, h) != g) continue;
      const std::int64_t q_at = b.q->offset() + tok * qs[0] + h * qs[1];
      check_dense_run(*b.q, "q", q_at, d);
      load_run(*b.q->storage(), q_at, 1, d, q.data());
      PrefillRow st = start_row(d, b.sinks, h);
      for (std::int64_t t0 = 0; t0 < loaded; t0 += bs) {
        tile.reset(bs);
        // A slot whose V stays nullptr is out of P.V (loaded as 0, or masked by a repair); every other slot
        // is multiplied with its P, masked (logit -inf, P = 0) or not.
        for (std::int64_t t = t0; t < t0 + bs; ++t) {
          const auto i = static_cast<std::size_t>(t - t0);
          const bool outside = t < len && sw > 0 && len - 1 - t >= sw;
          if ((t >= len && !tail) || (outside && !k_.triton_decode.window_logit_finite)) continue;
          tile.v[i] = values.data() + t * d;
          tile.v_nonfinite[i] = bad[static_cast<std::size_t>(t)];
          if (t >= len) continue;  // logit -inf
          tile.masked[i] = 0;
          tile.scores[i] = outside ? kWindowMaskedLogit : triton_logit(b, q.data(), keys.data() + t * d);
        }
        prefill_step(b.act, d, tile, /*masked_p_times_v=*/true, k_.prefill.nan_row_zeroed, st);
      }
      for (std::int64_t i = 0; i < d; ++i)
        out[static_cast<std::size_t>(i)] =
            round_act(b.act, st.acc[static_cast<std::size_t>(i)] / (st.l + kPrefillDivBias));
      const std::int64_t o_at = b.o->offset() + tok * os[0] + h * os[1];
      check_dense_run(*b.o, "o", o_at, d);
      for (std::int64_t i = 0; i < d; ++i) store(*b.o->storage(), o_at + i, out[static_cast<std::size_t>(i)]);
      store(*b.lse->storage(), b.lse->index({tok, h}), st.m + std::log(st.l));
    }
  }
}

}  // namespace driftcheck::twin::attention
