// The fp64 reference of every op: inputs are read exactly from their stored formats and all arithmetic is in
// double (Eigen for the matrix products). Outputs are fp64 tensors named like the case's outputs, with the
// logical shapes, contiguous. The reference validates the case first (see validate()).
#pragma once

#include <map>
#include <string>

#include "driftcheck/reference/case.hpp"

namespace driftcheck {

using Outputs = std::map<std::string, Tensor, std::less<>>;

Outputs reference(const Case& c);

Outputs reference_rmsnorm(const Case& c);
Outputs reference_concat(const Case& c);
Outputs reference_dual_rmsnorm_cat(const Case& c);
// `source`: where the new tokens' K/V come from (case.hpp); NewKv::kInputs needs k_new / v_new in the case.
Outputs reference_attention(const Case& c, NewKv source = NewKv::kCache);

}  // namespace driftcheck
