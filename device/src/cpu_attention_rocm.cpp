// ROCM_ATTN: vLLM's custom HIP paged-attention decode kernel (csrc/rocm/attention.cu) and its reduce kernel.
#include "builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

// 256-token partitions; fast exp; masked logits -FLT_MAX; P normalised by (sum + 1e-6) and rounded to the
// activation dtype; k_scale after QK, v_scale after PV; partition outputs stored in the activation dtype;
// merge in fp32 dividing by (global_sum + 1e-6).
std::unique_ptr<Backend> make_cpu_attn_rocm_custom() {
  AttnKernel k;
  k.schedule = AttnSchedule::kPartitionNormalized;
  k.exp = ExpImpl::kFastExp;
  k.dequant = KvDequant::kScaleAfter;
  k.sinks = SinkPath::kNone;
  k.partition = 256;
  k.block_sizes = {16, 32};
  k.head_dims = {64, 128};
  k.max_gqa_ratio = 16;
  k.max_query_len =
      1;  // prefill goes to ROCM_ATTN's Triton prefill kernel, which reads new K/V from the inputs
  k.window = false;
  k.softcap = false;  // paged_attention_ll4mi_QKV has no logits soft cap
  k.softcap_from_exp = false;
  // fp8 caches are the platform's e4m3 (fnuz on MI300, fn on MI355); e5m2 is rejected.
  k.kv_dtypes = {DType::kF8E4M3FNUZ, DType::kF8E4M3FN};
  k.name_for_reasons = "ROCM_ATTN custom paged kernel";
  TwinInfo i;
  i.name = "cpu.attn.rocm_custom";
  i.description =
      "vLLM ROCM_ATTN custom paged attention (csrc/rocm/attention.cu): 256-token partitions, bf16 partials";
  i.provenance =
      "vllm-project/vllm@001394336840495fb529a33f71767ecbfdc88372 csrc/rocm/attention.cu "
      "(paged_attention_ll4mi_QKV, paged_attention_ll4mi_reduce), "
      "vllm/v1/attention/backends/rocm_attn.py";
  i.numerics.p_rounded = true;
  i.numerics.partials_rounded = true;
  i.supports_summary =
      "bf16/fp16 q; KV act or fp8 e4m3 (fn/fnuz); block_size 16/32; head_dim 64/128; GQA 1..16; decode "
      "(query length 1); no window, no softcap, no sinks";
  return make_attention_backend(std::move(i), std::move(k));
}

}  // namespace driftcheck::twin
