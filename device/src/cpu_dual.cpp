// The layer-0 pair (an EAGLE3 drafter's first layer input): the fused dual RMSNorm + concat kernel and the
// unfused chain it replaced, plus the concat copy kernel.
#include "driftcheck/device/builtin.hpp"
#include "driftcheck/device/twin_norm.hpp"

namespace driftcheck::twin {

// fused_dual_rmsnorm_cat (Triton, grid (rows, 2)): fp32 math, weight multiplied in fp32, one rounding;
// contiguous same-shape inputs only, no (1 + w) mode. Its tl.sum is modelled as 8 / 4 / 2 warps of 32 lanes
// (num_warps from next_pow2(H)), each lane summing its 16-byte chunks, then Triton's butterfly over lanes and
// warps.
NormKernel dual_fused_kernel() {
  NormKernel k;
  k.rounding = NormRounding::kFp32Weight;
  k.order = {1, 8, 32, false, true, false};
  k.threads = NormThreads::kTritonWarps;
  k.vec = VecWidth::kGcd16Bytes;
  k.one_plus_supported = false;
  k.inputs_contiguous = true;
  k.name_for_reasons = "fused_dual_rmsnorm_cat";
  return k;
}

TwinInfo dual_fused_info() {
  TwinInfo i;
  i.name = "cpu.dual.fused";
  i.description =
      "vLLM eagle3_aux_rmsnorm fused_dual_rmsnorm_cat: fp32 math, fp32 weight, one rounding, [N, 2H]";
  // The code index does not hold this file at the vLLM pin; 14743b30 is the text read and the one the H200
  // comparison ran (docs/UPSTREAM.md).
  i.provenance =
      "vllm-project/vllm@14743b30969332390c5e7e4b151483acb37174f8 vllm/model_executor/models/"
      "eagle3_aux_rmsnorm.py (fused_dual_rmsnorm_cat, _fused_dual_rmsnorm_cat_kernel)";
  i.numerics.output_roundings = 1;
  i.numerics.reduction = {128, 1, 32};
  i.supports_summary = "bf16/fp16; contiguous e and h rows; plain weight only";
  return i;
}

TwinInfo concat_copy_info() {
  TwinInfo i;
  i.name = "cpu.concat.copy";
  i.description = "torch.cat / copy kernel: element-wise byte copy of a and b into out, any strides";
  i.provenance = "pytorch/pytorch torch.cat (a data movement: every version copies bytes)";
  i.supports_summary = "any dtype (a, b, out alike); any widths, strides and offsets";
  return i;
}

std::unique_ptr<Backend> make_cpu_dual_fused() {
  return make_dual_backend(dual_fused_info(), dual_fused_kernel());
}

// The chain the fused kernel replaced: rms_norm (csrc kernel, two roundings) on each input, then torch.cat.
std::unique_ptr<Backend> make_cpu_dual_unfused() {
  TwinInfo i;
  i.name = "cpu.dual.unfused";
  i.description =
      "rms_norm (vLLM csrc kernel) on e and h, then torch.cat: two roundings per element, exact copy";
  // The csrc text read is the two-cast one (cpu.rmsnorm.cuda's); which implementation the drafter's
  // unfused RMSNorm modules dispatch to at the pin (vLLM IR: vllm_c or native) is not read here.
  i.provenance =
      "vllm-project/vllm@34d59e7f407746867f36f8e72105506a52678eb8 csrc/libtorch_stable/layernorm_kernels.cu "
      "(rms_norm per half, two casts), torch.cat";
  i.numerics.output_roundings = 2;
  i.numerics.reduction = csrc_reduction();
  i.numerics.batch_invariant = false;  // the csrc block size follows the token count (vllm#48271)
  i.supports_summary = "bf16/fp16; strided e and h rows (misaligned ones fault); plain weight only";
  return make_dual_backend(std::move(i), rmsnorm_cuda_kernel());
}

std::unique_ptr<Backend> make_cpu_concat_copy() {
  return make_concat_backend(concat_copy_info());
}

}  // namespace driftcheck::twin
