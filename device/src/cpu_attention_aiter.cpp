// ROCM_AITER_UNIFIED_ATTN: aiter's Triton unified attention, exp2 with log2(e) folded into the scales.
#include "builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

// Logits scaled by scale * k_scale * log2(e) (softcap and sinks folded the same way), exp2, P rounded, fp8
// K/V read exactly with v_scale in the epilogue. One pass with 64-key tiles (the tuned tile for its preferred
// block size); its 3D split path (seqlen > 512) is not modelled.
std::unique_ptr<Backend> make_cpu_attn_aiter_unified() {
  AttnKernel k;
  k.schedule = AttnSchedule::kTiled;
  k.exp = ExpImpl::kExp2Folded;
  k.dequant = KvDequant::kScaleAfter;
  k.sinks = SinkPath::kInitialMax;
  k.tile_prefill = 64;
  k.tile_decode = 64;
  k.non_causal = false;
  k.name_for_reasons = "ROCM_AITER_UNIFIED_ATTN";
  TwinInfo i;
  i.name = "cpu.attn.aiter_unified";
  i.description =
      "aiter unified_attention (ROCM_AITER_UNIFIED_ATTN): exp2, scale*log2e folded, fp8 scales folded";
  i.numerics.p_rounded = true;
  i.supports_summary =
      "bf16/fp16 q; bf16/fp16/fp8 KV; block_size multiple of 16; causal only; window, softcap, sinks";
  return make_attention_backend(std::move(i), std::move(k));
}

}  // namespace driftcheck::twin
