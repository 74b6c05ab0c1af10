// Bad input files (a gate config, a baseline, a corpus entry, a golden file): exit 2 with one line,
// "driftcheck: bad <kind>: <file>: <problem>".
#pragma once

#include <stdexcept>
#include <string>

#include "driftcheck/device/one_line.hpp"

namespace driftcheck::fuzz {

class InputError : public std::runtime_error {
 public:
  // `message` names the file first ("gate.toml:12: unknown key 'sed'"). It often quotes the file (a TOML or
  // JSON parser's view of the bytes it stopped at): control characters are escaped to keep it one line.
  InputError(std::string kind, const std::string& message)
      : std::runtime_error(driftcheck::one_line(message)), kind_(std::move(kind)) {}
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
};

}  // namespace driftcheck::fuzz
