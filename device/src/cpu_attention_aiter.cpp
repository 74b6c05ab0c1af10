// ROCM_AITER_UNIFIED_ATTN: aiter's Triton unified attention (2D, 3D + reduce_segments), one twin per device,
// since the 3D path and its segment count follow the device's compute-unit count.
#include <fmt/format.h>

#include "driftcheck/device/builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

namespace {

constexpr const char* kAiterProvenance =
    "ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879 aiter/ops/triton/attention/unified_attention.py, "
    "aiter/ops/triton/_triton_kernels/attention/unified_attention.py (CDNA paths), as "
    "vllm-project/vllm@00e5aa02a6470e57ef1e606d1caf95c3e2677e41 "
    "vllm/v1/attention/backends/rocm_aiter_unified_attn.py calls it (supports, fp8 cache view; the index "
    "holds no text of it at the vLLM pin)";

}  // namespace

// exp2 with scale * log2(e) * k_scale formed in the kernel in fp32, fp8 K/V cast to the activation dtype
// unscaled, v_scale in the epilogue (acc * (v_scale / L)), softcap from exp2 of s / c, sinks folded by
// log2(e); the 2D path unless no window, max_seqlen_k > 512 and a 2D grid of at most 4 programs per CU, then
// the 3D path with segments from the CU count; tiles min(64, next_pow2(block_size)) for decode batches and
// the 3D path (tile == block size: the page is loaded without a mask), 64 (32 from D 256, 16 from D 512)
// for prefill; from D 512 every batch with a prefill takes the 2D path and the 3D path runs at occupancy 2
// with at least 16 segments.
AttnKernel aiter_unified_kernel(int cus, DType fp8) {
  AttnKernel k;
  k.schedule = AttnSchedule::kTiled;
  k.unified.launch = UnifiedLaunch::kAiter;
  k.exp = ExpImpl::kExp2Folded;
  k.dequant = KvDequant::kScaleAfter;
  k.sinks = SinkPath::kInitialMax;
  k.unified.device_cus = cus;
  k.unified.page_tail_unmasked = true;
  k.softcap_from_exp = true;
  k.unified.scale_folded_in_fp32 = true;
  // Triton's AMD backend fuses fp ops like the NVIDIA one (HIPOptions.enable_fp_fusion defaults to true and
  // is passed to LLVM's code generation): L * alpha + l_j is one FMA.
  k.unified.l_fma = true;
  // vLLM's ROCM_AITER_UNIFIED_ATTN backend (00e5aa02): block sizes MultipleOf(16) (supports_block_size,
  // get_kv_cache_shape), head sizes >= 32 with no upper bound (supports_head_size); the 3D path's
  // select_3d_config asserts TILE_SIZE % block_size == 0 where the tile exceeds the block (block size 48).
  k.accepts.min_head_dim = 32;
  k.unified.tile_divides_block_3d = true;
  // Cache dtypes auto/float16/bfloat16/fp8/fp8_e4m3/fp8_e5m2; vLLM views every fp8 cache as the platform's
  // e4m3 (fnuz on MI300X, fn on MI355X), which is the e4m3_dtype select_3d_config accepts, so an fp8_e5m2
  // cache runs with its bytes read as e4m3 (defect e5m2_read_as_e4m3).
  k.accepts.kv_dtypes = {fp8, DType::kF8E5M2};
  k.fp8_view = fp8;
  k.e5m2_read_as_e4m3 = true;
  k.accepts.non_causal = false;
  k.accepts.causal_reason = "aiter unified_attention asserts causal (\"Only causal attention is supported\")";
  return k;
}

namespace {

std::unique_ptr<Backend> aiter_unified(std::string name, std::string device, int cus, DType fp8) {
  AttnKernel k = aiter_unified_kernel(cus, fp8);
  k.accepts.name_for_reasons = fmt::format("ROCM_AITER_UNIFIED_ATTN ({})", device);
  TwinInfo i;
  i.name = std::move(name);
  i.description = fmt::format(
      "aiter unified_attention on {} ({} CUs): exp2 with folded scales, BLOCK_M query blocks, 2D/3D by grid "
      "size, unmasked page loads when tile == block size",
      device, cus);
  i.provenance = kAiterProvenance;
  i.numerics.p_rounded = true;
  // The 2D/3D choice and the segment count depend on the whole batch.
  i.numerics.batch_invariant = false;
  i.supports_summary = fmt::format(
      "bf16/fp16 q; KV act, {} or e5m2 (read as {}); block_size a multiple of 16 (48 not on the 3D path); "
      "head_dim >= 32; causal only; window, softcap, sinks",
      dtype_name(fp8), dtype_name(fp8));
  return make_attention_backend(std::move(i), std::move(k));
}

}  // namespace

std::unique_ptr<Backend> make_cpu_attn_aiter_unified_mi300x() {
  return aiter_unified("cpu.attn.aiter_unified_mi300x", "MI300X", 304, DType::kF8E4M3FNUZ);
}

std::unique_ptr<Backend> make_cpu_attn_aiter_unified_mi355x() {
  return aiter_unified("cpu.attn.aiter_unified_mi355x", "MI355X", 256, DType::kF8E4M3FN);
}

}  // namespace driftcheck::twin
