// Case features: the named properties of a CaseSpec that select kernel paths and bug classes ("GQA", "fp8
// e4m3fn KV", "seq_len % block_size != 0", "row stride != H"). A finding group is one backend, one verdict
// and the features of its shrunk case that the failure needs: each feature is a pure function of the spec,
// and most have an edit that removes it (GQA -> as many query heads as KV heads), so that ablation can check
// that the failure needs it (docs/CAMPAIGN.md "Finding groups").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {

// The features the spec has, in a fixed order (the order of the feature table in features.cpp).
std::vector<std::string> case_features(const CaseSpec& s);

// The spec with one feature removed and everything else kept, or nullopt when the feature has no removing
// edit or the spec does not have it. The result is a valid spec (materialize() accepts it).
std::optional<CaseSpec> without_feature(const CaseSpec& s, std::string_view feature);

// `names` without the features a more specific one of them implies ("H > 256" beside "H > 2048"): a cause
// in its own words. Membership tests keep the full list (a case with H > 2048 has H > 256 too).
std::vector<std::string> without_implied(std::vector<std::string> names);
// Whether every feature of `needed` is in `have` (both as case_features returns them).
bool has_all(const std::vector<std::string>& have, const std::vector<std::string>& needed);
// Whether any feature of `these` is in `have`.
bool has_any(const std::vector<std::string>& have, const std::vector<std::string>& these);

// Where a case sits along the shape parameters that drive error, for the statistics a report plots against
// them: row ops by hidden size; attention by its longest context, block size, head size and how full the
// longest sequence's last page is (a context that ends one token into a page is where page bugs live).
// `order` sorts a parameter's buckets.
struct ShapeKey {
  std::string param;
  std::string bucket;
  double order = 0;
};
std::vector<ShapeKey> shape_buckets(const CaseSpec& s);

}  // namespace driftcheck::fuzz
