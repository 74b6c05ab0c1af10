// A case resolved to the batch the kernel sees, and the launch plan (tiles, segments, 2D or 3D) it would
// take.
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

// ---- case resolution

// The index tensors a kernel trusts, checked before any address is formed from them: an out-of-range
// seq_len or query_start_loc (or, in slot_index, block-table entry) is an `error` verdict naming the tensor
// and index, never an out-of-bounds read. A correct kernel only reads what the contract lets it read, so
// these fire for malformed cases and for mutants that read where they must not.
void check_indices(const Batch& b) {
  const std::int64_t rows = b.table->size(0), per_row = b.table->size(1) * b.bs;
  if (static_cast<std::int64_t>(b.query_start.size()) != b.num_seqs + 1 || rows < b.num_seqs)
    throw BackendError(fmt::format("query_start_loc has {} entries and block_table {} rows for {} sequences",
                                   b.query_start.size(), rows, b.num_seqs));
  for (std::int64_t s = 0; s < b.num_seqs; ++s) {
    const std::int32_t len = b.seq_lens[static_cast<std::size_t>(s)];
    if (len < 0 || len > per_row)
      throw BackendError(
          fmt::format("seq_lens[{}] = {}: outside [0, {}] (block_table rows hold {} blocks of {})", s, len,
                      per_row, b.table->size(1), b.bs));
  }
  const std::int64_t tokens = std::min(b.q->size(0), b.o->size(0));
  for (std::int64_t s = 0; s <= b.num_seqs; ++s) {
    const std::int32_t at = b.query_start[static_cast<std::size_t>(s)];
    const std::int32_t prev = s == 0 ? 0 : b.query_start[static_cast<std::size_t>(s - 1)];
    if (at < prev || at > tokens)
      throw BackendError(fmt::format("query_start_loc[{}] = {}: outside [{}, {}] (q has {} tokens)", s, at,
                                     prev, tokens, tokens));
  }
}

// What the launcher sees of a case (no outputs, no index checks): enough for plan_launch.
Batch AttentionTwin::shape_of(const Case& c) const {
  Batch b{};
  b.p = &c.get<AttentionParams>();
  b.q = &c.tensor("q");
  b.k = &c.tensor("k_cache");
  b.v = &c.tensor("v_cache");
  b.table = &c.tensor("block_table");
  b.seq_lens = load_ints(c.tensor("seq_lens"));
  b.query_start = load_ints(c.tensor("query_start_loc"));
  b.act = c.tensor("o").dtype();
  b.num_seqs = static_cast<std::int64_t>(b.seq_lens.size());
  b.hq = b.p->num_q_heads;
  b.hkv = b.p->num_kv_heads;
  b.d = b.p->head_dim;
  b.bs = b.p->block_size;
  b.num_tokens = b.query_start.empty() ? 0 : b.query_start.back();
  const auto bounds = static_cast<std::int64_t>(b.query_start.size()) - 1;
  for (std::int64_t s = 0; s < b.num_seqs; ++s) {
    if (s < bounds)
      b.max_query_len = std::max<std::int64_t>(b.max_query_len, b.query_start[s + 1] - b.query_start[s]);
    b.max_seq_len = std::max<std::int64_t>(b.max_seq_len, b.seq_lens[static_cast<std::size_t>(s)]);
  }
  b.context_chunk = extend_chunk_size(b.query_start, b.seq_lens).chunk;
  return b;
}

Batch AttentionTwin::resolve(Case& c) const {
  Batch b = shape_of(c);
  b.o = &c.tensor("o");
  b.lse = &c.tensor("lse");
  if (c.has("k_new")) b.k_new = &c.tensor("k_new"), b.v_new = &c.tensor("v_new");
  check_indices(b);
  if (b.p->has_sinks && bug_ != AttnBug::kSinkDropped) {
    const Tensor& sinks = c.tensor("sinks");
    const float fold = k_.exp == ExpImpl::kExp2Folded ? kLog2e : 1.0f;
    for (std::int64_t h = 0; h < b.hq; ++h)
      b.sinks.push_back(load(*sinks.storage(), sinks.index({h})) * fold);
  }
  return b;
}

// The CUDA-graph capture size closest to x (the first of equally close ones, in list order).
std::int64_t snap_to_capture_size(std::int64_t x, const std::vector<std::int64_t>& sizes) {
  std::int64_t best = x;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (i == 0 || std::abs(sizes[i] - x) < std::abs(best - x)) best = sizes[i];
  return best;
}

std::int64_t next_pow2(std::int64_t x) {
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(x, 1))));
}

// The launcher's choices of a unified kernel: 2D or 3D, tile, segments, BLOCK_M.
void AttentionTwin::plan_launch(const Batch& b, Plan& pl) const {
  const std::int64_t ratio = b.hq / b.hkv;
  pl.block_m = ratio <= 16 ? 16 : next_pow2(ratio);
  if (k_.unified.launch == UnifiedLaunch::kVllm) {
    // TRITON_ATTN: MIN_LAUNCH_GRID_SIZE_2D (128) / Hkv, snapped to a capture size when decode CUDA graphs
    // are on (the default).
    const std::int64_t threshold = snap_to_capture_size(128 / b.hkv, k_.unified.capture_sizes);
    pl.split = k_.unified.split_segments > 0 && b.max_query_len <= 1 && b.num_seqs <= threshold;
    pl.tile = pl.split ? k_.unified.tile_decode : k_.unified.tile_prefill;
    if (k_.unified.window_tile_window > 0 && b.p->window == k_.unified.window_tile_window &&
        contains(k_.unified.window_tile_head_dims, b.d))
      pl.tile = k_.unified.window_tile;
    pl.segments = pl.split ? k_.unified.split_segments : 1;
    return;
  }
  // aiter unified_attention (CDNA): target 4 programs per CU; the 3D kernel runs `occ` times more per CU.
  const bool all_decode = b.max_query_len == 1;
  const std::int64_t target = 4 * k_.unified.device_cus;
  const std::int64_t q_blocks = all_decode ? b.num_seqs : b.num_tokens / (pl.block_m / ratio) + b.num_seqs;
  const std::int64_t grid_2d = q_blocks * b.hkv;
  const std::int64_t decode_tile = std::min<std::int64_t>(64, next_pow2(b.bs));
  // Head sizes from 512: use_2d_kernel takes the 2D path for every batch with a prefill, and the 3D path
  // runs 4 warps (occupancy 2 * 4 / 4 = 2) with at least 16 segments.
  const bool wide = b.d >= 512;
  pl.split = !(b.p->window > 0 || b.max_seq_len <= 512 || grid_2d > target || (wide && !all_decode));
  if (!pl.split) {
    pl.tile = all_decode ? decode_tile : b.d >= 512 ? 16 : b.d >= 256 ? 32 : 64;
    if (!all_decode && b.d < 256 && b.max_query_len >= 256) pl.block_m = 128;
    return;
  }
  pl.tile = decode_tile;
  const std::int64_t occ = wide ? 2 : 4;
  const std::int64_t max_segments = std::min<std::int64_t>(128, cdiv(b.max_seq_len, pl.tile));
  const std::int64_t min_segments = std::min<std::int64_t>(wide ? 16 : 8, max_segments);
  std::int64_t n = std::min(cdiv(occ * target, grid_2d), max_segments);
  pl.segments = next_pow2(std::max(n, min_segments));
}

Plan AttentionTwin::plan(const Batch& b) const {
  const bool folded = k_.exp == ExpImpl::kExp2Folded;
  const bool after = k_.dequant == KvDequant::kScaleAfter;
  Plan pl{};
  if (k_.schedule == AttnSchedule::kTiled) plan_launch(b, pl);
  if (k_.schedule == AttnSchedule::kLl4mi) {
    // ll4mi: scale2 = scale * k_scale formed in the kernel in fp32, applied to the fp32 dot product.
    pl.qk_mul = static_cast<float>(b.p->scale) * static_cast<float>(b.p->k_scale);
  } else if (k_.unified.scale_folded_in_fp32) {
    // aiter: qk_scale = scale * RCP_LN2, then * k_descale in fp32. The 2D kernel declares `scale` a
    // tl.constexpr, so scale * RCP_LN2 is folded in double and rounded to fp32 once; the 3D kernel takes a
    // runtime fp32 scale and multiplies in fp32 (two roundings).
    const float scale_log2e =
        pl.split ? static_cast<float>(b.p->scale) * kLog2e : static_cast<float>(b.p->scale * kLog2eDouble);
    pl.qk_mul = scale_log2e * (after ? static_cast<float>(b.p->k_scale) : 1.0f);
  } else {
    // Host-side folding in double, one cast to fp32, as the launchers pass their scalars.
    pl.qk_mul = static_cast<float>(b.p->scale * (after ? b.p->k_scale : 1.0) * (folded ? kLog2eDouble : 1.0));
  }
  const double cap_fold = folded && !k_.softcap_from_exp ? kLog2eDouble : 1.0;
  // softcap_dropped without the extend path: the backend gives this kernel no softcap at all.
  const bool dropped = k_.softcap_dropped && !k_.fa.aiter_fa_extend;
  pl.softcap =
      bug_ == AttnBug::kSoftcapMissing || dropped ? 0.0f : static_cast<float>(b.p->softcap * cap_fold);
  pl.v_mul = static_cast<float>(after ? b.p->v_scale : 1.0);
  if (k_.ll4mi.fp8_mfma && is_fp8(b.k->dtype())) pl.mfma_fp8 = b.k->dtype();
  return pl;
}

}  // namespace driftcheck::twin::attention
