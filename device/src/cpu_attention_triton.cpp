// TRITON_ATTN: vLLM's kernel_unified_attention (2D, and 3D + reduce_segments), pinned to the commit the
// issue #8 H200 comparison ran (docs/BACKENDS.md, fidelity table).
#include "driftcheck/device/builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

std::vector<std::int64_t> vllm_default_capture_sizes() {
  std::vector<std::int64_t> sizes{1, 2, 4};
  for (std::int64_t s = 8; s < 256; s += 8) sizes.push_back(s);
  for (std::int64_t s = 256; s <= 512; s += 16) sizes.push_back(s);
  return sizes;
}

// tl.exp (ex2.approx of x * log2(e) on NVIDIA), running max clamped from -inf to 0, L starting at 1.0 (sinks
// as the initial max), L * alpha + l_j as one FMA, fp32 acc, P rounded to the activation dtype before P.V,
// fp8 K/V dequantised as act(fp32(kv) * scale) before the dots. BLOCK_M = 16 query-head rows per program
// sharing one tile range; 2D tiles of 32 keys; decode-only batches with num_seqs <= 128 / Hkv (snapped to a
// CUDA-graph capture size) take 16 segments of 16-key tiles. The softcap is formed from two exponentials;
// V outside the window of a block's first query is zeroed; masked P (0) still multiplies V in the tile.
AttnKernel triton_unified_kernel() {
  AttnKernel k;
  k.schedule = AttnSchedule::kTiled;
  k.unified.launch = UnifiedLaunch::kVllm;
  k.exp = ExpImpl::kFastExp;
  k.dequant = KvDequant::kRoundedToAct;
  k.sinks = SinkPath::kInitialMax;
  k.unified.tile_prefill = 32;
  k.unified.tile_decode = 16;
  k.unified.split_segments = 16;
  k.unified.capture_sizes = vllm_default_capture_sizes();
  k.unified.window_tile_window = 1024;  // _is_gemma3_attention
  k.unified.window_tile_head_dims = {128, 256};
  k.unified.window_tile = 32;
  k.unified.window_v_zeroed = true;
  k.softcap_from_exp = true;
  k.unified.l_fma = true;
  k.accepts.min_head_dim = 32;  // TritonAttentionBackend.supports_head_size
  // CUDA's current_platform.fp8_dtype() is e4m3fn; "fp8_e5m2" caches hold e5m2. fnuz is ROCm MI300's.
  k.accepts.kv_dtypes = {DType::kF8E4M3FN, DType::kF8E5M2};
  k.accepts.non_causal = false;
  k.accepts.causal_reason = "unified_attention asserts causal (\"Only causal attention is supported\")";
  k.accepts.name_for_reasons = "TRITON_ATTN unified kernel";
  return k;
}

TwinInfo triton_unified_info() {
  TwinInfo i;
  i.name = "cpu.attn.triton_unified";
  i.description =
      "vLLM TRITON_ATTN kernel_unified_attention 2D/3D: BLOCK_M query blocks, tl.exp, tiles 32/16, P "
      "rounded, "
      "split-KV for small decode batches, softcap from exponentials";
  i.provenance =
      "vllm-project/vllm@001394336840495fb529a33f71767ecbfdc88372 "
      "vllm/v1/attention/ops/triton_unified_attention.py, vllm/v1/attention/ops/triton_quant_kv/_helpers.py "
      "(read at 86a153bd8b83), vllm/v1/attention/backends/triton_attn.py (3D threshold, capture-size snap)";
  i.numerics.p_rounded = true;
  i.numerics.kv_dequant_rounded = true;
  // The 2D/3D choice depends on num_seqs, so a row's bits depend on the rest of the batch.
  i.numerics.batch_invariant = false;
  i.supports_summary =
      "bf16/fp16 q; KV act/e4m3fn/e5m2; block_size multiple of 16; head_dim >= 32; any GQA; causal only; "
      "window, softcap, sinks";
  return i;
}

std::unique_ptr<Backend> make_cpu_attn_triton_unified() {
  return make_attention_backend(triton_unified_info(), triton_unified_kernel());
}

}  // namespace driftcheck::twin
