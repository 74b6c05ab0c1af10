// Typed access to the keys of a protocol message, throwing ProtocolError that names the message and the key:
// a worker's malformed reply is a verdict with a readable detail, never a json exception from deep inside.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/external/protocol.hpp"

namespace driftcheck::external {

class Fields {
 public:
  Fields(const nlohmann::json& j, std::string_view what) : j_(j), what_(what) {
    if (!j.is_object()) fail("", "is not an object");
  }

  const nlohmann::json& at(std::string_view key) const {
    const auto it = j_.find(key);
    if (it == j_.end()) fail(key, "is missing");
    return *it;
  }
  bool has(std::string_view key) const { return j_.contains(key); }

  std::string string(std::string_view key) const {
    return typed<std::string>(key, at(key).is_string(), "a string");
  }
  bool boolean(std::string_view key) const { return typed<bool>(key, at(key).is_boolean(), "a bool"); }
  double number(std::string_view key) const { return typed<double>(key, at(key).is_number(), "a number"); }
  std::int64_t integer(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
      fail(key, "is not an integer");
    return v.get<std::int64_t>();
  }
  std::uint64_t unsigned_integer(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_number_unsigned()) fail(key, "is not a non-negative integer");
    return v.get<std::uint64_t>();
  }
  std::string string_or(std::string_view key, std::string fallback) const {
    return has(key) ? string(key) : fallback;
  }
  bool boolean_or(std::string_view key, bool fallback) const { return has(key) ? boolean(key) : fallback; }

  std::vector<std::string> strings(std::string_view key) const {
    std::vector<std::string> out;
    for (const auto& v : array(key)) {
      if (!v.is_string()) fail(key, "holds a non-string");
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  std::vector<std::uint64_t> sizes(std::string_view key) const {
    std::vector<std::uint64_t> out;
    for (const auto& v : array(key)) {
      if (!v.is_number_unsigned()) fail(key, "holds something other than a non-negative integer");
      out.push_back(v.get<std::uint64_t>());
    }
    return out;
  }
  std::vector<std::int64_t> integers(std::string_view key) const {
    std::vector<std::int64_t> out;
    for (const auto& v : array(key)) {
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
        fail(key, "holds a non-integer");
      out.push_back(v.get<std::int64_t>());
    }
    return out;
  }
  const nlohmann::json& array(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_array()) fail(key, "is not an array");
    return v;
  }
  const nlohmann::json& object(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_object()) fail(key, "is not an object");
    return v;
  }

  [[noreturn]] void fail(std::string_view key, std::string_view problem) const {
    throw ProtocolError(key.empty() ? fmt::format("{} {}", what_, problem)
                                    : fmt::format("{}: \"{}\" {}", what_, key, problem));
  }

 private:
  template <class T>
  T typed(std::string_view key, bool ok, std::string_view type) const {
    if (!ok) fail(key, fmt::format("is not {}", type));
    return at(key).get<T>();
  }

  const nlohmann::json& j_;
  std::string what_;
};

}  // namespace driftcheck::external
