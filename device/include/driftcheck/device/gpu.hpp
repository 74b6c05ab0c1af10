// GPU backends (HIP kernels). Built when the build found nvcc or hipcc (DRIFTCHECK_HAVE_GPU); each reports
// itself unavailable, with the reason, on a machine without a GPU.
#pragma once

#include <functional>
#include <vector>

#include "driftcheck/device/backend.hpp"

namespace driftcheck {

#if DRIFTCHECK_HAVE_GPU
void register_gpu_backends(Registry& r);
// Runs `launch` on device copies of `storages`, each whole: allocated, uploaded, launched with the device
// pointers (in the same order) and the stream to launch on (the default stream, nullptr), synchronised,
// checked for a device error (BackendError), downloaded back. Serialised with the GPU backends' runs. For
// plugins that want device memory (driftcheck/plugin.h).
void gpu_run_on_storages(const std::vector<Storage*>& storages,
                         const std::function<void(const std::vector<void*>& device, void* stream)>& launch);
#endif

}  // namespace driftcheck
