// The steps every attention path shares: keys and values gathered through the block table into fp32 panels
// (dequantised the way the kernel dequantises), a query row, its logits and online-softmax state.
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

// ---- KV gather

std::int64_t AttentionTwin::slot_index(const Batch& b, const Tensor& cache, std::int64_t s, std::int64_t t,
                                       std::int64_t g) const {
  const Tensor& tb = *b.table;
  const std::int64_t j = t / b.bs;
  const std::int64_t row = bug_ == AttnBug::kTableStrideIgnored ? tb.size(1) : tb.strides()[0];
  std::int64_t page = load_i32(*tb.storage(), tb.offset() + s * row + j * tb.strides()[1]);
  if (page < 0 || page >= cache.size(0))
    throw BackendError(
        fmt::format("block_table[{}, {}] = {}: outside the cache's {} blocks", s, j, page, cache.size(0)));
  std::int64_t slot = t % b.bs;
  if (bug_ == AttnBug::kPageConversion && b.bs >= 64) {
    // Pages of bs tokens taken for kernel blocks of 16: the page id addresses a 16-token block directly.
    const std::int64_t flat = page * kKernelBlock + t % kKernelBlock;
    page = flat / b.bs;
    slot = flat % b.bs;
  }
  const Shape& st = cache.strides();
  return cache.offset() + page * st[0] + slot * st[1] + g * st[2];
}

DType misread_fp8(DType t) {
  if (t == DType::kF8E4M3FN) return DType::kF8E4M3FNUZ;
  if (t == DType::kF8E4M3FNUZ) return DType::kF8E4M3FN;
  return t;
}

void AttentionTwin::gather_one(const Batch& b, const Tensor& cache, double scale, std::int64_t s,
                               std::int64_t g, std::vector<float>& out, std::int64_t rows) const {
  DType as = bug_ == AttnBug::kFp8FnFnuzSwapped ? misread_fp8(cache.dtype()) : cache.dtype();
  if (k_.e5m2_read_as_e4m3 && as == DType::kF8E5M2) as = k_.fp8_view;
  out.resize(static_cast<std::size_t>(rows * b.d));
  const bool rounded = k_.dequant == KvDequant::kRoundedToAct;
  const float sc = static_cast<float>(scale);
  for (std::int64_t t = 0; t < rows; ++t) {
    float* dst = out.data() + t * b.d;
    load_run_as(*cache.storage(), as, slot_index(b, cache, s, t, g), cache.strides()[3], b.d, dst);
    if (rounded)
      for (std::int64_t i = 0; i < b.d; ++i) dst[i] = round_act(b.act, dst[i] * sc);
  }
}

void AttentionTwin::gather(const Batch& b, const Plan& pl, std::int64_t s, std::int64_t g,
                           Panel& panel) const {
  panel.valid = b.seq_lens[static_cast<std::size_t>(s)];
  // Kernels that load whole pages (aiter unified with tile == block size, the ll4mi kernels, the
  // masked-P-times-V mutant) also read
  // the slots past seq_len in the last page, where a case keeps its poison.
  const bool whole_pages =
      bug_ == AttnBug::kMaskedPTimesV ||
      (k_.unified.page_tail_unmasked && (k_.schedule == AttnSchedule::kLl4mi || pl.tile == b.bs));
  panel.rows = whole_pages ? cdiv(panel.valid, b.bs) * b.bs : panel.valid;
  gather_one(b, *b.k, b.p->k_scale, s, g, panel.k, panel.rows);
  gather_one(b, *b.v, b.p->v_scale, s, g, panel.v, panel.rows);
  panel.v_nonfinite.assign(static_cast<std::size_t>(panel.rows), 0);
  for (std::int64_t t = 0; t < panel.rows; ++t) {
    const float* vt = panel.v.data() + t * b.d;
    panel.v_nonfinite[static_cast<std::size_t>(t)] =
        std::any_of(vt, vt + b.d, [](float x) { return !std::isfinite(x); });
  }
}

// ---- one query row

Row AttentionTwin::make_row(const Batch& b, const float* q, const Panel& panel, std::int64_t s,
                            std::int64_t j) const {
  const std::int64_t len = panel.valid;
  const std::int64_t qlen = b.query_start[s + 1] - b.query_start[s];
  const std::int64_t pos = len - qlen + j;  // causal alignment at the end
  std::int64_t hi = b.p->causal ? pos + (bug_ == AttnBug::kCausalOffByOne ? 1 : 0) : len - 1;
  std::int64_t lo = b.p->window > 0 ? pos - b.p->window + (bug_ == AttnBug::kWindowOffByOne ? 0 : 1) : 0;
  return {q, &panel, std::max<std::int64_t>(lo, 0), std::min(hi, len - 1), j, qlen};
}

float AttentionTwin::logit(const Batch& b, const Plan& pl, const Row& r, std::int64_t t) const {
  const float* kt = r.panel->k.data() + t * b.d;
  float dot = 0.0f;
  for (std::int64_t i = 0; i < b.d; ++i) dot += r.q[i] * kt[i];
  const float s = bug_ == AttnBug::kLogitsRounded ? round_act(b.act, pl.qk_mul * dot) : pl.qk_mul * dot;
  if (pl.softcap <= 0.0f) return s;
  if (!k_.softcap_from_exp)
    return pl.softcap * std::tanh(k_.softcap_times_rcp ? s * (1.0f / pl.softcap) : s / pl.softcap);
  // Triton kernels form tanh from two exponentials of s / c (aiter: exp2 of the log2-domain logit over the
  // natural cap, the same e^(s/c)); each overflows past |s / c| ~ 88.7 and inf / inf is NaN.
  const float d = s / pl.softcap;
  const float p1 = exp_of(k_.exp, d), p2 = exp_of(k_.exp, -d);
  const float capped = pl.softcap * (p1 - p2) / (p1 + p2);
  return k_.exp == ExpImpl::kExp2Folded ? capped * kLog2e : capped;
}

// One tile's scores (keys outside [first, last] masked to -inf) and the new running max (maxnum: a NaN logit
// does not win; a -inf max becomes 0), the accumulator rescaled to it. Returns {new max, alpha}; st.m and L
// are the caller's to update.
std::pair<float, float> AttentionTwin::tile_max(const Batch& b, const Plan& pl, const Row& r, std::int64_t t0,
                                                std::int64_t t1, std::int64_t first, std::int64_t last,
                                                State& st, std::vector<float>& scores) const {
  float m = st.m;
  for (std::int64_t t = t0; t < t1; ++t) {
    const float s = t >= first && t <= last ? logit(b, pl, r, t) : kNegInf;
    scores[static_cast<std::size_t>(t - t0)] = s;
    m = std::fmax(m, s);
  }
  if (m == kNegInf || bug_ == AttnBug::kNoMaxSubtraction) m = 0.0f;
  const float alpha = exp_of(k_.exp, st.m - m);
  for (float& a : st.acc) a *= alpha;
  return {m, alpha};
}

}  // namespace driftcheck::twin::attention
