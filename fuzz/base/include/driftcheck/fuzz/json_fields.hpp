// The checked JSON accessors (reports/json_fields.hpp) under the names the campaign's readers use.
#pragma once

#include "driftcheck/files/json_fields.hpp"

namespace driftcheck::fuzz {

using files::array_field;
using files::bool_field;
using files::exit_code_field;
using files::FieldError;
using files::format_problem;
using files::int_field;
using files::int_value;
using files::json_field;
using files::number_field;
using files::number_value;
using files::object_field;
using files::string_field;
using files::string_value;
using files::strings_field;
using files::u64_field;
using files::within_field;

}  // namespace driftcheck::fuzz
