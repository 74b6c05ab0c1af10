// ROCM_AITER_UNIFIED_ATTN: aiter's Triton unified attention (2D, 3D + reduce_segments), one twin per device,
// since the 3D path and its segment count follow the device's compute-unit count.
#include <fmt/format.h>

#include "builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

namespace {

constexpr const char* kAiterProvenance =
    "ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879 aiter/ops/triton/attention/unified_attention.py, "
    "aiter/ops/triton/_triton_kernels/attention/unified_attention.py (CDNA paths)";

}  // namespace

// exp2 with scale * log2(e) * k_scale formed in the kernel in fp32, fp8 K/V cast to the activation dtype
// unscaled, v_scale in the epilogue (acc * (v_scale / L)), softcap from exp2 of s / c, sinks folded by
// log2(e); the 2D path unless no window, max_seqlen_k > 512 and a 2D grid of at most 4 programs per CU, then
// the 3D path with segments from the CU count; tiles min(64, next_pow2(block_size)) for decode batches and
// the 3D path (tile == block size: the page is loaded without a mask), 64 (32 from D 256) for prefill.
AttnKernel aiter_unified_kernel(int cus, DType fp8) {
  AttnKernel k;
  k.schedule = AttnSchedule::kTiled;
  k.launch = UnifiedLaunch::kAiter;
  k.exp = ExpImpl::kExp2Folded;
  k.dequant = KvDequant::kScaleAfter;
  k.sinks = SinkPath::kInitialMax;
  k.device_cus = cus;
  k.page_tail_unmasked = true;
  k.softcap_from_exp = true;
  k.scale_folded_in_fp32 = true;
  // Triton's AMD backend fuses fp ops like the NVIDIA one (HIPOptions.enable_fp_fusion defaults to true and
  // is passed to LLVM's code generation): L * alpha + l_j is one FMA.
  k.l_fma = true;
  // vLLM's ROCM_AITER_UNIFIED_ATTN backend: kernel block sizes 16 and 32, head sizes 32..256.
  k.block_sizes = {16, 32};
  k.min_head_dim = 32;
  k.max_head_dim = 256;
  k.kv_dtypes = {fp8};  // select_3d_config: F16, BF16 or FP8 e4m3 (the device's e4m3 flavour)
  k.non_causal = false;
  k.causal_reason = "aiter unified_attention asserts causal (\"Only causal attention is supported\")";
  return k;
}

namespace {

std::unique_ptr<Backend> aiter_unified(std::string name, std::string device, int cus, DType fp8) {
  AttnKernel k = aiter_unified_kernel(cus, fp8);
  k.name_for_reasons = fmt::format("ROCM_AITER_UNIFIED_ATTN ({})", device);
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
      "bf16/fp16 q; KV act or {}; block_size 16/32; head_dim 32..256; causal only; window, softcap, sinks",
      dtype_name(fp8));
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
