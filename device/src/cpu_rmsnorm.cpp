// RMSNorm twins (docs/BACKENDS.md "RMSNorm family"): vLLM's forward_native, the csrc rms_norm kernel and the
// in-place fused_add_rms_norm kernel.
#include "driftcheck/device/builtin.hpp"
#include "driftcheck/device/twin_norm.hpp"

namespace driftcheck::twin {

namespace {

constexpr std::string_view kRmsNormSupports = "bf16/fp16; any H, row strides and offsets";
// The texts read (docs/BACKENDS.md, "Norm twins"): the code index holds none of these files at the vLLM pin
// 0013943, so each twin names the stored commit of its release range that was read, line by line.
// Two casts: the v0.19.1 text of csrc/libtorch_stable/layernorm_kernels.cu (before PR #40860; PR #42379
// restored its output arithmetic).
constexpr const char* kTwoCastText = "vllm-project/vllm@34d59e7f407746867f36f8e72105506a52678eb8";
// One cast: act(x * s * w), w in fp32 (PR #40860..#42379, and again since 225936a: vllm#49616, PR #49639 open
// on 2026-07-23); this text has the optional weight of PR #44109, so it is from the later window.
constexpr const char* kOneCastText = "vllm-project/vllm@0b9c541280d4c302bcc964e98eb807b01925dc82";
constexpr const char* kHelpersRead =
    "csrc/libtorch_stable/quantization/vectorization_utils.cuh@1051220e (vectorize_read_with_alignment), "
    "csrc/type_convert.cuh@0c0c819b (_f16Vec), csrc/cub_helpers.h@78143fd6 (CubAddOp)";

Numerics two_roundings() {
  Numerics n;
  n.output_roundings = 2;
  return n;
}

}  // namespace

// forward_native: x to fp32, fp32 variance, act(x * rsqrt(var + eps)) then * w in the activation dtype.
// torch's row reduction order is not modelled; a sequential fp32 sum stands for it (fp32 order effects are
// far below the bf16/fp16 output rounding). Gemma's (1 + w) path keeps the whole row in fp32 and rounds once.
// GemmaRMSNorm adds the residual in bf16 for bf16 rows (x + residual) and in fp32 for fp16 rows
// (x.float() + residual.float()) before its fp32 row.
NormKernel rmsnorm_native_kernel() {
  NormKernel k;
  k.one_plus_rounds_once = true;
  k.residual = ResidualPath::kFp32;
  k.one_plus_residual = ResidualPath::kRounded;
  k.one_plus_f16_residual_fp32 = true;
  k.name_for_reasons = "RMSNorm.forward_native";
  return k;
}

TwinInfo rmsnorm_native_info() {
  TwinInfo i;
  i.name = "cpu.rmsnorm.native";
  i.description =
      "vLLM RMSNorm.forward_native: fp32 variance, act(x*s) then *w in act dtype; residual added in fp32 "
      "(Gemma (1 + w): residual added in act, whole row fp32, one rounding)";
  // The index holds this file at 00cba797 only (an older tree: the pin's forward_native goes through vLLM IR
  // ops, vllm/ir/ops/layernorm.py, whose rms_norm rounds the same way for act weights).
  i.provenance =
      "vllm-project/vllm@00cba797bda48c0413ff05ab3c699335a745d734 vllm/model_executor/layers/layernorm.py "
      "(RMSNorm.forward_native, GemmaRMSNorm.forward_static)";
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
  i.provenance = std::string(kTwoCastText) +
                 " csrc/libtorch_stable/layernorm_kernels.cu (rms_norm_kernel, rms_norm): two casts (up to "
                 "v0.19.x, and from PR #42379 until 225936a); " +
                 kHelpersRead;
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
      "vLLM csrc rms_norm in its one-cast windows (PR #40860..#42379, around v0.20, and again from 225936a): "
      "act(x*s*w), w in fp32";
  i.provenance = std::string(kOneCastText) +
                 " csrc/libtorch_stable/layernorm_kernels.cu (rms_norm_kernel, rms_norm): one cast (PR "
                 "#40860..#42379 and from 225936a, vllm#49616); " +
                 kHelpersRead;
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
  i.provenance =
      std::string(kTwoCastText) +
      " csrc/libtorch_stable/layernorm_kernels.cu (fused_add_rms_norm_kernel, fused_add_rms_norm): "
      "two casts (up to v0.19.x, and from PR #42379 until 225936a); " +
      kHelpersRead;
  i.numerics.batch_invariant = false;  // the block size follows the token count (vllm#48271)
  // z, z * s and the weight product are each rounded on the way to y.
  i.numerics.output_roundings = 3;
  i.numerics.reduction = csrc_reduction();
  i.supports_summary =
      std::string(kRmsNormSupports) + " of x; contiguous residual; residual required; plain weight only";
  return i;
}

// fused_add_rms_norm in the one-cast windows: z = act(x + r) as before, then act(z * s * w) with w in fp32
// (`Converter::convert(x * s_variance * wf)` on the 16-byte path, `(scalar_t)(x * s_variance * w)` on the
// scalar one).
NormKernel rmsnorm_fused_add_onecast_kernel() {
  NormKernel k = rmsnorm_fused_add_kernel();
  k.rounding = NormRounding::kFp32Weight;
  return k;
}

TwinInfo rmsnorm_fused_add_onecast_info() {
  TwinInfo i = rmsnorm_fused_add_info();
  i.name = "cpu.rmsnorm.fused_add_onecast";
  i.description =
      "vLLM csrc fused_add_rms_norm in its one-cast windows (PR #40860..#42379 and from 225936a): z = "
      "act(x+r), residual <- z, act(z*s*w) with w in fp32";
  i.provenance =
      std::string(kOneCastText) +
      " csrc/libtorch_stable/layernorm_kernels.cu (fused_add_rms_norm_kernel, fused_add_rms_norm): "
      "one cast (PR #40860..#42379 and from 225936a, vllm#49616); " +
      kHelpersRead;
  i.numerics.output_roundings = 2;  // z, then the one cast
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
std::unique_ptr<Backend> make_cpu_rmsnorm_fused_add_onecast() {
  return make_rmsnorm_backend(rmsnorm_fused_add_onecast_info(), rmsnorm_fused_add_onecast_kernel());
}

}  // namespace driftcheck::twin
