// Private: one factory per built-in backend. Adding a backend: write its file (a factory returning the
// Backend), declare the factory here and add one line to registry() in registry.cpp.
#pragma once

#include <memory>

#include "driftcheck/device/backend.hpp"

namespace driftcheck::twin {

// CPU twins.
std::unique_ptr<Backend> make_cpu_rmsnorm_native();
std::unique_ptr<Backend> make_cpu_rmsnorm_cuda();
std::unique_ptr<Backend> make_cpu_rmsnorm_cuda_onecast();
std::unique_ptr<Backend> make_cpu_rmsnorm_fused_add();
std::unique_ptr<Backend> make_cpu_rmsnorm_fused_add_onecast();
std::unique_ptr<Backend> make_cpu_dual_fused();
std::unique_ptr<Backend> make_cpu_dual_unfused();
std::unique_ptr<Backend> make_cpu_concat_copy();
std::unique_ptr<Backend> make_cpu_attn_triton_unified();
std::unique_ptr<Backend> make_cpu_attn_aiter_unified_mi300x();
std::unique_ptr<Backend> make_cpu_attn_aiter_unified_mi355x();
std::unique_ptr<Backend> make_cpu_attn_rocm_custom();
std::unique_ptr<Backend> make_cpu_attn_aiter_fa();

// Mutants of the norm family (mutants_norm.cpp).
std::unique_ptr<Backend> make_mutant_rmsnorm_stride_ignored();
std::unique_ptr<Backend> make_mutant_rmsnorm_residual_reread();
std::unique_ptr<Backend> make_mutant_rmsnorm_eps_outside_rsqrt();
std::unique_ptr<Backend> make_mutant_rmsnorm_act_accumulation();
std::unique_ptr<Backend> make_mutant_rmsnorm_batch_variant_block();
std::unique_ptr<Backend> make_mutant_rmsnorm_oob_write();
std::unique_ptr<Backend> make_mutant_dual_weight_rounded_early();
std::unique_ptr<Backend> make_mutant_dual_halves_swapped();
std::unique_ptr<Backend> make_mutant_concat_halves_swapped();
std::unique_ptr<Backend> make_mutant_rmsnorm_squares_in_act();
std::unique_ptr<Backend> make_mutant_rmsnorm_output_toward_zero();
std::unique_ptr<Backend> make_mutant_rmsnorm_one_plus_weight_rounded();
std::unique_ptr<Backend> make_mutant_rmsnorm_fast_rsqrt();
std::unique_ptr<Backend> make_mutant_rmsnorm_mean_square_rounded();
std::unique_ptr<Backend> make_mutant_rmsnorm_eps_fixed();

// Mutants of attention (mutants_attention.cpp).
std::unique_ptr<Backend> make_mutant_attn_masked_p_times_v();
std::unique_ptr<Backend> make_mutant_attn_page_conversion();
std::unique_ptr<Backend> make_mutant_attn_fp8_fn_fnuz_swapped();
std::unique_ptr<Backend> make_mutant_attn_no_max_subtraction();
std::unique_ptr<Backend> make_mutant_attn_unscaled_split_merge();
std::unique_ptr<Backend> make_mutant_attn_gqa_modulo();
std::unique_ptr<Backend> make_mutant_attn_causal_off_by_one();
std::unique_ptr<Backend> make_mutant_attn_window_off_by_one();
std::unique_ptr<Backend> make_mutant_attn_softcap_missing();
std::unique_ptr<Backend> make_mutant_attn_sink_dropped();
std::unique_ptr<Backend> make_mutant_attn_table_stride_ignored();
std::unique_ptr<Backend> make_mutant_attn_logits_rounded();
std::unique_ptr<Backend> make_mutant_attn_extend_new_kv_from_cache();

}  // namespace driftcheck::twin
