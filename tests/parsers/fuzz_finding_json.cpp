// finding.json of a repro bundle: the format checks and the fields replay reads. Any input must be read or
// rejected with BundleError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "driftcheck/fuzz/bundle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  try {
    (void)parse_finding_json(std::string_view(reinterpret_cast<const char*>(data), size), "finding.json");
  } catch (const BundleError&) {
  }
  return 0;
}
