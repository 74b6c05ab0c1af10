// The layer-0 pair (DOMAIN.md section 1): the fused dual RMSNorm + concat kernel and the unfused chain it
// replaced, plus the concat copy kernel.
#include "builtin.hpp"
#include "twin_norm.hpp"

namespace driftcheck::twin {

// Fused and unfused chains accept the same cases: they differ in numerics only.
constexpr const char* kDualSupports = "bf16/fp16; any H, strides and offsets; plain or (1 + w) weight";

// eagle3_aux_rmsnorm (Triton, grid (rows, 2)): fp32 math, weight multiplied in fp32, one rounding. Its tl.sum
// is modelled as 4 warps of 32 lanes, each lane summing the elements t, t + 128, ... then a warp tree.
NormKernel dual_fused_kernel() {
  NormKernel k;
  k.rounding = NormRounding::kFp32Weight;
  k.order = {128, 1, 32};
  return k;
}

TwinInfo dual_fused_info() {
  TwinInfo i;
  i.name = "cpu.dual.fused";
  i.description =
      "vLLM eagle3_aux_rmsnorm fused_dual_rmsnorm_cat: fp32 math, fp32 weight, one rounding, [N, 2H]";
  i.numerics.output_roundings = 1;
  i.numerics.reduction = {128, 1, 32};
  i.supports_summary = kDualSupports;
  return i;
}

TwinInfo concat_copy_info() {
  TwinInfo i;
  i.name = "cpu.concat.copy";
  i.description = "torch.cat / copy kernel: element-wise byte copy of a and b into out, any strides";
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
  i.numerics.output_roundings = 2;
  i.numerics.reduction = csrc_reduction();
  i.supports_summary = kDualSupports;
  return make_dual_backend(std::move(i), rmsnorm_cuda_kernel());
}

std::unique_ptr<Backend> make_cpu_concat_copy() {
  return make_concat_backend(concat_copy_info());
}

}  // namespace driftcheck::twin
