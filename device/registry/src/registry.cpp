// The process-wide registry: every backend this build has (CPU twins and mutants from dc_device, GPU kernels
// from dc_gpu when the build found a GPU toolchain), registered in one place.
#include "driftcheck/device/registry.hpp"

#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/builtin.hpp"
#include "driftcheck/device/gpu.hpp"

namespace driftcheck {
namespace {

// One line per backend. A new backend: its own file with a factory, declared in builtin.hpp, one line here.
Registry build_registry() {
  using namespace twin;
  Registry r;
  // CPU twins (docs/BACKENDS.md).
  r.add(make_cpu_rmsnorm_native());
  r.add(make_cpu_rmsnorm_cuda());
  r.add(make_cpu_rmsnorm_cuda_onecast());
  r.add(make_cpu_rmsnorm_fused_add());
  r.add(make_cpu_rmsnorm_fused_add_onecast());
  r.add(make_cpu_dual_fused());
  r.add(make_cpu_dual_unfused());
  r.add(make_cpu_concat_copy());
  r.add(make_cpu_attn_triton_unified());
  r.add(make_cpu_attn_aiter_unified_mi300x());
  r.add(make_cpu_attn_aiter_unified_mi355x());
  r.add(make_cpu_attn_rocm_custom());
  r.add(make_cpu_attn_aiter_fa());
  // GPU backends: HIP kernels, when the build found a GPU toolchain.
#if DRIFTCHECK_HAVE_GPU
  register_gpu_backends(r);
#endif
  // Mutants: one deliberate bug each, to prove the harness catches its class.
  r.add(make_mutant_rmsnorm_stride_ignored());
  r.add(make_mutant_rmsnorm_residual_reread());
  r.add(make_mutant_rmsnorm_eps_outside_rsqrt());
  r.add(make_mutant_rmsnorm_act_accumulation());
  r.add(make_mutant_rmsnorm_batch_variant_block());
  r.add(make_mutant_rmsnorm_oob_write());
  r.add(make_mutant_dual_weight_rounded_early());
  r.add(make_mutant_dual_halves_swapped());
  r.add(make_mutant_concat_halves_swapped());
  r.add(make_mutant_rmsnorm_squares_in_act());
  r.add(make_mutant_rmsnorm_output_toward_zero());
  r.add(make_mutant_rmsnorm_one_plus_weight_rounded());
  r.add(make_mutant_rmsnorm_fast_rsqrt());
  r.add(make_mutant_rmsnorm_mean_square_rounded());
  r.add(make_mutant_rmsnorm_eps_fixed());
  r.add(make_mutant_attn_masked_p_times_v());
  r.add(make_mutant_attn_page_conversion());
  r.add(make_mutant_attn_fp8_fn_fnuz_swapped());
  r.add(make_mutant_attn_no_max_subtraction());
  r.add(make_mutant_attn_unscaled_split_merge());
  r.add(make_mutant_attn_gqa_modulo());
  r.add(make_mutant_attn_causal_off_by_one());
  r.add(make_mutant_attn_window_off_by_one());
  r.add(make_mutant_attn_softcap_missing());
  r.add(make_mutant_attn_sink_dropped());
  r.add(make_mutant_attn_table_stride_ignored());
  r.add(make_mutant_attn_logits_rounded());
  r.add(make_mutant_attn_extend_new_kv_from_cache());
#if DRIFTCHECK_HAVE_GPU
  register_gpu_mutants(r);
#endif
  return r;
}

}  // namespace

Registry& extend_registry() {
  static Registry r = build_registry();
  return r;
}

const Registry& registry() {
  return extend_registry();
}

}  // namespace driftcheck
