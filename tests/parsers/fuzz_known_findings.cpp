// The known-findings reader (docs/FINDINGS.md; `fuzz --known-findings`, `merge --known-findings`): any text
// must load or be rejected with one InvalidArgument line naming the file (toml++ parse errors included),
// never another exception or a crash; a file that loads has every field of every finding set and no id twice.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "driftcheck/fuzz/known_findings.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const KnownFindings known = parse_known_findings(text, "fuzz/known-findings.toml");
    std::set<std::string_view> ids;
    for (const KnownFinding& f : known.findings) {
      for (const std::string* field :
           {&f.id, &f.backend, &f.defect, &f.summary, &f.upstream, &f.issue, &f.replay})
        if (field->empty()) std::abort();
      if (!ids.insert(f.id).second) std::abort();
    }
  } catch (const driftcheck::InvalidArgument& e) {
    const std::string what = e.what();
    if (!what.starts_with("known findings fuzz/known-findings.toml: ") ||
        what.find('\n') != std::string::npos)
      std::abort();
  }
  return 0;
}
