// TRITON_ATTN: vLLM's kernel_unified_attention (2D) and its split-KV decode path (3D + reduce_segments).
#include "builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

// Natural exp, running max clamped from -inf to 0, L starting at 1.0 (sinks as the initial max), fp32 acc,
// P rounded to the activation dtype before P.V, fp8 K/V dequantised as act(fp32(kv) * scale) before the dots.
// 2D tiles of 32 keys; decode-only batches with num_seqs * Hkv <= 128 take 16 segments of 16-key tiles.
AttnKernel triton_unified_kernel() {
  AttnKernel k;
  k.schedule = AttnSchedule::kTiled;
  k.exp = ExpImpl::kExp;
  k.dequant = KvDequant::kRoundedToAct;
  k.sinks = SinkPath::kInitialMax;
  k.tile_prefill = 32;
  k.tile_decode = 16;
  k.split_segments = 16;
  k.split_max_seq_heads = 128;
  k.name_for_reasons = "TRITON_ATTN unified kernel";
  return k;
}

TwinInfo triton_unified_info() {
  TwinInfo i;
  i.name = "cpu.attn.triton_unified";
  i.description =
      "vLLM TRITON_ATTN kernel_unified_attention 2D/3D: exp, tiles 32/16, P rounded, split-KV for small "
      "decode batches";
  i.numerics.p_rounded = true;
  i.numerics.kv_dequant_rounded = true;
  // The 2D/3D choice depends on num_seqs, so a row's bits depend on the rest of the batch.
  i.numerics.batch_invariant = false;
  i.supports_summary =
      "bf16/fp16 q; bf16/fp16/fp8 KV; block_size multiple of 16; any head_dim and GQA; causal or "
      "not; window, softcap, sinks";
  return i;
}

std::unique_ptr<Backend> make_cpu_attn_triton_unified() {
  return make_attention_backend(triton_unified_info(), triton_unified_kernel());
}

}  // namespace driftcheck::twin
