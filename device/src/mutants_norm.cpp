// Mutants of the norm family: each is its twin's kernel with one NormBug (or one kernel field) changed.
#include "driftcheck/device/builtin.hpp"
#include "driftcheck/device/twin_norm.hpp"

namespace driftcheck::twin {

namespace {

enum class NormFamily : std::uint8_t { kRmsNorm, kDual, kConcat };

// One row per mutant, in the order `list` shows them: the family and twin it breaks (its identity and kernel;
// concat has no kernel), its name, what it does, the bug class it models, and the NormBug it switches on.
struct NormMutant {
  NormFamily family;
  TwinInfo (*twin)();
  NormKernel (*kernel)();
  const char* name;
  const char* description;
  const char* bug_class;
  NormBug bug;
};

NormKernel dual_weight_rounded_early_kernel() {
  NormKernel k = dual_fused_kernel();
  k.rounding = NormRounding::kTwoRoundings;
  return k;
}

const NormMutant kNormMutants[] = {
    {NormFamily::kRmsNorm, rmsnorm_cuda_info, rmsnorm_cuda_kernel, "mutant.rmsnorm.stride_ignored",
     "rms_norm reading row r at r * H, as if rows were packed (wrong only when row stride > H)",
     "vllm#24247 no stride checks: silent corruption on strided views (fixed by #28103)",
     NormBug::kRowStrideIgnored},
    {NormFamily::kRmsNorm, rmsnorm_fused_add_info, rmsnorm_fused_add_kernel, "mutant.rmsnorm.residual_reread",
     "fused_add_rms_norm whose second pass re-adds the residual after overwriting it with x + r",
     "in-place residual read-after-write hazard (residual mishandling class of PR #14464, #11672)",
     NormBug::kResidualReread},
    {NormFamily::kRmsNorm, rmsnorm_cuda_info, rmsnorm_cuda_kernel, "mutant.rmsnorm.eps_outside_rsqrt",
     "rms_norm computing rsqrt(mean(x^2)) + eps: wrong when mean(x^2) is near eps or 0",
     "eps misplaced outside the rsqrt (y = x * rsqrt(mean(x^2) + eps)); blows up on tiny rows",
     NormBug::kEpsOutsideRsqrt},
    {NormFamily::kRmsNorm, rmsnorm_cuda_info, rmsnorm_cuda_kernel, "mutant.rmsnorm.act_accumulation",
     "rms_norm accumulating the sum of squares in the activation dtype (bf16/fp16), not fp32",
     "reduction below fp32 (real kernels reduce in fp32); the sum stagnates for wide rows",
     NormBug::kActAccumulation},
    {NormFamily::kRmsNorm, rmsnorm_native_info, rmsnorm_native_kernel, "mutant.rmsnorm.batch_variant_block",
     "forward_native whose reduction becomes a 256-thread block reduce for batches of 2+ tokens",
     "vllm#48271 reduction block size depended on the token count: not batch invariant (the csrc "
     "kernels still do it from 256 tokens on and declare it; this mutant breaks a twin that "
     "declares batch invariance)",
     NormBug::kBatchVariantBlock},
    {NormFamily::kRmsNorm, rmsnorm_cuda_info, rmsnorm_cuda_kernel, "mutant.rmsnorm.oob_write",
     "rms_norm whose vector tail writes one element past the end of each output row",
     "out-of-bounds write (vllm#24247 illegal accesses; caught by guard bands as in ggml's tests)",
     NormBug::kOobWrite},
    // The same kernel with the rounding point of the unfused path: act(x * s) before the fp32 weight
    // multiply.
    {NormFamily::kDual, dual_fused_info, dual_weight_rounded_early_kernel, "mutant.dual.weight_rounded_early",
     "fused dual norm rounding x*s to the act dtype before the weight: two roundings, one declared",
     "weight rounding point moved (vllm#42325 / PR #42379; fusion rounding points pytorch#177163)",
     NormBug::kNone},
    {NormFamily::kDual, dual_fused_info, dual_fused_kernel, "mutant.dual.halves_swapped",
     "fused dual norm writing norm(h) into the first half and norm(e) into the second",
     "concat order of [input_layernorm(embeds), hidden_norm(hidden)] swapped", NormBug::kHalvesSwapped},
    {NormFamily::kConcat, concat_copy_info, nullptr, "mutant.concat.halves_swapped",
     "concat writing b before a", "concat operand order swapped (structurally wrong drafter input)",
     NormBug::kHalvesSwapped},
    // Precision lost below the worst-case bound (issue #12): each stays within gamma_H-based tolerances on
    // wide rows and is found by the statistical tier, which bounds the row scale's error over the declared
    // reduction.
    {NormFamily::kRmsNorm, rmsnorm_cuda_info, rmsnorm_cuda_kernel, "mutant.rmsnorm.squares_in_act",
     "rms_norm squaring in the activation dtype (packed __hmul2) before the fp32 accumulation",
     "a reduction partly carried in bf16/fp16: x.pow(2).mean() on a bf16 tensor rounds every "
     "square (the fp32 cast placed after the pow); the row scale drifts by ~u_a / sqrt(H)",
     NormBug::kSquaresInAct},
    {NormFamily::kRmsNorm, rmsnorm_cuda_info, rmsnorm_cuda_kernel, "mutant.rmsnorm.output_toward_zero",
     "rms_norm storing y rounded toward zero (truncated) instead of to nearest",
     "a rounding-mode change in the output conversion (__float2bfloat16_rz, a truncating pack): "
     "at most one ulp, always toward zero, a bias across cases",
     NormBug::kOutputTowardZero},
    {NormFamily::kRmsNorm, rmsnorm_native_info, rmsnorm_native_kernel,
     "mutant.rmsnorm.one_plus_weight_rounded",
     "forward_native with Gemma weights forming (1 + w) in the activation dtype before the multiply",
     "a weight rounded once more: (1 + w) computed in bf16 instead of 1 + w.float() (the Gemma "
     "RMSNorm rounding point; weight-precision class of vllm#42325)",
     NormBug::kOnePlusWeightRounded},
    {NormFamily::kRmsNorm, rmsnorm_cuda_info, rmsnorm_cuda_kernel, "mutant.rmsnorm.fast_rsqrt",
     "rms_norm with the bit-trick rsqrt and two Newton steps (up to 4.7e-6 low, 79 fp32 ulps)",
     "an rsqrt approximation a few dozen ulps off where the model allows 2 (CUDA rsqrtf); "
     "shifts every element of a row by the same relative error",
     NormBug::kFastRsqrt},
    // Bugs as a user's own kernel had them (issue #22): each is one cause, and a campaign must report it as
    // one group.
    {NormFamily::kRmsNorm, rmsnorm_native_info, rmsnorm_native_kernel, "mutant.rmsnorm.mean_square_rounded",
     "forward_native with mean(x^2) rounded once to the activation dtype before the rsqrt",
     "variance.to(x.dtype) before torch.rsqrt: one extra rounding of the row's mean square, so "
     "every element of the row shifts by the same relative error, up to u_a / 2",
     NormBug::kMeanSquareRounded},
    {NormFamily::kRmsNorm, rmsnorm_cuda_info, rmsnorm_cuda_kernel, "mutant.rmsnorm.eps_fixed",
     "rms_norm with eps hard-coded to 1e-5 whatever the layer's eps",
     "a kernel that ignores its eps argument (a constant from another model's config); wrong "
     "where mean(x^2) is small enough for eps to matter",
     NormBug::kEpsFixed},
};

}  // namespace

void register_norm_mutants(Registry& r) {
  for (const NormMutant& m : kNormMutants) {
    TwinInfo info = mutant_info(m.twin(), m.name, m.description, m.bug_class);
    switch (m.family) {
      case NormFamily::kRmsNorm:
        r.add(make_rmsnorm_backend(std::move(info), m.kernel(), m.bug));
        break;
      case NormFamily::kDual:
        r.add(make_dual_backend(std::move(info), m.kernel(), m.bug));
        break;
      case NormFamily::kConcat:
        r.add(make_concat_backend(std::move(info), m.bug));
        break;
    }
  }
}

}  // namespace driftcheck::twin
