// Safetensors files: the tensor container torch, numpy (by hand), JAX and the `safetensors` package read,
// used for exchange files (`driftcheck export` / `check`) and golden cases. Layout (docs/EXCHANGE.md, byte by
// byte):
//   u64 little-endian N | N bytes of UTF-8 JSON header, padded with spaces | data buffer
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte offsets into the
// data buffer, row-major little-endian elements) and may hold "__metadata__", a flat map of strings to
// strings.
//
// dtypes: fp64 F64, fp32 F32, fp16 F16, bf16 BF16, fp8_e4m3fn F8_E4M3, fp8_e5m2 F8_E5M2, i32 I32. Safetensors
// has no name for fp8_e4m3fnuz (AMD's fp8), so such a tensor is stored as U8 (its raw encodings) with the
// metadata entry "driftcheck.dtype.<tensor name>" = "fp8_e4m3fnuz": torch users load it with
// `t.view(torch.float8_e4m3fnuz)`. The reader turns that entry back into the dtype and drops it from
// metadata.
//
// The writer orders tensors by element size (largest first) and pads the header to 8 bytes, so every tensor
// starts at a multiple of its element size in the file (zero-copy loads by mmap). The reader is strict: it
// checks the header length, the JSON (no duplicate keys, no unknown fields), every dtype, shape and byte
// size, and that the offsets tile the data buffer exactly (sorted by offset, each tensor starts where the
// previous one ended, the last ends at the end of the file: no gap, no overlap, no trailing byte, as the
// specification demands), and throws the first problem as a SafetensorsError whose message is one line naming
// the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "driftcheck/reference/tensor.hpp"

namespace driftcheck::io {

// The specification's bound on the JSON header: a larger length is a corrupted file, not a big one.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;
// Metadata key prefix that marks a U8 tensor as fp8_e4m3fnuz.
inline constexpr std::string_view kDTypeMetadataPrefix = "driftcheck.dtype.";

// A file that is not a valid safetensors file driftcheck can read: "<file>: <problem>", one line.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One tensor: the row-major elements of `shape`, in a storage of exactly that many elements.
struct StTensor {
  Shape shape;
  std::shared_ptr<Storage> data;

  // A contiguous view of the storage (shares it).
  Tensor view() const;
};

struct Safetensors {
  std::map<std::string, StTensor, std::less<>> tensors;
  std::map<std::string, std::string, std::less<>> metadata;  // "__metadata__", without driftcheck.dtype.*
};

// The file's bytes. Throws InvalidArgument for a tensor whose storage does not hold exactly its shape's
// elements, an empty or reserved name ("__metadata__"), or a metadata key starting with kDTypeMetadataPrefix.
std::string encode_safetensors(const Safetensors& f);
// Writes encode_safetensors(f) atomically (temp file + rename).
void write_safetensors(const std::filesystem::path& path, const Safetensors& f);

// Parses a whole file's bytes; `file` names it in error messages.
Safetensors parse_safetensors(std::string_view bytes, std::string_view file);
Safetensors read_safetensors(const std::filesystem::path& path);

// Safetensors' name of a dtype ("F8_E4M3"; "U8" for fp8_e4m3fnuz).
std::string_view safetensors_dtype(DType t);

}  // namespace driftcheck::io
