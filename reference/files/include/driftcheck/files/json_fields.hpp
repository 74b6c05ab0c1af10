// Typed reads of the fields of a JSON object from a file driftcheck reads (journal records, case.json,
// finding.json, exchange manifests, gate baselines, golden metadata, drift statistics): a missing field, a
// wrong type or a value out of range throws FieldError naming the field ("field 'stats.backends.cpu.x.run':
// expected an integer, got string"); the file's reader turns it into its own error naming the file (and
// line), exit 2. Every reader goes through these, never through json::get<T>, json::value or an implicit
// conversion: those throw nlohmann's type_error on a wrong type, and a float converted to an integer type is
// undefined behaviour when out of range (4.4e68 read as a count). With duplicate keys nlohmann keeps the last
// value, which is then checked like any other. Numbers accept the non-finite strings of
// reports/json_text.hpp.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace driftcheck::files {

class FieldError : public std::runtime_error {
 public:
  FieldError(std::string field, std::string_view why);
  const std::string& field() const { return field_; }
  // The same error for the field seen from its enclosing object `outer` ("stats" + "checks" =
  // "stats.checks").
  FieldError within(std::string_view outer) const;

 private:
  std::string field_, why_;
};

const nlohmann::json& json_field(const nlohmann::json& obj, std::string_view key);  // obj must be an object
const nlohmann::json& object_field(const nlohmann::json& obj, std::string_view key);
const nlohmann::json& array_field(const nlohmann::json& obj, std::string_view key);
std::string string_field(const nlohmann::json& obj, std::string_view key);
std::vector<std::string> strings_field(const nlohmann::json& obj,
                                       std::string_view key);  // an array of strings
bool bool_field(const nlohmann::json& obj, std::string_view key);
std::int64_t int_field(const nlohmann::json& obj, std::string_view key,
                       std::int64_t min = std::numeric_limits<std::int64_t>::min());
std::uint64_t u64_field(const nlohmann::json& obj, std::string_view key);
int exit_code_field(const nlohmann::json& obj, std::string_view key);  // 0-3 (docs/CAMPAIGN.md)
double number_field(const nlohmann::json& obj, std::string_view key);

// The value `v` itself (an array element), with `name` for the message.
std::int64_t int_value(const nlohmann::json& v, std::string_view name,
                       std::int64_t min = std::numeric_limits<std::int64_t>::min());
double number_value(const nlohmann::json& v, std::string_view name);
std::string string_value(const nlohmann::json& v, std::string_view name);

// What is wrong with the "format" and "format_version" of a driftcheck file ("format is not X", "format
// version 2 (this driftcheck reads 1)"), or "" when both are right. Reads them only where they have the right
// type.
std::string format_problem(const nlohmann::json& obj, std::string_view format, std::int64_t version);

// Runs `read` and names `outer` in any FieldError it throws.
template <class F>
auto within_field(std::string_view outer, F&& read) {
  try {
    return read();
  } catch (const FieldError& e) {
    throw e.within(outer);
  }
}

// The array `key` of `obj`, each element read by `each`; an error names the element ("rows[3].cases").
template <class F>
auto list_field(const nlohmann::json& obj, std::string_view key, F&& each) {
  std::vector<std::decay_t<decltype(each(obj))>> out;
  const nlohmann::json& list = array_field(obj, key);
  for (std::size_t i = 0; i < list.size(); ++i)
    out.push_back(
        within_field(std::string(key) + "[" + std::to_string(i) + "]", [&] { return each(list[i]); }));
  return out;
}

}  // namespace driftcheck::files
