// The fp64 reference on the fastest device that computes it (docs/REFERENCE.md, "The attention reference on a
// GPU"): attention cases large enough for a GPU to pay are computed there when the build has GPU support and
// a GPU is present; everything else, and every case the GPU declines (non-finite values where the reference
// reads, head_dim beyond its kernel, a device error), by reference() on the CPU. Both compute the same
// definition; docs/REFERENCE.md bounds their difference. DRIFTCHECK_REFERENCE=cpu forces the CPU, =gpu the
// GPU for every attention case it accepts (tests), =auto (default) the rule above, whose threshold
// DRIFTCHECK_REFERENCE_GPU_WORK (multiply-adds) sets.
#pragma once

#include <string>

#include "driftcheck/reference/reference.hpp"

namespace driftcheck {

Outputs device_reference(const Case& c);

// What is wrong with DRIFTCHECK_REFERENCE or DRIFTCHECK_REFERENCE_GPU_WORK ("" when both are unset or valid),
// for commands to refuse at their start (a malformed value would otherwise be read as the default).
std::string reference_environment_problem();

}  // namespace driftcheck
