// A whole repro bundle as replay reads it: case.json, tensors.bin and finding.json (the input holds the
// three, separated by "\n@@\n"), then the tensors validated as a case of the spec's op and checked against
// the spec. Any input must be read or rejected with BundleError.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "driftcheck/fuzz/bundle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  const std::string_view in(reinterpret_cast<const char*>(data), size), sep = "\n@@\n";
  const auto a = in.find(sep);
  const auto b = a == std::string_view::npos ? a : in.find(sep, a + sep.size());
  if (b == std::string_view::npos) return 0;
  try {
    (void)parse_bundle(in.substr(0, a), std::string(in.substr(a + sep.size(), b - a - sep.size())),
                       in.substr(b + sep.size()), "bundle");
  } catch (const BundleError&) {
  }
  return 0;
}
