// The process-wide registry: every backend this build has (CPU twins and mutants from dc_device, GPU kernels
// from dc_gpu when the build found a GPU toolchain), registered in one place.
#include "driftcheck/device/registry.hpp"

#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/builtin.hpp"
#include "driftcheck/device/gpu.hpp"

namespace driftcheck {
namespace {

// The CPU twins (docs/BACKENDS.md), in the order `list` shows them: a new twin is its file (a factory,
// declared in builtin.hpp) and a row here.
using TwinFactory = std::unique_ptr<Backend> (*)();
constexpr TwinFactory kCpuTwins[] = {
    twin::make_cpu_rmsnorm_native,
    twin::make_cpu_rmsnorm_cuda,
    twin::make_cpu_rmsnorm_cuda_onecast,
    twin::make_cpu_rmsnorm_fused_add,
    twin::make_cpu_rmsnorm_fused_add_onecast,
    twin::make_cpu_dual_fused,
    twin::make_cpu_dual_unfused,
    twin::make_cpu_concat_copy,
    twin::make_cpu_attn_triton_unified,
    twin::make_cpu_attn_aiter_unified_mi300x,
    twin::make_cpu_attn_aiter_unified_mi355x,
    twin::make_cpu_attn_rocm_custom,
    twin::make_cpu_attn_aiter_fa,
};

// Twins, then the GPU kernels (when the build found a GPU toolchain), then the mutants of each, each family
// from its table.
Registry build_registry() {
  using namespace twin;
  Registry r;
  for (const TwinFactory make : kCpuTwins) r.add(make());
    // GPU backends: HIP kernels, when the build found a GPU toolchain.
#if DRIFTCHECK_HAVE_GPU
  register_gpu_backends(r);
#endif
  // Mutants: one deliberate bug each, to prove the harness catches its class.
  register_norm_mutants(r);
  register_attention_mutants(r);
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
