// Exchange manifests (driftcheck.exchange v2 and v1, docs/EXCHANGE.md): any text is either refused as a whole
// with an ExchangeError or read entry by entry, a malformed entry becoming one error line; each entry read is
// then decoded into a case (its layout against zero-filled storages of at most 1 MiB, as check does against
// the case file's bytes) and validated, failing only with the documented exceptions. Never a crash, a hang or
// a huge allocation.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "driftcheck/external/protocol.hpp"
#include "driftcheck/fuzz/exchange.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck;
  fuzz::Manifest m;
  try {
    m = fuzz::parse_manifest(std::string_view(reinterpret_cast<const char*>(data), size), "manifest.json");
  } catch (const fuzz::ExchangeError&) {
    return 0;
  }
  for (const auto& line : m.errors)
    if (line.find('\n') != std::string::npos) std::abort();  // one line each
  for (const fuzz::ManifestCase& mc : m.cases) {
    try {
      external::DecodedCase d = external::decode_case(mc.case_object, {}, std::uint64_t{1} << 20);
      validate(d.c);
    } catch (const external::ProtocolError&) {
    } catch (const InvalidArgument&) {
    }
  }
  return 0;
}
