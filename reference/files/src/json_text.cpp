#include "driftcheck/files/json_text.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace driftcheck::files {

nlohmann::json number_json(double v) {
  if (std::isnan(v)) return "nan";  // one spelling whatever the sign bit
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<double> read_number_json(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  // Files written before this encoding hold null for an infinity or a NaN: which one is lost, so NaN.
  if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!j.is_string()) return std::nullopt;
  const auto& s = j.get_ref<const std::string&>();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (s == "inf") return kInf;
  if (s == "-inf") return -kInf;
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

double number_from_json(const nlohmann::json& j) {
  if (const auto v = read_number_json(j)) return *v;
  throw std::invalid_argument("'" + (j.is_string() ? j.get<std::string>() : j.dump()) + "' is not a number");
}

}  // namespace driftcheck::files
