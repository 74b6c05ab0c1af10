// How every JSON file driftcheck writes is encoded (journal, case.json, finding.json, report.json, and the
// files of later commands):
// - JSON has no infinity or NaN, so a non-finite number is written as one of the strings "inf", "-inf" or
//   "nan" (an infinite error ratio, a NaN output's divergence); finite numbers are JSON numbers.
// - Text that is not valid UTF-8 (a backend's error message) is written with U+FFFD in its place, never
// fails.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace driftcheck::files {

// A number that may be infinite or NaN: a JSON number when finite, else "inf", "-inf" or "nan".
nlohmann::json number_json(double v);

// The text of `j` (`indent` < 0: one line), invalid UTF-8 replaced.
std::string json_text(const nlohmann::json& j, int indent = -1);

// The number `j` holds: a JSON number or one of "inf", "-inf", "nan" (null, which older files hold for either
// non-finite value, reads as nan); nullopt for anything else.
std::optional<double> read_number_json(const nlohmann::json& j);
// The same, throwing std::invalid_argument for anything else.
double number_from_json(const nlohmann::json& j);

}  // namespace driftcheck::files
