// ROCM_AITER_FA: decode through aiter's paged_attention_v1 (an ll4mi kernel), or with a sliding window
// through aiter's Triton unified_attention; prefill and extend through aiter's flash_attn_varlen_func on the
// new tokens' inputs and the gathered context, merged by vLLM's merge_attn_states. The backend's routing is
// read in vllm/v1/attention/backends/rocm_aiter_fa.py at vllm 002d0eb6 (the code index's text; the project
// pin 0013943's is not stored here).
#include "driftcheck/device/builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

// Decode rows without a window: aiter paged_attention_v1 runs paged_attention_ll4mi_QKV_mfma16_kernel for
// every GQA ratio (pa_kernels.cuh): 256-token partitions of four 64-token warps, __expf, per-warp max, P
// normalised by (sum + 1e-6) and rounded to act, one fp32 P.V per partition rounded to act, the ll4mi reduce;
// a softcap as ck_tile's LogitsSoftCap, c * tanhf(s * (1 / c)); V past seq_len read from the last context
// block with P = 0 (defect page_tail_unmasked); q and o addressed as dense heads (defect
// heads_addressed_dense). Decode rows of a windowed case: aiter's unified_attention (rocm_aiter_fa.py
// `use_unified_attention`), the cpu.attn.aiter_unified_* arithmetic on the 2D path (a window forces it, so no
// CU count enters). With an fp8 cache the decode kernel runs QK and P.V on fp8 MFMAs: q and the normalised P
// converted to the cache's fp8 (AttnKernel::ll4mi.fp8_mfma; a q beyond the format's range is declined, its
// unclamped conversion not modelled). Rows of sequences with query length > 1 take the prefill/extend
// path (AttnKernel::fa.aiter_fa_extend; contexts in chunks of 32768 / extends), which vLLM calls without the
// softcap (defect softcap_dropped); a windowed extend runs extend_for_sliding_window, whose window of keys,
// new tokens included, is gathered from the cache (defect swa_new_kv_from_cache).
AttnKernel aiter_fa_kernel() {
  AttnKernel k;
  k.schedule = AttnSchedule::kLl4mi;
  k.exp = ExpImpl::kFastExp;
  k.dequant = KvDequant::kScaleAfter;
  k.sinks = SinkPath::kNone;
  k.ll4mi.partition = 256;
  k.ll4mi.warp_tokens = 64;
  k.ll4mi.mfma4_max_gqa = 0;  // pa_v1 instantiates the mfma16 kernel only
  k.unified.page_tail_unmasked = true;
  k.ll4mi.heads_addressed_dense = true;
  k.ll4mi.reduce_padded_slots = true;
  k.masked_p_times_v = true;
  k.empty_tile_step = false;
  k.softcap_from_exp = false;
  k.softcap_times_rcp = true;
  k.accepts.block_sizes = {16, 32};
  // The backend's head sizes; the kernel needs multiples of 64 (VHELOOP = HEAD_SIZE / 64).
  k.accepts.head_dims = {64, 128, 256};
  k.fa.aiter_fa_extend = true;
  k.fa.context_requantised = true;
  k.fa.swa_new_kv_from_cache = true;
  k.softcap_dropped = true;
  // fp8 caches: the platform's e4m3 (current_platform.fp8_dtype(): fnuz on MI300, fn on MI355); the unified
  // kernel casts either to act unscaled (exact) and folds k_scale into its logit multiplier.
  k.accepts.kv_dtypes = {DType::kF8E4M3FNUZ, DType::kF8E4M3FN};
  AttnKernel unified = aiter_unified_kernel(0, DType::kF8E4M3FNUZ);
  unified.accepts.kv_dtypes = k.accepts.kv_dtypes;
  unified.e5m2_read_as_e4m3 = false;  // no e5m2 cache reaches ROCM_AITER_FA (its kv_dtypes above)
  k.fa.windowed_decode = std::make_shared<const AttnKernel>(std::move(unified));
  k.accepts.name_for_reasons = "ROCM_AITER_FA paged_attention_v1";
  k.ll4mi.fp8_mfma = true;
  return k;
}

TwinInfo aiter_fa_info() {
  TwinInfo i;
  i.name = "cpu.attn.aiter_fa";
  i.description =
      "ROCM_AITER_FA decode: aiter paged_attention_v1 (ll4mi mfma16: 256-token partitions, per-warp max, "
      "P and partition outputs in act; fp8 caches: q and P to fp8 for fp8 MFMAs; reduce with 1e-6), windowed "
      "decode on aiter's unified_attention; "
      "prefill/extend: flash_attn_varlen passes on the new tokens' inputs and the re-quantised context, "
      "merged by merge_attn_states; windowed extends: one pass over the window gathered from the cache, new "
      "tokens included (extend_for_sliding_window)";
  i.provenance =
      "vllm-project/vllm@002d0eb6012db14ad48a6db7abecdc1015f2da5d "
      "vllm/v1/attention/backends/rocm_aiter_fa.py (AiterFlashAttentionImpl.forward, extend_forward, "
      "extend_for_sliding_window, cp_mha_gather_cache_kernel); "
      "ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879 aiter/ops/attention.py paged_attention_v1, "
      "csrc/cpp_itfs/pa/pa_v1.py, pa_v1.cpp.jinja, pa_kernels.cuh (_paged_attention_kernel, "
      "_paged_attention_ll4mi_reduce_kernel), "
      "aiter/ops/triton/_triton_kernels/attention/unified_attention.py; "
      "vllm/v1/attention/ops/triton_merge_attn_states.py";
  i.numerics.p_rounded = true;
  i.numerics.partials_rounded = true;
  i.numerics.new_kv = NewKv::kInputs;  // prefill/extend rows attend the layer's key/value inputs
  // fp8 extend: the gathered context is dequantised and stored in the act workspace before the dots (the
  // rounding a correct gather makes; the fp8 re-quantisation beyond it is the defect context_requantised).
  i.numerics.kv_dequant_rounded = true;
  // fp8 decode rows: q and P converted to the cache's fp8 for fp8 MFMAs (numerics_for clears it for batches
  // whose decode rows run the unified kernel: a window).
  i.numerics.fp8_mfma_decode = true;
  i.supports_summary =
      "bf16/fp16 q; KV act or fp8 e4m3 (fn/fnuz; decode rows' q within its range); block_size 16/32; "
      "head_dim 64/128/256; window; softcap; query length <= seq_len; no sinks";
  return i;
}

std::unique_ptr<Backend> make_cpu_attn_aiter_fa() {
  return make_attention_backend(aiter_fa_info(), aiter_fa_kernel());
}

}  // namespace driftcheck::twin
