// The checked JSON accessors (reports/json_fields.hpp) under the names the campaign's readers use.
#pragma once

#include "driftcheck/reports/json_fields.hpp"

namespace driftcheck::fuzz {

using reports::array_field;
using reports::bool_field;
using reports::exit_code_field;
using reports::FieldError;
using reports::format_problem;
using reports::int_field;
using reports::int_value;
using reports::json_field;
using reports::number_field;
using reports::number_value;
using reports::object_field;
using reports::string_field;
using reports::string_value;
using reports::strings_field;
using reports::u64_field;
using reports::within_field;

}  // namespace driftcheck::fuzz
