// The shared paged-attention twin. Per sequence and KV head, the keys and values the sequence owns are
// gathered once through the block table into fp32 panels (dequantised the way the kernel dequantises); every
// query row of that head then walks the panel with the kernel's schedule. Only slots below seq_len are
// gathered, so the poisoned slots of a case never reach a correct twin (real kernels read whole tiles and
// select them away).
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

float AttentionTwin::compute_row(const Batch& b, const Plan& pl, const Row& r, std::int64_t h,
                                 float* out) const {
  switch (k_.schedule) {
    case AttnSchedule::kTiled:
      return tiled_row(b, pl, r, h, out);
    case AttnSchedule::kLl4mi:
      return ll4mi_row(b, pl, r, out);
  }
  return 0.0f;
}

// The rows of one sequence that a paged (non-extend) kernel computes, written to o and lse.
void AttentionTwin::paged_sequence(const Batch& b, const Plan& pl, std::int64_t s, Panel& panel) const {
  const std::int64_t q0 = b.query_start[s], qlen = b.query_start[s + 1] - q0;
  std::vector<float> q(static_cast<std::size_t>(b.d)), out(q.size());
  const Shape& qs = b.q->strides();
  const Shape& os = b.o->strides();
  // ll4mi: q at `token * q_stride + head * D`, o at `(token * Hq + head) * D` (heads_addressed_dense).
  const bool dense = k_.ll4mi.heads_addressed_dense;
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    gather(b, pl, s, g, panel);
    for (std::int64_t h = 0; h < b.hq; ++h) {
      if (kv_head(b, h) != g) continue;
      for (std::int64_t j = 0; j < qlen; ++j) {
        const std::int64_t tok = q0 + j;
        const std::int64_t q_at = b.q->offset() + tok * qs[0] + h * (dense ? b.d : qs[1]);
        if (dense) check_dense_run(*b.q, "q", q_at, b.d);
        load_run(*b.q->storage(), q_at, dense ? 1 : qs[2], b.d, q.data());
        // fp8 MFMAs: q * q_scale (1) converted to the cache's fp8 (pa_kernels.cuh:378-411).
        if (pl.mfma_fp8 != DType::kF32)
          for (float& x : q) x = static_cast<float>(round_to(pl.mfma_fp8, x));
        const float lse = compute_row(b, pl, make_row(b, q.data(), panel, s, j), h, out.data());
        const std::int64_t o_at =
            dense ? b.o->offset() + (tok * b.hq + h) * b.d : b.o->offset() + tok * os[0] + h * os[1];
        if (dense) check_dense_run(*b.o, "o", o_at, b.d);
        for (std::int64_t i = 0; i < b.d; ++i)
          store(*b.o->storage(), o_at + i * (dense ? 1 : os[2]), out[static_cast<std::size_t>(i)]);
        store(*b.lse->storage(), b.lse->index({tok, h}), lse);
      }
    }
  }
}

void AttentionTwin::run(Case& c) const {
  const Batch b = resolve(c);
  const Plan pl = plan(b);
  // Windowed decode rows on another kernel, called on them alone with max_seqlen_q = 1 (its launch choices
  // see a decode batch; max_seqlen_k stays the whole batch's, as vLLM passes attn_metadata.max_seq_len).
  const bool windowed = window_twin_ && b.p->window > 0;
  Batch bw = b;
  bw.max_query_len = 1;
  const Plan plw = windowed ? window_twin_->plan(bw) : pl;
  // ROCM_ATTN: decode rows on the Triton decode kernel unless use_rocm_custom_paged_attention holds; the
  // custom kernel has no window and is reached with a window only when it is passed as 0 (a window of 1 less
  // one): its rows see every key.
  const bool triton_decode = !custom_decode(*b.p, b.max_seq_len);
  AttentionParams unwindowed;
  Batch bc = b;
  if (k_.triton_decode.triton_decode_2d && !triton_decode && b.p->window > 0) {
    unwindowed = *b.p;
    unwindowed.window = 0;
    bc.p = &unwindowed;
  }
  Panel panel;
  for (std::int64_t s = 0; s < b.num_seqs; ++s) {
    const std::int64_t qlen = b.query_start[s + 1] - b.query_start[s];
    if (qlen == 0) continue;
    if (k_.fa.aiter_fa_extend && qlen > 1) {
      const bool swa = b.p->window > 0 && b.seq_lens[static_cast<std::size_t>(s)] > qlen;
      if (swa)
        swa_extend_sequence(b, s);
      else
        extend_sequence(b, s);
      continue;
    }
    if (k_.prefill.prefix_prefill && qlen > 1) {
      prefix_prefill_sequence(b, s);
      continue;
    }
    if (triton_decode)
      triton_decode_sequence(b, s);
    else if (windowed)
      window_twin_->paged_sequence(bw, plw, s, panel);
    else
      paged_sequence(bc, pl, s, panel);
  }
}

}  // namespace driftcheck::twin::attention

namespace driftcheck::twin {

using attention::AttentionTwin;

std::unique_ptr<Backend> make_attention_backend(TwinInfo info, AttnKernel kernel, AttnBug bug) {
  info.op = OpKind::kAttention;
  return std::make_unique<AttentionTwin>(std::move(info), std::move(kernel), bug);
}

}  // namespace driftcheck::twin
