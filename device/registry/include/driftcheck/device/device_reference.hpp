// The fp64 reference on the fastest device that computes it (docs/REFERENCE.md, "The attention reference on a
// GPU"): attention cases large enough for a GPU to pay are computed there when the build has GPU support and
// a GPU is present; everything else, and every case the GPU declines (non-finite values where the reference
// reads, head_dim beyond its kernel, a device error), by reference() on the CPU. Both compute the same
// definition; docs/REFERENCE.md bounds their difference. DRIFTCHECK_REFERENCE=cpu forces the CPU, =gpu the
// GPU for every attention case it accepts (tests), =auto (default) the rule above.
#pragma once

#include "driftcheck/reference/reference.hpp"

namespace driftcheck {

Outputs device_reference(const Case& c);

}  // namespace driftcheck
