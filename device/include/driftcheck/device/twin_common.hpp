// Private building blocks shared by every CPU twin and mutant: fast element access to a case's storages in
// fp32, roundings to the activation dtype, the fixed-order fp32 block reduction GPU kernels use, and the
// generic Backend implementation that carries a twin's identity (name, description, numerics, mutated twin,
// bug class).
//
// Twins run thousands of cases per second in campaigns, so element access is storage index arithmetic plus
// one dtype switch per run of elements, never Tensor::at() or a virtual call per element.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "driftcheck/device/backend.hpp"

namespace driftcheck::twin {

// ---- formats in fp32

// fp32 -> fp16 encoding, round to nearest even, overflow to +-inf, every NaN to the canonical 0x7e00. Agrees
// with encode(kFormatF16, x) for every float (tests/registry_test.cpp checks a sweep).
inline std::uint16_t f16_bits(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7e00u;
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds past 65504
  if (a <
      0x38800000u) {  // below 2^-14: fp16 subnormals have the fixed quantum 2^-24, and 2^24 scaling is exact
    const float q = std::nearbyint(std::bit_cast<float>(a) * 0x1p24f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(q));
  }
  const std::uint32_t r = a + 0xfffu + ((a >> 13) & 1u);                // RNE on the 13 dropped mantissa bits
  return static_cast<std::uint16_t>(sign | ((r - 0x38000000u) >> 13));  // rebias 127 -> 15
}

// Value of every 16-bit fp16 code and every fp8 code as floats (exact), built once from driftcheck::decode.
const std::array<float, 65536>& f16_table();
const std::array<float, 256>& fp8_table(DType t);

inline float f16_value(std::uint16_t bits) {
  return f16_table()[bits];
}
inline float bf16_value(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// Rounds an fp32 value to the activation dtype (bf16 or fp16) and back: one rounding, RNE.
inline float round_act(DType act, float x) {
  return act == DType::kBF16 ? round_bf16(x) : f16_value(f16_bits(x));
}

// The same rounding toward zero (a kernel storing with __float2bfloat16_rz or a truncating conversion, or
// vLLM's truncating bf16 adds): at most one ulp off, always toward zero, so it only ever shows as a bias.
// Defined out of line: Debian's GCC 12.2 at -O2 folds the bf16 mask away when this is inlined into a caller
// that passes a fresh sum (1 + 1.5 * 2^-8 came back unchanged; tests/attention_twins_test.cpp
// RocmCustomMfma4TruncatesTheWarpSumWhereMfma16RoundsOnce).
float round_act_toward_zero(DType act, float x);

// ---- storage access

// Element i of a storage as fp32 (exact for every dtype twins read: fp8, fp16, bf16, fp32; int32 values <
// 2^24).
inline float load(const Storage& s, std::int64_t i) {
  const std::byte* p = s.bytes.data();
  switch (s.dtype) {
    case DType::kBF16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return bf16_value(b);
    }
    case DType::kF16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return f16_value(b);
    }
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::kI32: {
      std::int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return static_cast<float>(v);
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      return static_cast<float>(d);
    }
    default:
      return fp8_table(s.dtype)[static_cast<std::uint8_t>(p[i])];
  }
}

inline std::int32_t load_i32(const Storage& s, std::int64_t i) {
  std::int32_t v;
  std::memcpy(&v, s.bytes.data() + 4 * i, 4);
  return v;
}

// n elements first, first + stride, ... as fp32, with one dtype dispatch for the run. load_run_as decodes the
// bytes as dtype `as` (same element size) instead of the storage's own: how a kernel that misreads fp8 bytes
// sees them.
void load_run_as(const Storage& s, DType as, std::int64_t first, std::int64_t stride, std::int64_t n,
                 float* out);
inline void load_run(const Storage& s, std::int64_t first, std::int64_t stride, std::int64_t n, float* out) {
  load_run_as(s, s.dtype, first, stride, n, out);
}

// Stores x rounded once to the storage's dtype (bf16, fp16 or fp32).
inline void store(Storage& s, std::int64_t i, float x) {
  std::byte* p = s.bytes.data();
  if (s.dtype == DType::kF32) {
    std::memcpy(p + 4 * i, &x, 4);
    return;
  }
  const std::uint16_t b = s.dtype == DType::kBF16
                              ? static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(round_bf16(x)) >> 16)
                              : f16_bits(x);
  std::memcpy(p + 2 * i, &b, 2);
}

// Row r of a 2-D tensor: storage index of its first element and the element stride along the row.
struct RowView {
  std::int64_t start;
  std::int64_t step;
};
inline RowView row_view(const Tensor& t, std::int64_t r) {
  return {t.offset() + r * t.strides()[0], t.strides()[1]};
}

// ---- reductions

// The order of a block reduction: `threads` threads each accumulate, sequentially, the chunks of `vec`
// consecutive elements they own (chunk c belongs to thread c % threads; with `chunk_sum_first` a chunk's
// squares are summed on their own first, in pairs, and the chunk sum is added, as vLLM's
// _f16Vec::sum_squares does: `result += z.x * z.x + z.y * z.y` over the chunk's element pairs, so a chunk of
// 8 is ((((x0^2 + x1^2)) + (x2^2 + x3^2)) + (x4^2 + x5^2)) + (x6^2 + x7^2), type_convert.cuh at vllm
// 0c0c819b);
// then each warp of `warp` lanes combines its partials with a shuffle tree and the warp totals are combined.
// cub (vLLM's csrc kernels): shuffle-down offsets 1, 2, 4, 8, 16 (lane 0 ends with the pairwise sum of
// neighbours) and warp totals added in warp order. Triton's tl.sum: xor butterfly offsets 16, 8, 4, 2, 1
// (lane 0 ends with ((x0 + x16) + (x8 + x24)) + ...) and the warp totals reduced by the same butterfly.
// threads == 1 is a plain sequential loop.
struct ReduceOrder {
  int threads = 1;
  int vec = 1;
  int warp = 32;
  // The lane tree: cub's shuffle-down offsets 1, 2, 4, ... (ascending) or Triton's butterfly width/2, ..., 1;
  // the warp totals: in order (cub's block reduce) or by the same butterfly (Triton's tl.sum). The fields of
  // the GPU kernels' ReducePlan (device/gpu/block_reduce.hpp), so either side can name the other's order.
  bool ascending = true;
  bool totals_tree = false;
  bool chunk_sum_first = false;
};

// Sum of squares of x[0..n) in fp32 in the given order. When `accumulate` is bf16 or fp16 every partial sum
// is rounded to it (a reduction in the activation dtype), when `squares` is, every square is (x * x computed
// in the activation dtype, then accumulated in fp32): only mutants do either.
float sum_squares(const float* x, std::int64_t n, const ReduceOrder& order, DType accumulate = DType::kF32,
                  DType squares = DType::kF32);

// ---- backend identity

struct TwinInfo {
  std::string name;
  std::string description;
  std::string provenance;  // upstream repository, files and commit / release range (Backend::provenance)
  BackendKind kind = BackendKind::kCpu;
  OpKind op = OpKind::kRmsNorm;
  Numerics numerics;
  std::string supports_summary;
  std::string mutates;    // mutants: the twin this one breaks
  std::string bug_class;  // mutants: the bug and its source
};

// Backend members that only report identity; subclasses implement supports() and run().
class TwinBackend : public Backend {
 public:
  explicit TwinBackend(TwinInfo info) : info_(std::move(info)) {}
  std::string_view name() const override { return info_.name; }
  std::string_view description() const override { return info_.description; }
  std::string_view provenance() const override { return info_.provenance; }
  BackendKind kind() const override { return info_.kind; }
  OpKind op() const override { return info_.op; }
  std::string supports_summary() const override { return info_.supports_summary; }
  Numerics numerics() const override { return info_.numerics; }
  std::string_view mutates() const override { return info_.mutates; }
  std::string_view bug_class() const override { return info_.bug_class; }
  const TwinInfo& info() const { return info_; }

 private:
  TwinInfo info_;
};

// An upstream defect a kernel parameter set can switch on (true) or repair (false): one flag of the kernel,
// or of one of its parts (defect<Kernel, &Kernel::flag> or defect<Kernel, &Kernel::part, &Part::flag>).
template <class Kernel>
struct DefectSwitch {
  std::string_view name;
  bool (*is_on)(const Kernel&);
  void (*repair)(Kernel&);
};

template <class Kernel, bool Kernel::*Flag>
constexpr DefectSwitch<Kernel> defect(std::string_view name) {
  return {name, [](const Kernel& k) { return k.*Flag; }, [](Kernel& k) { k.*Flag = false; }};
}

template <class Kernel, auto Part, auto Flag>
constexpr DefectSwitch<Kernel> defect(std::string_view name) {
  return {name, [](const Kernel& k) { return (k.*Part).*Flag; }, [](Kernel& k) { (k.*Part).*Flag = false; }};
}

template <class Kernel, std::size_t N>
std::vector<std::string> defects_on(const Kernel& k, const std::array<DefectSwitch<Kernel>, N>& switches) {
  std::vector<std::string> out;
  for (const auto& d : switches)
    if (d.is_on(k)) out.emplace_back(d.name);
  return out;
}

// Switches the named defects off in k; false when k has none of them on.
template <class Kernel, std::size_t N>
bool repair_defects(Kernel& k, const std::array<DefectSwitch<Kernel>, N>& switches,
                    const std::vector<std::string>& names) {
  bool any = false;
  for (const auto& d : switches)
    if (d.is_on(k) && std::find(names.begin(), names.end(), d.name) != names.end()) {
      d.repair(k);
      any = true;
    }
  return any;
}

// A mutant's identity: the twin's numerics (a mutant claims to be correct), kind kMutant, what it breaks and
// why.
TwinInfo mutant_info(const TwinInfo& twin, std::string name, std::string description, std::string bug_class);

// Support::no unless `t` holds bf16 or fp16 activations (the dtypes the modelled kernels are instantiated
// for).
Support check_act_dtype(const Tensor& t, std::string_view what);

}  // namespace driftcheck::twin
