// case.json of a repro bundle: the format checks, the CaseSpec reader (from_json and its validation) and the
// seed and case index. Accepted specs must survive a round trip: writing one and reading it back gives the
// same JSON. Any input must be read or rejected with BundleError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/bundle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  try {
    const CaseFile c =
        parse_case_json(std::string_view(reinterpret_cast<const char*>(data), size), "case.json");
    const nlohmann::json written = c.spec;
    if (nlohmann::json(written.get<CaseSpec>()) != written) std::abort();  // to_json / from_json disagree
  } catch (const BundleError&) {
  }
  return 0;
}
