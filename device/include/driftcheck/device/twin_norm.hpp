// Private: the RMSNorm family (rmsnorm, fused-add rmsnorm, fused dual rmsnorm + concat, concat) as
// parameterised CPU twins. A twin is a NormKernel (where it rounds, how it reduces); a mutant is the same
// kernel with one NormBug switched on, so a mutant is never a copy of its twin.
#pragma once

#include <memory>

#include "driftcheck/device/twin_common.hpp"

namespace driftcheck::twin {

// Where and how a norm kernel rounds (docs/BACKENDS.md "RMSNorm family").
enum class NormRounding : std::uint8_t {
  kTwoRoundings,  // act(act(x * s) * w): vLLM forward_native and the csrc rms_norm kernels
  kFp32Weight,  // act(x * s * w) with the weight multiplied in fp32: one rounding (fused dual kernel, Gemma)
};

// How the residual is added (fused-add variants only).
enum class ResidualPath : std::uint8_t {
  kNone,     // the kernel has no residual input (plain rms_norm)
  kFp32,     // forward_native: z = fp32(x) + fp32(r); residual <- act(z); variance from the UNROUNDED z
  kRounded,  // fused_add_rms_norm kernel: z = act(x + r); residual <- z; variance from the ROUNDED z
};

// Vector width of the partial sums (ReduceOrder::vec), decided per case as the kernels decide it.
enum class VecWidth : std::uint8_t {
  kFixed,             // ReduceOrder::vec as given
  kGcd16Bytes,        // rms_norm: gcd(16 bytes / element size, H)
  kIfAligned16Bytes,  // fused_add_rms_norm: 16 bytes when every pointer, H and the row strides allow it, else
                      // 1
};

// How many threads reduce a row.
enum class NormThreads : std::uint8_t {
  kFixed,         // ReduceOrder::threads, capped at H (Triton: 32 x num_warps lanes)
  kCsrcByTokens,  // csrc launchers: min(H or H / vec, 1024), 256 from 256 tokens on (vllm#48271)
  kTritonWarps,   // fused_dual_rmsnorm_cat: 8 / 4 / 2 warps for next_pow2(H) >= 4096 / >= 1024 / below
};

struct NormKernel {
  NormRounding rounding = NormRounding::kTwoRoundings;
  // Gemma (1 + w) weights multiply in fp32 with one final rounding in forward_native (GemmaRMSNorm computes
  // the whole row in fp32).
  bool one_plus_rounds_once = false;
  bool one_plus_supported = true;  // the csrc kernels and the fused dual kernel have no (1 + w) mode
  ReduceOrder order;               // how the sum of squares is reduced
  NormThreads threads = NormThreads::kFixed;
  bool threads_per_vector = false;  // rms_norm: min(H / vec, max_block_size) threads; fused_add: min(H, ...)
  VecWidth vec = VecWidth::kFixed;
  ResidualPath residual = ResidualPath::kNone;
  ResidualPath one_plus_residual = ResidualPath::kNone;  // GemmaRMSNorm: the add happens in the act dtype
  // GemmaRMSNorm.forward_static: `x.float() + residual.float() if orig_dtype == torch.float16 else x +
  // residual`: fp16 rows add in fp32 (the variance from the unrounded sum), bf16 rows in bf16.
  bool one_plus_f16_residual_fp32 = false;
  bool residual_required = false;    // fused_add_rms_norm has no plain mode
  bool output_contiguous = false;    // rms_norm: TORCH_CHECK(out.is_contiguous())
  bool residual_contiguous = false;  // fused_add_rms_norm: TORCH_CHECK(residual.is_contiguous())
  bool inputs_contiguous = false;    // fused_dual_rmsnorm_cat: "inputs must be contiguous"
  // rms_norm's output loop reads input rows and the weight, and writes output rows, as vec-element vectors
  // with no alignment check: on CUDA a row that is not vec * sizeof bytes aligned faults (misaligned
  // address).
  bool misaligned_vector_faults = false;
  std::string name_for_reasons;
};

// One deliberate deviation per mutant; the comments name the bug class (sources in docs/BACKENDS.md).
enum class NormBug : std::uint8_t {
  kNone,
  kRowStrideIgnored,  // rows read at r * H instead of r * row_stride (vllm#24247: no stride checks)
  kResidualReread,   // second pass re-adds the residual after it was overwritten with z (in-place RAW hazard)
  kEpsOutsideRsqrt,  // s = rsqrt(var) + eps instead of rsqrt(var + eps)
  kActAccumulation,  // sum of squares accumulated in the activation dtype instead of fp32
  kBatchVariantBlock,  // reduction block size chosen from the token count (vllm#48271)
  kHalvesSwapped,      // dual/concat: the two halves written in the wrong order
  kOobWrite,           // writes one element past the end of each output row
  // Precision lost below the worst-case bound (issue #12; found by the statistical tier):
  kSquaresInAct,  // x * x rounded to the activation dtype, then summed in fp32 (x.pow(2) on a bf16 tensor)
  kOnePlusWeightRounded,  // Gemma's (1 + w) formed in the activation dtype: the weight rounded once more
  kFastRsqrt,             // rsqrt from the 0x5f3759df guess and two Newton steps: up to 4.7e-6 (79 ulps) low
  kOutputTowardZero,      // y stored rounded toward zero instead of to nearest (a rounding-mode change)
  // Found as a user's own kernel would have them (issue #22: one cause must make one group):
  kMeanSquareRounded,  // mean(x^2) rounded once to the activation dtype before the rsqrt
  kEpsFixed,           // eps hard-coded to 1e-5 whatever the case's eps
};

// What a norm kernel decides per case (an rmsnorm or a dual_rmsnorm_cat case), shared by its twin and its GPU
// port (device/gpu/norm_plan.hpp), so that both decline, fault and sum alike:
// - norm_supports: the cases the modelled kernel accepts (dtypes, layouts, modes), with the twin's reasons;
// - norm_order: the reduction order (vector width from H and the layout, threads from H and the token count,
//   chunk ownership, trees) for warps of k.order.warp lanes, with `bug`'s change (kBatchVariantBlock);
// - check_norm_faults: throws BackendError where the modelled kernel faults (misaligned vector rows);
// - norm_defects / repair_norm_defects: the upstream defects k has on, and k with the named ones repaired
//   (false when none of them is on).
Support norm_supports(const NormKernel& k, const Case& c);
ReduceOrder norm_order(const NormKernel& k, NormBug bug, const Case& c);
void check_norm_faults(const NormKernel& k, const ReduceOrder& o, const Case& c);
Support concat_supports(const Case& c);  // the copy kernel's one rule, for cpu.concat.copy and its GPU port
std::vector<std::string> norm_defects(const NormKernel& k);
bool repair_norm_defects(NormKernel& k, const std::vector<std::string>& names);

std::unique_ptr<Backend> make_rmsnorm_backend(TwinInfo info, NormKernel kernel, NormBug bug = NormBug::kNone);
std::unique_ptr<Backend> make_dual_backend(TwinInfo info, NormKernel kernel, NormBug bug = NormBug::kNone);
std::unique_ptr<Backend> make_concat_backend(TwinInfo info, NormBug bug = NormBug::kNone);

// The kernels as the twins declare them, so mutants build on exactly the same parameters.
NormKernel rmsnorm_native_kernel();
NormKernel rmsnorm_cuda_kernel();
NormKernel rmsnorm_fused_add_kernel();
NormKernel rmsnorm_cuda_onecast_kernel();
NormKernel rmsnorm_fused_add_onecast_kernel();
NormKernel dual_fused_kernel();
TwinInfo rmsnorm_native_info();
TwinInfo rmsnorm_cuda_info();
TwinInfo rmsnorm_cuda_onecast_info();
TwinInfo rmsnorm_fused_add_info();
TwinInfo rmsnorm_fused_add_onecast_info();
TwinInfo dual_fused_info();
TwinInfo concat_copy_info();
ReductionShape csrc_reduction();

}  // namespace driftcheck::twin
