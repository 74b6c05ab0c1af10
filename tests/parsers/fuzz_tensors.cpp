// tensors.bin (DCTENSOR v1, docs/CAMPAIGN.md): every storage and view. An accepted file's views are read
// element by element through their strides and offsets, which must stay inside their storages. Any input must
// be read or rejected with BundleError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "driftcheck/fuzz/bundle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  try {
    const auto tensors = parse_tensors(std::string(reinterpret_cast<const char*>(data), size), "tensors.bin");
    for (const auto& [name, t] : tensors) (void)t.to_f64();
  } catch (const BundleError&) {
  }
  return 0;
}
