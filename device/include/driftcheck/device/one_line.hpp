// Error messages are one line (the exit-code contract: "one line on stderr"), but they quote text from files:
// names, ids, a TOML parser's view of the bytes it stopped at. one_line escapes what would break the line.
#pragma once

#include <string>
#include <string_view>

namespace driftcheck {

// `s` with control characters escaped (\n, \r, \x01): text from a file stays on one line in a message.
inline std::string one_line(std::string_view s) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace driftcheck
