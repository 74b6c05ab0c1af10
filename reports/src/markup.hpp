// Escaping text for XML and HTML, shared by the JUnit and HTML writers.
#pragma once

#include <string>
#include <string_view>

namespace driftcheck::reports {

// XML 1.0 forbids most control characters even escaped: they become '?'. Bytes >= 0x80 pass through (UTF-8).
inline std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += (c < 0x20 && ch != '\n' && ch != '\t' && ch != '\r') ? '?' : ch;
    }
  }
  return out;
}

}  // namespace driftcheck::reports
