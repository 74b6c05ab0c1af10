// Helpers shared by the Markdown writers.
#pragma once

#include <string>
#include <string_view>

namespace driftcheck::reports {

// Markdown tables break on '|' and newlines inside cells.
inline std::string cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

}  // namespace driftcheck::reports
