// The gate config reader (docs/GATE.md): any text must load or be rejected with one InputError line naming
// the file (toml++ parse errors included), never another exception or a crash; a config that loads resolves a
// budget for any backend name or rejects a tie the same way.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "driftcheck/fuzz/gate_config.hpp"
#include "driftcheck/fuzz/input_error.hpp"

namespace {

void check_one_line(const driftcheck::fuzz::InputError& e) {
  const std::string what = e.what();
  if (e.kind() != "config" || !what.starts_with("fuzz/gate.toml") || what.find('\n') != std::string::npos)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const GateConfig c = parse_gate_config(text, "fuzz/gate.toml");
    if (c.cases == 0 || c.backends.empty() || c.sha256.size() != 64 || c.stream().empty()) std::abort();
    for (const char* name : {"cpu.rmsnorm.cuda", "cpu.attn.triton_unified", "ext.x"}) {
      try {
        const Budget& b = c.budget_for(name);
        if (!(b.max_ratio > 0) || b.allowed_verdicts.empty()) std::abort();
      } catch (const InputError& e) {
        check_one_line(e);
      }
    }
  } catch (const InputError& e) {
    check_one_line(e);
  }
  return 0;
}
