// The backends file loader (docs/PROTOCOL.md section 6): any text must load or be rejected with one
// BackendFileError line naming the file (toml++ parse errors included), never another exception or a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& d : external::load_backends_text(text, "fuzz.toml", registry()))
      if (!d.name.starts_with("ext.") || d.origin().empty()) std::abort();
  } catch (const external::BackendFileError& e) {
    const std::string what = e.what();
    if (!what.starts_with("fuzz.toml:") || what.find('\n') != std::string::npos) std::abort();
  }
  return 0;
}
