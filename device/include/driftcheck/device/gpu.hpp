// GPU backends (HIP kernels). Built when the build found nvcc or hipcc (DRIFTCHECK_HAVE_GPU); each reports
// itself unavailable, with the reason, on a machine without a GPU.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck {

#if DRIFTCHECK_HAVE_GPU
// GPUs this process sees (after CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES); 0 when there is none or the
// runtime cannot start, with the reason in `why`.
int gpu_device_count(std::string* why = nullptr);
// Every later GPU run of this process (backends, the GPU fp64 reference, device plugins) goes to GPU
// `ordinal` (0 <= ordinal < gpu_device_count()), whichever thread makes it. Without a call: GPU 0.
void gpu_use_device(int ordinal);
void register_gpu_backends(Registry& r);
// The mutant.gpu.* backends: each gpu.* kernel with one deliberate bug (unavailable without a GPU, like
// their kernels).
void register_gpu_mutants(Registry& r);
// Lanes per warp of the calling thread's current device (32 on NVIDIA, 64 on AMD CDNA wavefronts): the
// norm kernels' reduction order depends on it (docs/gpu/README.md).
int gpu_warp_size();
// Runs `launch` on device copies of `storages`, each whole (packed into the calling thread's leased device
// slot, uploaded with one copy), with the device pointers (in the same order) and the slot's stream to launch
// on; then checks for a launch error, waits for the stream (a device error is a BackendError) and downloads
// every storage back. Runs on other threads proceed at the same time on their own streams. For plugins that
// want device memory (driftcheck/plugin.h).
void gpu_run_on_storages(const std::vector<Storage*>& storages,
                         const std::function<void(const std::vector<void*>& device, void* stream)>& launch);
// The fp64 attention reference computed on the GPU (validated first, like reference()); nullopt when the GPU
// declines the case (a NaN or infinity where the reference reads, head_dim beyond its kernel). Throws
// BackendError on a device error.
std::optional<Outputs> gpu_reference_attention(const Case& c);
// gpu_reference_attention for an attention case of at least `min_work` multiply-adds of q . k (over every
// visible (query, key) pair, per q head) when a GPU is present (device_reference.hpp's rule); else nullopt.
std::optional<Outputs> gpu_reference_if_worth_it(const Case& c, std::int64_t min_work);
#endif

}  // namespace driftcheck
