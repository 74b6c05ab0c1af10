// Hints for failures whose cause is a common mistake in how a kernel writes its outputs rather than its
// numerics (docs/ORACLE.md, "Hints"): an output never written, or written with values of another type. The
// oracle puts them at the front of the verdict's detail, for every backend (built-in, worker, plugin,
// exchange files); the verdict itself does not change.
#pragma once

#include <string>

#include "driftcheck/fuzz/oracle.hpp"

namespace driftcheck::fuzz {

// One hint per output view of `run` that
//  - holds, element for element, the bits it was handed over with (poison, or the input an in-place output
//    aliases), one of them finite at least (NaN and infinities a failing kernel may write itself): "output y
//    was never written (the kernel returned its result instead of writing into y?)";
//  - (a 1- or 2-byte format) reads, as float32 at each element's address counted in 4-byte units, within 1%
//    of the reference in nine elements of ten (of those whose float32 lies inside the storage, a quarter at
//    least): "y looks like float32 values written into a bf16 view (its storage used as a float buffer?)";
//  - (bf16 or fp8, which NumPy holds as raw uint16 / uint8 codes) holds codes equal to the reference's values
//    truncated to integers (modulo the code range, as NumPy's cast stores them) in nine elements of ten,
//    some of them non-zero and some reference values at least 1 in magnitude (below 1 the cast writes zeros,
//    as any kernel writing zeros would): "y looks like float values cast to integers in the raw bf16 view".
// Joined with "; ", empty when none applies. `handed` is the case as the backend received it, `reference`
// the reference outputs (logical shapes).
std::string output_hints(const Case& handed, const Case& run, const Outputs& reference);

}  // namespace driftcheck::fuzz
