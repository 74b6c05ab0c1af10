// Hints for finding groups whose verdict and minimal features point at a common attention mistake
// (docs/CAMPAIGN.md "Finding groups"): NaN in the output where the group's cause includes a mask (causal rows
// of a prefill, a sliding window, the tail of a sequence's last page, pages no sequence owns) and a NaN or
// infinite key or value, or the NaN/inf poison driftcheck leaves in unused cache slots: a masked key's value
// reached P.V (P = 0 times inf is NaN) or its logit reached the softmax.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace driftcheck::fuzz {

// The hint for a group of `verdict` with `features` (features.hpp's names), or empty.
std::string group_hint(std::string_view verdict, const std::vector<std::string>& features);
// `detail` led by the group's hint ("hint; detail"), or `detail` when there is none.
std::string with_group_hint(std::string_view verdict, const std::vector<std::string>& features,
                            const std::string& detail);

}  // namespace driftcheck::fuzz
