// The built-in CPU backends dc_registry registers: one factory per twin (adding one: write its file, a
// factory returning the Backend, declare it here and add its line to the twins' table in device/registry/src/
// registry.cpp), and the mutants' registration from their tables.
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

// Mutants, one deliberate bug each, registered from one table per family (mutants_norm.cpp,
// mutants_attention.cpp): a new mutant is a row there.
void register_norm_mutants(Registry& r);
void register_attention_mutants(Registry& r);

}  // namespace driftcheck::twin
