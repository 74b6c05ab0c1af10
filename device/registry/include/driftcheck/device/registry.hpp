// The built-in backends of this build (dc_registry, above dc_device and dc_gpu): the one place that knows
// every CPU twin, mutant and GPU kernel.
#pragma once

#include "driftcheck/device/backend.hpp"

namespace driftcheck {

// The process-wide registry with every built-in backend registered (CPU twins, mutants, and GPU backends when
// the build has them), plus what start-up added through extend_registry().
const Registry& registry();
// The process-wide registry for start-up only: the command line adds external backends (--backends files) and
// swaps in isolated ones (--isolate) here, before any campaign, replay or thread reads registry().
Registry& extend_registry();

}  // namespace driftcheck
