// The gate baseline reader (docs/GATE.md): any bytes must load or be rejected with one InputError line naming
// the file, never another exception or a crash; a baseline that loads compares with itself as unchanged and
// ratchets onto itself without refusing anything.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "driftcheck/fuzz/gate_baseline.hpp"
#include "driftcheck/fuzz/input_error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const Baseline b = parse_baseline(text, "fuzz/baseline.json");
    const Margin m;
    if (!compare_with_baseline(b, b.entries, m).empty()) std::abort();
    const RatchetResult r = ratchet(&b, b.stream, b.entries, m, false, "");
    if (!r.refused.empty() || !r.loosened.empty() || r.baseline.entries.size() != b.entries.size())
      std::abort();
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (e.kind() != "baseline" || !what.starts_with("fuzz/baseline.json: ") ||
        what.find('\n') != std::string::npos)
      std::abort();
  }
  return 0;
}
