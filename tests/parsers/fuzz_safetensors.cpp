// Safetensors files (docs/EXCHANGE.md): the strict reader must accept or reject any bytes with a one-line
// SafetensorsError, never crash, hang or allocate beyond the file. An accepted file is re-encoded and read
// back: the writer must produce a file the reader accepts with the same tensors and metadata.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "driftcheck/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace driftcheck::io;
  Safetensors f;
  try {
    f = parse_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "input.safetensors");
  } catch (const SafetensorsError& e) {
    if (std::string_view(e.what()).find('\n') != std::string_view::npos) std::abort();  // one line
    return 0;
  }
  const Safetensors back = parse_safetensors(encode_safetensors(f), "re-encoded");
  if (back.metadata != f.metadata || back.tensors.size() != f.tensors.size()) std::abort();
  for (const auto& [name, t] : f.tensors) {
    const StTensor& u = back.tensors.at(name);
    if (u.shape != t.shape || u.data->dtype != t.data->dtype || u.data->bytes != t.data->bytes) std::abort();
  }
  return 0;
}
