// GPU backends (HIP kernels). Built when the build found nvcc or hipcc (DRIFTCHECK_HAVE_GPU); each reports
// itself unavailable, with the reason, on a machine without a GPU.
#pragma once

#include "driftcheck/device/backend.hpp"

namespace driftcheck {

#if DRIFTCHECK_HAVE_GPU
void register_gpu_backends(Registry& r);
#endif

}  // namespace driftcheck
