// RMSNorm twins (DOMAIN.md section 2): vLLM's forward_native, the csrc rms_norm kernel and the in-place
// fused_add_rms_norm kernel.
#include "builtin.hpp"
#include "twin_norm.hpp"

namespace driftcheck::twin {

namespace {

constexpr std::string_view kRmsNormSupports = "bf16/fp16; any H, row strides and offsets";

Numerics two_roundings() {
  Numerics n;
  n.output_roundings = 2;
  return n;
}

}  // namespace

// forward_native: x to fp32, fp32 variance, act(x * rsqrt(var + eps)) then * w in the activation dtype.
// torch's row reduction order is not modelled; a sequential fp32 sum stands for it (fp32 order effects are
// far below the bf16/fp16 output rounding). Gemma's (1 + w) path keeps the whole row in fp32 and rounds once.
NormKernel rmsnorm_native_kernel() {
  NormKernel k;
  k.one_plus_rounds_once = true;
  k.residual = ResidualPath::kFp32;
  return k;
}

TwinInfo rmsnorm_native_info() {
  TwinInfo i;
  i.name = "cpu.rmsnorm.native";
  i.description =
      "vLLM RMSNorm.forward_native: fp32 variance, act(x*s) then *w in act dtype; residual added in fp32";
  i.numerics = two_roundings();  // one in the Gemma (1 + w) path: 2 is the bound over both modes
  i.supports_summary = std::string(kRmsNormSupports) + "; with or without residual; plain or (1 + w) weight";
  return i;
}

// csrc rms_norm: min(H, 1024) threads, vector loads of gcd(16 bytes / element, H) elements, strided
// per-thread partial sums, cub block reduction; rows addressed through their stride (#28103).
NormKernel rmsnorm_cuda_kernel() {
  NormKernel k;
  k.order = {1024, 1, 32};
  k.vec = VecWidth::kGcd16Bytes;
  return k;
}

// The reduction the csrc kernels run: up to 1024 threads, 16-byte vector loads, cub's block reduce.
ReductionShape csrc_reduction() {
  return {1024, 8, 32};
}

TwinInfo rmsnorm_cuda_info() {
  TwinInfo i;
  i.name = "cpu.rmsnorm.cuda";
  i.description =
      "vLLM csrc/layernorm_kernels.cu rms_norm: fp32 block reduce (1024 threads), act(act(x*s)*w), strided "
      "rows";
  i.numerics = two_roundings();
  i.numerics.reduction = csrc_reduction();
  i.supports_summary = std::string(kRmsNormSupports) + "; no residual";
  return i;
}

// fused_add_rms_norm, in place: z = act(x + r); residual <- z; the variance comes from the ROUNDED z
// (#52104); the 16-byte vector path only when every pointer and stride allows it, else the scalar path
// (another order).
NormKernel rmsnorm_fused_add_kernel() {
  NormKernel k;
  k.order = {1024, 1, 32};
  k.vec = VecWidth::kIfAligned16Bytes;
  k.residual = ResidualPath::kRounded;
  k.residual_required = true;
  return k;
}

TwinInfo rmsnorm_fused_add_info() {
  TwinInfo i;
  i.name = "cpu.rmsnorm.fused_add";
  i.description = "vLLM csrc fused_add_rms_norm (in place): z = act(x+r), residual <- z, act(act(z*s)*w)";
  // z, z * s and the weight product are each rounded on the way to y.
  i.numerics.output_roundings = 3;
  i.numerics.reduction = csrc_reduction();
  i.supports_summary = std::string(kRmsNormSupports) + "; residual required";
  return i;
}

std::unique_ptr<Backend> make_cpu_rmsnorm_native() {
  return make_rmsnorm_backend(rmsnorm_native_info(), rmsnorm_native_kernel());
}
std::unique_ptr<Backend> make_cpu_rmsnorm_cuda() {
  return make_rmsnorm_backend(rmsnorm_cuda_info(), rmsnorm_cuda_kernel());
}
std::unique_ptr<Backend> make_cpu_rmsnorm_fused_add() {
  return make_rmsnorm_backend(rmsnorm_fused_add_info(), rmsnorm_fused_add_kernel());
}

}  // namespace driftcheck::twin
