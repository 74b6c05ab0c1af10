// ROCM_AITER_FA: decode through aiter's paged_attention_v1 (an ll4mi kernel); prefill and extend through
// aiter's flash_attn_varlen_func on the new tokens' inputs and the gathered context, merged by vLLM's
// merge_attn_states.
#include "builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

// Decode rows: aiter paged_attention_v1 runs paged_attention_ll4mi_QKV_mfma16_kernel for every GQA ratio
// (pa_kernels.cuh): 256-token partitions of four 64-token warps, __expf, per-warp max, P normalised by
// (sum + 1e-6) and rounded to act, one fp32 P.V per partition rounded to act, the ll4mi reduce. A sliding
// window sets the logits of keys below it to -FLT_MAX, which stay in the softmax and in P.V (P = 0), so an
// infinite V there gives NaN (defect masked_p_times_v). Declined, each with the reason: fp8 caches (the
// kernel then quantises q and P to fp8 for fp8 MFMAs), softcap (ck_tile's LogitsSoftCap transform, applied
// after the window mask). Rows of sequences with query length > 1 take the prefill/extend path
// (AttnKernel::aiter_fa_extend; windowed extends and chunked contexts declined).
std::unique_ptr<Backend> make_cpu_attn_aiter_fa() {
  AttnKernel k;
  k.schedule = AttnSchedule::kLl4mi;
  k.exp = ExpImpl::kFastExp;
  k.dequant = KvDequant::kScaleAfter;
  k.sinks = SinkPath::kNone;
  k.partition = 256;
  k.warp_tokens = 64;
  k.mfma4_max_gqa = 0;  // pa_v1 instantiates the mfma16 kernel only
  k.page_tail_unmasked = true;
  k.reduce_padded_slots = true;
  k.masked_p_times_v = true;
  k.empty_tile_step = false;
  k.softcap_from_exp = false;
  k.block_sizes = {16, 32};
  // The backend's head sizes; the kernel needs multiples of 64 (VHELOOP = HEAD_SIZE / 64).
  k.head_dims = {64, 128, 256};
  k.aiter_fa_extend = true;
  k.context_requantised = true;
  // fp8 caches reach the prefill/extend path only (decode with fp8 is declined above): the platform's e4m3
  // (current_platform.fp8_dtype(): fnuz on MI300, fn on MI355).
  k.kv_dtypes = {DType::kF8E4M3FNUZ, DType::kF8E4M3FN};
  k.name_for_reasons = "ROCM_AITER_FA paged_attention_v1";
  k.fp8_unmodelled =
      "ROCM_AITER_FA's paged_attention_v1 (decode rows) quantises q and P to fp8 for fp8 MFMAs with an fp8 "
      "cache; the twin does not model that path (batches without decode rows run)";
  k.softcap_unmodelled =
      "ROCM_AITER_FA's paged_attention_v1 applies ck_tile's LogitsSoftCap after the window mask; the twin "
      "does not model that transform";
  TwinInfo i;
  i.name = "cpu.attn.aiter_fa";
  i.description =
      "ROCM_AITER_FA decode: aiter paged_attention_v1 (ll4mi mfma16: 256-token partitions, per-warp max, "
      "P and partition outputs in act, reduce with 1e-6); prefill/extend: flash_attn_varlen passes on the "
      "new tokens' inputs and the re-quantised context, merged by merge_attn_states";
  i.provenance =
      "vllm-project/vllm@001394336840495fb529a33f71767ecbfdc88372 "
      "vllm/v1/attention/backends/rocm_aiter_fa.py; "
      "ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879 csrc/cpp_itfs/pa/pa_v1.py, pa_v1.cpp.jinja, "
      "pa_kernels.cuh (_paged_attention_kernel, _paged_attention_ll4mi_reduce_kernel); "
      "vllm/v1/attention/ops/triton_merge_attn_states.py";
  i.numerics.p_rounded = true;
  i.numerics.partials_rounded = true;
  i.numerics.new_kv = NewKv::kInputs;  // prefill/extend rows attend the layer's key/value inputs
  // fp8 extend: the gathered context is dequantised and stored in the act workspace before the dots (the
  // rounding a correct gather makes; the fp8 re-quantisation beyond it is the defect context_requantised).
  i.numerics.kv_dequant_rounded = true;
  i.supports_summary =
      "bf16/fp16 q; KV act, or fp8 e4m3 (fn/fnuz) in batches without decode rows; block_size 16/32; "
      "head_dim 64/128/256; window (not with a context); query length <= seq_len; no softcap (declined), no "
      "sinks";
  return make_attention_backend(std::move(i), std::move(k));
}

}  // namespace driftcheck::twin
