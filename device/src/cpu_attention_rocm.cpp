// ROCM_ATTN: vLLM's custom HIP paged-attention decode kernels (csrc/rocm/attention.cu, the gfx9 / MI300
// path) and their reduce kernel for decode rows, or vLLM's Triton kernel_paged_attention_2d where
// use_rocm_custom_paged_attention is false; vLLM's Triton prefix prefill (context_attention_fwd) for the rows
// of sequences with query length > 1 (chunked_prefill_paged_decode).
#include "driftcheck/device/builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

// ll4mi schedule: 256-token partitions of four 64-token warps; __expf; masked logits -FLT_MAX; per-warp
// max, P normalised by (sum + 1e-6) and rounded to act; K and V read exactly (fp8 e4m3 converts exactly to
// bf16/fp16), k_scale after QK, v_scale after PV; GQA <= 4 runs the mfma4 kernel (per-warp P.V rounded,
// warps summed with truncating bf16 adds: defect warp_partials_in_act), GQA 5..16 the mfma16 kernel (one
// fp32 P.V per partition); the reduce kernel merges the act partition outputs in fp32 and divides by
// (global sum + 1e-6). V past seq_len is read from the last context block (slot t % block_size, to the
// partition's end for mfma16, the warp's end for mfma4) and enters P.V with P = 0 (defect
// page_tail_unmasked). q is read at `token * q_stride + head * D` and o written at `(token * Hq + head) * D`
// (defect heads_addressed_dense). Text read: csrc/rocm/attention.cu at vllm 4388f06 (the code index's only
// version; the project pin 0013943's text is not stored here), docs/BACKENDS.md gives the lines.
// Prefill/extend rows (AttnKernel::prefill.prefix_prefill): vLLM's Triton _fwd_kernel (prefix_prefill.py at
// 53285d99), BLOCK_M 128 query rows, context tiles of 32 keys from the cache (fp8 dequantised to act before
// the dots), new-token tiles of 64 keys from the key/value inputs; tl.exp, P rounded to act, masked P (0)
// times the loaded V (defect masked_p_times_v), the window passed one short (defect window_one_short), rows
// of NaN logits zeroed (defect nan_row_zeroed), sinks as the initial max; q and o through their strides.
// Decode rows of batches the custom kernel does not take (a window of 2 or more, sinks, head sizes other than
// 64/128, GQA above 16; AttnKernel::triton_decode.triton_decode_2d): chunked_prefill_paged_decode.py's
// kernel_paged_attention_2d at 69f87df, tiles of one page with the tail loaded unmasked (defect
// paged_2d_tail_unmasked), fp8 dequantised to act, the prefix prefill's softmax step, keys outside the window
// at the finite logit -10000 (defect window_logit_finite).
std::unique_ptr<Backend> make_cpu_attn_rocm_custom() {
  AttnKernel k;
  k.schedule = AttnSchedule::kLl4mi;
  k.exp = ExpImpl::kFastExp;
  k.dequant = KvDequant::kScaleAfter;
  k.sinks = SinkPath::kNone;
  k.ll4mi.partition = 256;
  k.ll4mi.warp_tokens = 64;
  k.ll4mi.mfma4_max_gqa = 4;
  k.ll4mi.warp_partials_in_act = true;
  k.ll4mi.reduce_padded_slots = true;
  k.unified.page_tail_unmasked = true;
  k.ll4mi.heads_addressed_dense = true;
  // Decode rows see every key below seq_len (no window reaches the custom kernel), so only the prefix
  // prefill's tiles hold masked keys: causally later new tokens and keys outside the window.
  k.masked_p_times_v = true;
  k.empty_tile_step = false;  // no tiles of query blocks
  // vLLM's backend: kernel block sizes 16 and 32 (RocmAttentionBackend.get_supported_kernel_block_sizes).
  k.accepts.block_sizes = {16, 32};
  k.accepts.head_dims = {64, 128};
  k.accepts.max_gqa_ratio = 16;
  k.accepts.window = false;
  // The kernels have no logits soft cap, and ROCM_ATTN passes them none: rocm_attn.py (f65b079) keeps the
  // layer's logits_soft_cap and hands it to no kernel (chunked_prefill_paged_decode takes none), and nothing
  // rejects it, so a softcap layer's rows run uncapped on both paths (defect softcap_dropped; repaired,
  // c * tanh(s / c)).
  k.softcap_dropped = true;
  k.softcap_from_exp = false;
  // Decode rows: the custom kernel reads the platform's e4m3 (fnuz on MI300, fn on MI355) and rejects e5m2;
  // the prefix prefill also views an fp8_e5m2 cache as e5m2.
  k.accepts.kv_dtypes = {DType::kF8E4M3FNUZ, DType::kF8E4M3FN};
  k.prefill.prefix_prefill = true;
  k.prefill.pp_block_m = 128;  // context_attention_fwd: power-of-two pages
  k.prefill.pp_block_n = 64;
  k.prefill.pp_ctx_tile = 32;  // TRITON_BLOCK_SIZE
  k.prefill.pp_head_dims = {32,  64,  96,  128,
                            160, 192, 224, 256};  // RocmAttentionBackend.get_supported_head_sizes
  k.prefill.pp_kv_dtypes = {DType::kF8E4M3FNUZ, DType::kF8E4M3FN, DType::kF8E5M2};
  k.prefill.window_one_short = true;
  k.prefill.nan_row_zeroed = true;
  k.triton_decode.triton_decode_2d = true;
  k.triton_decode.window_logit_finite = true;
  k.triton_decode.paged_2d_tail_unmasked = true;
  k.accepts.name_for_reasons = "ROCM_ATTN custom paged kernel";
  TwinInfo i;
  i.name = "cpu.attn.rocm_custom";
  i.description =
      "vLLM ROCM_ATTN: decode rows through the custom paged attention (csrc/rocm/attention.cu: 256-token "
      "partitions, per-warp max, mfma4 warp partials in act with truncating bf16 adds, act partition "
      "outputs) or, where use_rocm_custom_paged_attention is false (window, sinks, other head sizes, GQA > "
      "16), the Triton kernel_paged_attention_2d (page tiles, window logits -10000); prefill/extend rows "
      "through the Triton prefix prefill (context tiles 32, new-token tiles 64 from the key/value inputs, P "
      "in act, window one short)";
  // The pin (vllm@0013943)'s csrc/rocm/attention.cu cannot be read here; the code index holds this file at
  // 4388f06 only, so that is the text the twin models, line by line (docs/BACKENDS.md). Likewise the prefix
  // prefill at 53285d99.
  i.provenance =
      "vllm-project/vllm@4388f06cc1d412e2c9d8ac92460cd2598275a824 csrc/rocm/attention.cu "
      "(paged_attention_ll4mi_QKV_mfma16_kernel 264-771, paged_attention_ll4mi_QKV_mfma4_kernel 777-1274, "
      "paged_attention_ll4mi_reduce_kernel 1277-1483, paged_attention_custom_launcher 1590-1745, "
      "paged_attention 1811-1854); "
      "vllm@53285d99399ba8b3a7420264d15676fe9778e321 vllm/v1/attention/ops/prefix_prefill.py (_fwd_kernel "
      "36-351, context_attention_fwd) for prefill/extend rows; "
      "vllm@69f87df387332b6d414cef3a9f170a20ede400eb vllm/v1/attention/ops/chunked_prefill_paged_decode.py "
      "(context_attention_fwd with skip_decode; ops.paged_attention_rocm for decode rows when "
      "use_rocm_custom_paged_attention, else kernel_paged_attention_2d); "
      "vllm@e2a00c7b342ab1fd0da0d249d75d2fd9741b58a0 vllm/platforms/rocm.py "
      "(use_rocm_custom_paged_attention); "
      "vllm@f65b0793565300271712caa1351f0a1311f974f8 vllm/v1/attention/backends/rocm_attn.py";
  i.numerics.p_rounded = true;
  i.numerics.partials_rounded = true;
  // Prefill/extend rows attend the layer's key/value inputs for the new tokens; their fp8 context is
  // dequantised to act before the dots (decode rows on the custom kernel read fp8 exactly: the rounding is
  // declared for prefill rows; a batch whose decode rows run the Triton decode kernel, which rounds too,
  // declares it for every row through numerics_for).
  i.numerics.new_kv = NewKv::kInputs;
  i.numerics.kv_dequant_rounded_prefill = true;
  i.supports_summary =
      "bf16/fp16 q; block_size 16/32; softcap accepted and dropped (as ROCM_ATTN does); decode rows on the "
      "custom kernel (no window past 1, no sinks, head_dim 64/128, GQA 1..16): KV act or fp8 e4m3 (fn/fnuz); "
      "decode rows on the Triton kernel (the other batches): KV act or any fp8, head_dim 32..256 by 32, any "
      "GQA, window, sinks, no query length 0; prefill/extend rows: KV act or any fp8, head_dim 32..256 by "
      "32, "
      "any GQA, window, sinks, causal, query length <= seq_len, k_new/v_new";
  return make_attention_backend(std::move(i), std::move(k));
}

}  // namespace driftcheck::twin
