#include "driftcheck/files/json_fields.hpp"

#include <fmt/format.h>

#include "driftcheck/files/json_text.hpp"

namespace driftcheck::files {

using nlohmann::json;

FieldError::FieldError(std::string field, std::string_view why)
    : std::runtime_error(fmt::format("field '{}': {}", field, why)), field_(std::move(field)), why_(why) {}

FieldError FieldError::within(std::string_view outer) const {
  return FieldError(fmt::format("{}.{}", outer, field_), why_);
}

namespace {

[[noreturn]] void bad(std::string_view name, const json& v, std::string_view expected) {
  throw FieldError(std::string(name), fmt::format("expected {}, got {}", expected, v.type_name()));
}

}  // namespace

const json& json_field(const json& obj, std::string_view key) {
  if (!obj.is_object()) throw FieldError(std::string(key), "the enclosing value is not a JSON object");
  const auto it = obj.find(key);
  if (it == obj.end()) throw FieldError(std::string(key), "missing");
  return *it;
}

const json& object_field(const json& obj, std::string_view key) {
  const json& v = json_field(obj, key);
  if (!v.is_object()) bad(key, v, "an object");
  return v;
}

const json& array_field(const json& obj, std::string_view key) {
  const json& v = json_field(obj, key);
  if (!v.is_array()) bad(key, v, "an array");
  return v;
}

std::string string_field(const json& obj, std::string_view key) {
  return string_value(json_field(obj, key), key);
}

std::vector<std::string> strings_field(const json& obj, std::string_view key) {
  std::vector<std::string> out;
  for (const auto& v : array_field(obj, key)) out.push_back(string_value(v, key));
  return out;
}

bool bool_field(const json& obj, std::string_view key) {
  const json& v = json_field(obj, key);
  if (!v.is_boolean()) bad(key, v, "true or false");
  return v.get<bool>();
}

std::int64_t int_field(const json& obj, std::string_view key, std::int64_t min) {
  return int_value(json_field(obj, key), key, min);
}

std::uint64_t u64_field(const json& obj, std::string_view key) {
  const json& v = json_field(obj, key);
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  bad(key, v, "a non-negative integer");
}

int exit_code_field(const json& obj, std::string_view key) {
  const auto code = int_field(obj, key, 0);
  if (code > 3) throw FieldError(std::string(key), fmt::format("{} is not an exit code (0-3)", code));
  return static_cast<int>(code);
}

double number_field(const json& obj, std::string_view key) {
  return number_value(json_field(obj, key), key);
}

std::int64_t int_value(const json& v, std::string_view name, std::int64_t min) {
  // An unsigned value above INT64_MAX is not an int64 (get<std::int64_t> would wrap it).
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
    bad(name, v, "an integer");
  const auto x = v.get<std::int64_t>();
  if (x < min) throw FieldError(std::string(name), fmt::format("{} is below the minimum {}", x, min));
  return x;
}

double number_value(const json& v, std::string_view name) {
  if (const auto x = read_number_json(v)) return *x;
  bad(name, v, "a number (or \"inf\", \"-inf\", \"nan\")");
}

std::string string_value(const json& v, std::string_view name) {
  if (!v.is_string()) bad(name, v, "a string");
  return v.get<std::string>();
}

std::string format_problem(const json& obj, std::string_view format, std::int64_t version) {
  const auto f = obj.find("format");
  if (f == obj.end() || !f->is_string() || f->get<std::string>() != format)
    return fmt::format("format is not {}", format);
  const auto v = obj.find("format_version");
  if (v == obj.end() || !v->is_number_integer() || *v != version)
    return fmt::format("format version {} (this driftcheck reads {})", v == obj.end() ? "missing" : v->dump(),
                       version);
  return "";
}

}  // namespace driftcheck::files
