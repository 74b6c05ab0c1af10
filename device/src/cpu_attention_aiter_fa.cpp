// ROCM_AITER_FA: aiter's CK flash-attention kernels (extend/prefill) and paged decode with 256-token
// partitions.
#include "builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

// exp2 with log2(e) folded into the scale; 128-key tiles; decode rows split into 256-token partitions whose
// normalised fp32 outputs are merged by LSE; the sink joins the merge as one more partial state. fp8 K/V are
// dequantised to the activation dtype before the dots (the reading that the kernel re-quantises the scaled
// value to fp8 is unconfirmed, DOMAIN.md section 3, and not modelled).
std::unique_ptr<Backend> make_cpu_attn_aiter_fa() {
  AttnKernel k;
  k.schedule = AttnSchedule::kPartitionLse;
  k.exp = ExpImpl::kExp2Folded;
  k.dequant = KvDequant::kRoundedToAct;
  k.sinks = SinkPath::kPartialState;
  k.tile_prefill = 128;
  k.tile_decode = 128;
  k.partition = 256;
  k.block_sizes = {16, 32};
  k.softcap_from_exp = false;
  k.name_for_reasons = "ROCM_AITER_FA";
  TwinInfo i;
  i.name = "cpu.attn.aiter_fa";
  i.description = "aiter CK flash attention (ROCM_AITER_FA): exp2, LSE merge of 256-token decode partitions";
  i.provenance =
      "vllm-project/vllm@001394336840495fb529a33f71767ecbfdc88372 "
      "vllm/v1/attention/backends/rocm_aiter_fa.py; "
      "ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879 csrc/cpp_itfs/pa/pa_v1.py, pa_kernels.cuh "
      "(decode model not yet corrected: see docs/BACKENDS.md fidelity table)";
  i.numerics.p_rounded = true;
  i.numerics.kv_dequant_rounded = true;
  i.supports_summary =
      "bf16/fp16 q; bf16/fp16/fp8 KV; block_size 16/32 only; any head_dim and GQA; causal or "
      "not; window, softcap, sinks";
  return make_attention_backend(std::move(i), std::move(k));
}

}  // namespace driftcheck::twin
