// vLLM's Triton unified attention and aiter's port of it: the 2D and 3D tiled paths (tiles of keys, the
// running max and sum per tile, split-KV segments merged in fp32).
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

TileBounds AttentionTwin::block_tiles(const Batch& b, const Plan& pl, const Row& r) const {
  const std::int64_t ratio = b.hq / b.hkv, len = r.panel->valid, tile = pl.tile, w = b.p->window;
  const std::int64_t block_q = std::max<std::int64_t>(pl.block_m / ratio, 1);
  const std::int64_t span = (pl.block_m - 1) / ratio;  // query positions a block spans, less one
  const std::int64_t qpos_lo = r.j / block_q * block_q, ctx = len - r.qlen;
  TileBounds tb;
  tb.load_end = std::min(ctx + qpos_lo + span + 1, len);  // max_seq_prefix_len
  tb.tile_end = cdiv(tb.load_end, tile);
  if (w > 0) {
    const std::int64_t qpos_hi = std::min(qpos_lo + span, r.qlen - 1);
    tb.tile_start = std::max<std::int64_t>(0, (ctx + qpos_lo - w + 1) / tile);
    tb.tile_end = std::min((ctx + qpos_hi) / tile + 1, tb.tile_end);
    if (k_.unified.window_v_zeroed) tb.window_v_from = ctx + qpos_lo - w + 1;
  }
  // A tile of exactly one page is loaded without a mask (aiter); the mutant reads to the page end.
  if (k_.unified.page_tail_unmasked && tile == b.bs) tb.load_end = std::max(tb.load_end, tb.tile_end * tile);
  if (bug_ == AttnBug::kMaskedPTimesV) tb.load_end = std::max(tb.load_end, cdiv(len, b.bs) * b.bs);
  return tb;
}

// One softmax step of a unified kernel for one row: masked logits are -inf, the tile max joins the running
// max (maxnum: a NaN logit does not win), a -inf max becomes 0, so a row with no visible key yet gets M = 0
// and L = 0 from a tile that is empty for it. P.V runs over the whole loaded tile: a masked P is 0, which
// leaves the sum alone unless V is NaN or infinite there.
void AttentionTwin::unified_tile(const Batch& b, const Plan& pl, const Row& r, const TileBounds& tb,
                                 std::int64_t t0, State& st, std::vector<float>& scores) const {
  const std::int64_t tile = pl.tile;
  if (!k_.empty_tile_step && (r.hi < t0 || r.lo >= t0 + tile))
    return;  // repaired: a tile empty for the
             // row leaves its state alone
  scores.resize(static_cast<std::size_t>(tile));
  const auto [m, alpha] = tile_max(b, pl, r, t0, t0 + tile, r.lo, r.hi, st, scores);
  float tile_sum = 0.0f;
  const std::int64_t end = std::min(t0 + tile, tb.load_end);
  for (std::int64_t t = t0; t < t0 + tile; ++t) {
    const float p = exp_of(k_.exp, scores[static_cast<std::size_t>(t - t0)] - m);
    tile_sum += p;
    if (t >= end || t < tb.window_v_from) continue;  // V loaded as 0, or zeroed outside the window
    const float pv = k_.p_rounded ? round_act(b.act, p) : p;
    if (pv == 0.0f && !r.panel->v_nonfinite[static_cast<std::size_t>(t)]) continue;
    // Repaired, a key the row must not see stays out of P.V; a visible key whose P underflowed is still
    // multiplied (0 * inf = NaN is fp32 softmax, not this defect). The masked-P-times-V mutant always
    // multiplies (its bug), even with the twin's defect repaired.
    const bool masked = t < r.lo || t > r.hi;
    if (masked && !k_.masked_p_times_v && bug_ != AttnBug::kMaskedPTimesV) continue;
    const float* vt = r.panel->v.data() + t * b.d;
    for (std::int64_t i = 0; i < b.d; ++i) st.acc[static_cast<std::size_t>(i)] += pv * vt[i];
  }
  st.l = k_.unified.l_fma ? std::fma(st.l, alpha, tile_sum) : st.l * alpha + tile_sum;
  st.m = m;
}

// Unified kernels: the 2D path (one state over the block's tiles) or the 3D path (segments of
// cdiv(L, segments * tile) tiles, fp32 partial states merged by max-rescaled sums; the sink is the initial
// max of segment 0; a merged sum of 0 gives 0, not 0 / 0).
float AttentionTwin::tiled_row(const Batch& b, const Plan& pl, const Row& r, std::int64_t h,
                               float* out) const {
  const float sink = b.sinks.empty() ? kNegInf : b.sinks[static_cast<std::size_t>(h)];
  const std::int64_t len = r.panel->valid;
  const TileBounds tb = block_tiles(b, pl, r);
  const std::int64_t per_seg = pl.split ? cdiv(len, pl.segments * pl.tile) : tb.tile_end;
  std::vector<State> segs;
  std::vector<float> scores;
  for (std::int64_t sg = 0; sg < pl.segments; ++sg) {
    if (pl.split && sg * per_seg * pl.tile >= len) break;  // the segment returns early; reduce masks it
    segs.push_back(fresh_state(b.d, sg == 0 ? sink : kNegInf));
    const std::int64_t lo = std::max(sg * per_seg, tb.tile_start);
    const std::int64_t hi = pl.split ? std::min((sg + 1) * per_seg, tb.tile_end) : tb.tile_end;
    for (std::int64_t j = lo; j < hi; ++j) unified_tile(b, pl, r, tb, j * pl.tile, segs.back(), scores);
  }
  if (segs.empty()) segs.push_back(fresh_state(b.d, sink));
  if (!pl.split) {
    const State& st = segs.front();
    for (std::int64_t i = 0; i < b.d; ++i)
      out[i] = k_.unified.launch == UnifiedLaunch::kAiter
                   ? st.acc[static_cast<std::size_t>(i)] * (pl.v_mul / st.l)
                   : st.acc[static_cast<std::size_t>(i)] / st.l;
    return natural_lse(k_.exp, st.m, st.l);
  }
  float m = kNegInf;
  for (const State& s : segs) m = std::fmax(m, s.m);
  float l = 0.0f;
  std::fill(out, out + b.d, 0.0f);
  for (const State& s : segs) {
    // reduce_segments weighs each segment by exp(m_i - m) unguarded: a row whose segments all hold M = -inf
    // gets exp(-inf - -inf) = NaN. With the empty-tile step every segment that ran a tile hands a row without
    // keys M = 0, L = 0 (the reduce's expsum == 0 guard then writes 0), so only a q-block that ran no tile
    // reaches it. Repaired, a row that sees no key is empty on both paths: a segment that saw none weighs 0.
    const bool saw_none = !k_.empty_tile_step && s.m == kNegInf;
    const float w = bug_ == AttnBug::kUnscaledSplitMerge ? 1.0f : saw_none ? 0.0f : exp_of(k_.exp, s.m - m);
    l += s.l * w;
    for (std::int64_t i = 0; i < b.d; ++i) out[i] += s.acc[static_cast<std::size_t>(i)] * pl.v_mul * w;
  }
  for (std::int64_t i = 0; i < b.d; ++i) out[i] = l == 0.0f ? 0.0f : out[i] / l;
  return natural_lse(k_.exp, m, l);
}

}  // namespace driftcheck::twin::attention
