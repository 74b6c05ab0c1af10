#include "driftcheck/device/device_reference.hpp"

#include "driftcheck/device/gpu.hpp"

namespace driftcheck {

Outputs device_reference(const Case& c) {
#if DRIFTCHECK_HAVE_GPU
  // A device error falls back to the CPU: the reference must be computed either way, and the GPU backends of
  // the same campaign report the device's failure as their verdicts.
  try {
    if (auto out = gpu_reference_if_worth_it(c)) return std::move(*out);
  } catch (const BackendError&) {
  }
#endif
  return reference(c);
}

}  // namespace driftcheck
