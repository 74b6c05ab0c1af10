// RMSNorm twins (DOMAIN.md section 2): vLLM's forward_native, the csrc rms_norm kernel and the in-place
// fused_add_rms_norm kernel.
#include "builtin.hpp"
#include "twin_norm.hpp"

namespace driftcheck::twin {

namespace {

constexpr std::string_view kRmsNormSupports = "bf16/fp16; any H, row strides and offsets";
constexpr const char* kVllmCommit = "vllm-project/vllm@001394336840495fb529a33f71767ecbfdc88372";

Numerics two_roundings() {
  Numerics n;
  n.output_roundings = 2;
  return n;
}

}  // namespace

// forward_native: x to fp32, fp32 variance, act(x * rsqrt(var + eps)) then * w in the activation dtype.
// torch's row reduction order is not modelled; a sequential fp32 sum stands for it (fp32 order effects are
// far below the bf16/fp16 output rounding). Gemma's (1 + w) path keeps the whole row in fp32 and rounds once.
// GemmaRMSNorm adds the residual in the activation dtype (x + residual on bf16 tensors) before its fp32 row.
NormKernel rmsnorm_native_kernel() {
  NormKernel k;
  k.one_plus_rounds_once = true;
  k.residual = ResidualPath::kFp32;
  k.one_plus_residual = ResidualPath::kRounded;
  k.name_for_reasons = "RMSNorm.forward_native";
  return k;
}

TwinInfo rmsnorm_native_info() {
  TwinInfo i;
  i.name = "cpu.rmsnorm.native";
  i.description =
      "vLLM RMSNorm.forward_native: fp32 variance, act(x*s) then *w in act dtype; residual added in fp32 "
      "(Gemma (1 + w): residual added in act, whole row fp32, one rounding)";
  i.provenance =
      std::string(kVllmCommit) +
      " vllm/model_executor/layers/layernorm.py (RMSNorm.forward_native, GemmaRMSNorm.forward_static)";
  i.numerics = two_roundings();  // one in the Gemma (1 + w) path: 2 is the bound over both modes
  i.supports_summary = std::string(kRmsNormSupports) + "; with or without residual; plain or (1 + w) weight";
  return i;
}

// csrc rms_norm: vector width gcd(16 bytes / element, H), min(H / vec, 1024) threads (256 from 256 tokens
// on), chunk c to thread c % threads, per-thread fp32 partials, cub block reduce; rows addressed through
// their stride
// (#28103); output contiguous; no (1 + w) mode; the output loop's vector accesses fault on misaligned rows.
NormKernel rmsnorm_cuda_kernel() {
  NormKernel k;
  k.order = {1024, 1, 32, true, false, false};
  k.threads = NormThreads::kCsrcByTokens;
  k.threads_per_vector = true;
  k.vec = VecWidth::kGcd16Bytes;
  k.one_plus_supported = false;  // GemmaRMSNorm never calls the csrc kernel
  k.output_contiguous = true;
  k.misaligned_vector_faults = true;
  k.name_for_reasons = "vLLM csrc rms_norm";
  return k;
}

// The release window between vllm PR #40860 (one cast: act(x * s * w) with w in fp32) and PR #42379 (two
// casts again, vllm#42325).
NormKernel rmsnorm_cuda_onecast_kernel() {
  NormKernel k = rmsnorm_cuda_kernel();
  k.rounding = NormRounding::kFp32Weight;
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
      "vLLM csrc/layernorm_kernels.cu rms_norm: fp32 cub block reduce (min(H/vec, 1024) threads, 256 from "
      "256 "
      "tokens), act(act(x*s)*w), strided input rows, contiguous output";
  i.provenance = std::string(kVllmCommit) +
                 " csrc/layernorm_kernels.cu (rms_norm_kernel, rms_norm), csrc/quantization/"
                 "vectorization_utils.cuh (vectorize_read_with_alignment); two casts (after PR #42379)";
  i.numerics = two_roundings();
  i.numerics.reduction = csrc_reduction();
  i.numerics.batch_invariant = false;  // the block size follows the token count (vllm#48271)
  i.supports_summary = std::string(kRmsNormSupports) +
                       " of x; contiguous y; no residual; plain weight only; misaligned rows fault";
  return i;
}

TwinInfo rmsnorm_cuda_onecast_info() {
  TwinInfo i = rmsnorm_cuda_info();
  i.name = "cpu.rmsnorm.cuda_onecast";
  i.description =
      "vLLM csrc rms_norm in the PR #40860..#42379 window (around v0.20): one cast act(x*s*w), w in fp32";
  i.provenance =
      "vllm-project/vllm csrc/layernorm_kernels.cu between PR #40860 (cast once) and PR #42379 (two casts "
      "again); releases around v0.20";
  i.numerics.output_roundings = 1;
  return i;
}

// fused_add_rms_norm, in place: z = act(x + r); residual <- z; the variance comes from the ROUNDED z
// (#52104); the 16-byte vector path only when every pointer and stride allows it, else the scalar path
// (another order).
// min(H, 1024) threads (256 from 256 tokens on); the vector path sums each 8-element chunk on its own
// (_f16Vec::sum_squares) before adding it to the thread's partial.
NormKernel rmsnorm_fused_add_kernel() {
  NormKernel k;
  k.order = {1024, 1, 32, true, false, true};
  k.threads = NormThreads::kCsrcByTokens;
  k.vec = VecWidth::kIfAligned16Bytes;
  k.residual = ResidualPath::kRounded;
  k.residual_required = true;
  k.one_plus_supported = false;
  k.residual_contiguous = true;
  k.name_for_reasons = "vLLM csrc fused_add_rms_norm";
  return k;
}

TwinInfo rmsnorm_fused_add_info() {
  TwinInfo i;
  i.name = "cpu.rmsnorm.fused_add";
  i.description = "vLLM csrc fused_add_rms_norm (in place): z = act(x+r), residual <- z, act(act(z*s)*w)";
  i.provenance = std::string(kVllmCommit) +
                 " csrc/layernorm_kernels.cu (fused_add_rms_norm_kernel, "
                 "fused_add_rms_norm), csrc/type_convert.cuh (_f16Vec)";
  i.numerics.batch_invariant = false;  // the block size follows the token count (vllm#48271)
  // z, z * s and the weight product are each rounded on the way to y.
  i.numerics.output_roundings = 3;
  i.numerics.reduction = csrc_reduction();
  i.supports_summary =
      std::string(kRmsNormSupports) + " of x; contiguous residual; residual required; plain weight only";
  return i;
}

std::unique_ptr<Backend> make_cpu_rmsnorm_native() {
  return make_rmsnorm_backend(rmsnorm_native_info(), rmsnorm_native_kernel());
}
std::unique_ptr<Backend> make_cpu_rmsnorm_cuda() {
  return make_rmsnorm_backend(rmsnorm_cuda_info(), rmsnorm_cuda_kernel());
}
std::unique_ptr<Backend> make_cpu_rmsnorm_cuda_onecast() {
  return make_rmsnorm_backend(rmsnorm_cuda_onecast_info(), rmsnorm_cuda_onecast_kernel());
}
std::unique_ptr<Backend> make_cpu_rmsnorm_fused_add() {
  return make_rmsnorm_backend(rmsnorm_fused_add_info(), rmsnorm_fused_add_kernel());
}

}  // namespace driftcheck::twin
