// The fp64 reference of every op: inputs are read exactly from their stored formats and all arithmetic is in
// double (Eigen for the matrix products). Outputs are fp64 tensors named like the case's outputs, with the
// logical shapes, contiguous. The reference validates the case first (see validate()).
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "driftcheck/reference/case.hpp"

namespace driftcheck {

using Outputs = std::map<std::string, Tensor, std::less<>>;

// The cache sizes Eigen's matrix-product blocking is pinned to (set once at start-up, reference.cpp): the
// blocking sets the order of the reference's sums, so a pinned one gives the same bits on every CPU.
inline constexpr std::ptrdiff_t kReferenceL1Bytes = 48 * 1024;
inline constexpr std::ptrdiff_t kReferenceL2Bytes = 2 * 1024 * 1024;
inline constexpr std::ptrdiff_t kReferenceL3Bytes = 32 * 1024 * 1024;

Outputs reference(const Case& c);

Outputs reference_rmsnorm(const Case& c);
Outputs reference_concat(const Case& c);
Outputs reference_dual_rmsnorm_cat(const Case& c);
// `source`: where the new tokens' K/V come from (case.hpp); NewKv::kInputs needs k_new / v_new in the case.
Outputs reference_attention(const Case& c, NewKv source = NewKv::kCache);

}  // namespace driftcheck
