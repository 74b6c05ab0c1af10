// Mutants of the norm family: each is its twin's kernel with one NormBug (or one kernel field) changed.
#include "builtin.hpp"
#include "twin_norm.hpp"

namespace driftcheck::twin {

std::unique_ptr<Backend> make_mutant_rmsnorm_stride_ignored() {
  return make_rmsnorm_backend(
      mutant_info(rmsnorm_cuda_info(), "mutant.rmsnorm.stride_ignored",
                  "rms_norm reading row r at r * H, as if rows were packed (wrong only when row stride > H)",
                  "vllm#24247 no stride checks: silent corruption on strided views (fixed by #28103)"),
      rmsnorm_cuda_kernel(), NormBug::kRowStrideIgnored);
}

std::unique_ptr<Backend> make_mutant_rmsnorm_residual_reread() {
  return make_rmsnorm_backend(
      mutant_info(
          rmsnorm_fused_add_info(), "mutant.rmsnorm.residual_reread",
          "fused_add_rms_norm whose second pass re-adds the residual after overwriting it with x + r",
          "in-place residual read-after-write hazard (residual mishandling class of PR #14464, #11672)"),
      rmsnorm_fused_add_kernel(), NormBug::kResidualReread);
}

std::unique_ptr<Backend> make_mutant_rmsnorm_eps_outside_rsqrt() {
  return make_rmsnorm_backend(
      mutant_info(rmsnorm_cuda_info(), "mutant.rmsnorm.eps_outside_rsqrt",
                  "rms_norm computing rsqrt(mean(x^2)) + eps: wrong when mean(x^2) is near eps or 0",
                  "eps misplaced outside the rsqrt (DOMAIN.md section 2 formula); blows up on tiny rows"),
      rmsnorm_cuda_kernel(), NormBug::kEpsOutsideRsqrt);
}

std::unique_ptr<Backend> make_mutant_rmsnorm_act_accumulation() {
  return make_rmsnorm_backend(
      mutant_info(
          rmsnorm_cuda_info(), "mutant.rmsnorm.act_accumulation",
          "rms_norm accumulating the sum of squares in the activation dtype (bf16/fp16), not fp32",
          "reduction below fp32 (DOMAIN.md section 2: reductions in fp32); the sum stagnates for wide rows"),
      rmsnorm_cuda_kernel(), NormBug::kActAccumulation);
}

std::unique_ptr<Backend> make_mutant_rmsnorm_batch_variant_block() {
  return make_rmsnorm_backend(
      mutant_info(rmsnorm_cuda_info(), "mutant.rmsnorm.batch_variant_block",
                  "rms_norm whose reduction block shrinks from 1024 to 256 threads for batches of 2+ tokens",
                  "vllm#48271 reduction block size depended on the token count: not batch invariant"),
      rmsnorm_cuda_kernel(), NormBug::kBatchVariantBlock);
}

std::unique_ptr<Backend> make_mutant_rmsnorm_oob_write() {
  return make_rmsnorm_backend(
      mutant_info(
          rmsnorm_cuda_info(), "mutant.rmsnorm.oob_write",
          "rms_norm whose vector tail writes one element past the end of each output row",
          "out-of-bounds write (vllm#24247 illegal accesses; caught by guard bands as in ggml's tests)"),
      rmsnorm_cuda_kernel(), NormBug::kOobWrite);
}

// The same kernel with the rounding point of the unfused path: act(x * s) before the fp32 weight multiply.
std::unique_ptr<Backend> make_mutant_dual_weight_rounded_early() {
  NormKernel k = dual_fused_kernel();
  k.rounding = NormRounding::kTwoRoundings;
  return make_dual_backend(
      mutant_info(
          dual_fused_info(), "mutant.dual.weight_rounded_early",
          "fused dual norm rounding x*s to the act dtype before the weight: two roundings, one declared",
          "weight rounding point moved (vllm#42325 / PR #42379; fusion rounding points pytorch#177163)"),
      k);
}

std::unique_ptr<Backend> make_mutant_dual_halves_swapped() {
  return make_dual_backend(
      mutant_info(
          dual_fused_info(), "mutant.dual.halves_swapped",
          "fused dual norm writing norm(h) into the first half and norm(e) into the second",
          "concat order of [input_layernorm(embeds), hidden_norm(hidden)] swapped (DOMAIN.md section 1)"),
      dual_fused_kernel(), NormBug::kHalvesSwapped);
}

std::unique_ptr<Backend> make_mutant_concat_halves_swapped() {
  return make_concat_backend(
      mutant_info(concat_copy_info(), "mutant.concat.halves_swapped", "concat writing b before a",
                  "concat operand order swapped (structurally wrong drafter input, DOMAIN.md "
                  "section 1)"),
      NormBug::kHalvesSwapped);
}

}  // namespace driftcheck::twin
