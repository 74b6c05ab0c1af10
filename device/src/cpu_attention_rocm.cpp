// ROCM_ATTN: vLLM's custom HIP paged-attention decode kernels (csrc/rocm/attention.cu, the gfx9 / MI300
// path) and their reduce kernel.
#include "builtin.hpp"
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
std::unique_ptr<Backend> make_cpu_attn_rocm_custom() {
  AttnKernel k;
  k.schedule = AttnSchedule::kLl4mi;
  k.exp = ExpImpl::kFastExp;
  k.dequant = KvDequant::kScaleAfter;
  k.sinks = SinkPath::kNone;
  k.partition = 256;
  k.warp_tokens = 64;
  k.mfma4_max_gqa = 4;
  k.warp_partials_in_act = true;
  k.reduce_padded_slots = true;
  k.page_tail_unmasked = true;
  k.heads_addressed_dense = true;
  k.masked_p_times_v = false;  // decode rows see every key below seq_len: nothing else is masked
  k.empty_tile_step = false;   // no tiles of query blocks
  k.block_sizes = {16, 32};
  k.head_dims = {64, 128};
  k.max_gqa_ratio = 16;
  k.max_query_len =
      1;  // prefill goes to ROCM_ATTN's Triton prefill kernel, which reads new K/V from the inputs
  k.window = false;
  // The kernel has no logits soft cap, and ROCM_ATTN passes it none: rocm_attn.py (f65b079) keeps the layer's
  // logits_soft_cap and hands it to no kernel, and nothing rejects it, so a softcap layer's decode rows run
  // this kernel uncapped (defect softcap_dropped; repaired, c * tanh(s / c)).
  k.softcap_dropped = true;
  k.softcap_from_exp = false;
  // fp8 caches are the platform's e4m3 (fnuz on MI300, fn on MI355); e5m2 is rejected.
  k.kv_dtypes = {DType::kF8E4M3FNUZ, DType::kF8E4M3FN};
  k.name_for_reasons = "ROCM_ATTN custom paged kernel";
  TwinInfo i;
  i.name = "cpu.attn.rocm_custom";
  i.description =
      "vLLM ROCM_ATTN custom paged attention (csrc/rocm/attention.cu): 256-token partitions, per-warp max, "
      "mfma4 (GQA <= 4) warp partials in act with truncating bf16 adds, act partition outputs";
  // The pin (vllm@0013943)'s csrc/rocm/attention.cu cannot be read here; the code index holds this file at
  // 4388f06 only, so that is the text the twin models, line by line (docs/BACKENDS.md).
  i.provenance =
      "vllm-project/vllm@4388f06cc1d412e2c9d8ac92460cd2598275a824 csrc/rocm/attention.cu "
      "(paged_attention_ll4mi_QKV_mfma16_kernel 264-771, paged_attention_ll4mi_QKV_mfma4_kernel 777-1274, "
      "paged_attention_ll4mi_reduce_kernel 1277-1483, paged_attention_custom_launcher 1590-1745, "
      "paged_attention "
      "1811-1854); "
      "vllm@69f87df387332b6d414cef3a9f170a20ede400eb vllm/v1/attention/ops/chunked_prefill_paged_decode.py "
      "(ops.paged_attention_rocm for decode rows when use_rocm_custom_paged_attention); "
      "vllm@f65b0793565300271712caa1351f0a1311f974f8 vllm/v1/attention/backends/rocm_attn.py";
  i.numerics.p_rounded = true;
  i.numerics.partials_rounded = true;
  i.supports_summary =
      "bf16/fp16 q; KV act or fp8 e4m3 (fn/fnuz); block_size 16/32; head_dim 64/128; GQA 1..16; decode "
      "(query length 1); no window, no sinks; softcap accepted and dropped (as ROCM_ATTN does)";
  return make_attention_backend(std::move(i), std::move(k));
}

}  // namespace driftcheck::twin
