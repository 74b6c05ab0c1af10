// NAME.json of a golden case (golden/): the format checks, every field's type and value, the CaseSpec reader
// (from_json and its validation) and the tensor listing. Any input must be read or rejected with one
// InputError line naming the file; an accepted file's spec survives a round trip and its entries are what the
// reader promises (known dtype, non-negative extents, 64 hex digits, a tensors file beside it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/golden.hpp"
#include "driftcheck/fuzz/input_error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  try {
    const GoldenMetadata m =
        parse_golden_metadata(std::string_view(reinterpret_cast<const char*>(data), size), "golden/x.json");
    const nlohmann::json written = m.spec;
    if (nlohmann::json(written.get<CaseSpec>()) != written) std::abort();  // to_json / from_json disagree
    if (m.tensors_file.empty() || m.tensors_file.find('/') != std::string::npos) std::abort();
    for (const auto& [name, t] : m.tensors) {
      if (t.sha256.size() != 64) std::abort();
      for (const std::int64_t extent : t.shape)
        if (extent < 0) std::abort();
    }
  } catch (const InputError& e) {
    if (std::string_view(e.what()).find('\n') != std::string_view::npos) std::abort();  // one line
  }
  return 0;
}
