#include "driftcheck/device/device_reference.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "driftcheck/device/gpu.hpp"

namespace driftcheck {
namespace {

enum class ReferenceDevice { kAuto, kCpu, kGpu };

struct ReferenceSettings {
  ReferenceDevice device = ReferenceDevice::kAuto;
  // The auto rule's threshold in multiply-adds (docs/REFERENCE.md "When"): below about a million the CPU's
  // Eigen GEMMs take under a millisecond, about what an upload, two launches and a download cost.
  std::int64_t gpu_work = std::int64_t{1} << 20;
  std::string problem;  // a malformed variable: the defaults stand, and commands refuse to start
};

// Read once, from the process's environment.
const ReferenceSettings& settings() {
  static const ReferenceSettings s = [] {
    ReferenceSettings r;
    if (const char* env = std::getenv("DRIFTCHECK_REFERENCE"); env != nullptr && *env != '\0') {
      const std::string_view v = env;
      if (v == "cpu")
        r.device = ReferenceDevice::kCpu;
      else if (v == "gpu")
        r.device = ReferenceDevice::kGpu;
      else if (v != "auto")
        r.problem = fmt::format("DRIFTCHECK_REFERENCE={} is not one of cpu, gpu, auto", v);
    }
    if (const char* env = std::getenv("DRIFTCHECK_REFERENCE_GPU_WORK"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const long long v = std::strtoll(env, &end, 10);
      if (*end != '\0' || v <= 0)
        r.problem = fmt::format("DRIFTCHECK_REFERENCE_GPU_WORK={} is not a positive integer", env);
      else
        r.gpu_work = static_cast<std::int64_t>(v);
    }
    return r;
  }();
  return s;
}

}  // namespace

std::string reference_environment_problem() {
  return settings().problem;
}

Outputs device_reference(const Case& c) {
#if DRIFTCHECK_HAVE_GPU
  // A device error falls back to the CPU: the reference must be computed either way, and the GPU backends of
  // the same campaign report the device's failure as their verdicts.
  const ReferenceSettings& s = settings();
  if (s.device != ReferenceDevice::kCpu) try {
      const std::int64_t min_work = s.device == ReferenceDevice::kGpu ? 0 : s.gpu_work;
      if (auto out = gpu_reference_if_worth_it(c, min_work)) return std::move(*out);
    } catch (const BackendError&) {
    }
#endif
  return reference(c);
}

}  // namespace driftcheck
