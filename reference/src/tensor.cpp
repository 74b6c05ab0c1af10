#include "driftcheck/reference/tensor.hpp"

#include <bit>
#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

namespace driftcheck {
namespace {

// Decoded value of every encoding of a small format, built once: loads of fp16 and fp8 are a table lookup.
template <std::size_t N>
std::vector<double> build_table(const FloatFormat& f) {
  std::vector<double> t(N);
  for (std::uint32_t c = 0; c < N; ++c) t[c] = decode(f, c);
  return t;
}

const double* decode_table(DType t) {
  static const std::vector<double> f16 = build_table<65536>(kFormatF16);
  static const std::vector<double> e4m3fn = build_table<256>(kFormatE4M3FN);
  static const std::vector<double> e4m3fnuz = build_table<256>(kFormatE4M3FNUZ);
  static const std::vector<double> e5m2 = build_table<256>(kFormatE5M2);
  switch (t) {
    case DType::kF16:
      return f16.data();
    case DType::kF8E4M3FN:
      return e4m3fn.data();
    case DType::kF8E4M3FNUZ:
      return e4m3fnuz.data();
    case DType::kF8E5M2:
      return e5m2.data();
    default:
      return nullptr;
  }
}

template <class T>
T read_as(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
void write_as(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

double bf16_value(std::uint16_t code) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(code) << 16);
}

// encode(f, v, ov) for the small float format with these parameters (its largest finite value given, since
// decode() is not constexpr). A v in the format's normal range is encoded straight from the double's bits:
// dropping the low mantissa bits with a round-half-even carry is exactly encode()'s single rounding there (a
// carry into the next binade moves the exponent as it should, and a value at most the largest finite one
// cannot round past it). Most stores of a case's values take this path; zero, subnormals, values beyond the
// largest finite one, infinities and NaN go through encode().
template <int Bits, int ManBits, int Bias>
std::uint32_t small_code(const FloatFormat& f, double max_finite, double v, Overflow ov) {
  constexpr double kMinNormal = [] {
    double x = 1;
    for (int e = 1 - Bias; e < 0; ++e) x *= 0.5;
    return x;
  }();
  const double a = std::fabs(v);
  if (!(a >= kMinNormal && a <= max_finite)) return encode(f, v, ov);
  constexpr int kDrop = 52 - ManBits;
  constexpr std::uint64_t kLow = (std::uint64_t{1} << kDrop) - 1;
  std::uint64_t u = std::bit_cast<std::uint64_t>(v);
  u += (kLow >> 1) + ((u >> kDrop) & 1u);
  const std::uint64_t sign = u >> 63, exp = ((u >> 52) & 0x7ffu) - 1023 + Bias;
  const std::uint64_t man = (u >> kDrop) & ((std::uint64_t{1} << ManBits) - 1);
  return static_cast<std::uint32_t>((sign << (Bits - 1)) | (exp << ManBits) | man);
}

std::int32_t to_i32(double v) {
  if (!(v == std::floor(v)) || v < -2147483648.0 || v > 2147483647.0) {
    throw InvalidArgument("int32 store of " + std::to_string(v) + ": not an integer in range");
  }
  return static_cast<std::int32_t>(v);
}

// first + (n - 1) * stride, or nothing where int64 cannot hold it. Views read from files and worker frames
// may give a dimension of extent 1 any stride, and a stride that wraps around could land a run back inside
// its storage: every extent is computed here, never with plain arithmetic.
std::optional<std::int64_t> last_of_run(std::int64_t first, std::int64_t stride, std::int64_t n) {
  std::int64_t span = 0, last = 0;
  if (__builtin_mul_overflow(n - 1, stride, &span) || __builtin_add_overflow(first, span, &last))
    return std::nullopt;
  return last;
}

void check_run(const char* access, std::int64_t first, std::int64_t stride, std::int64_t n,
               std::int64_t numel) {
  const std::optional<std::int64_t> last = last_of_run(first, stride, n);
  if (!last || first < 0 || *last < 0 || first >= numel || *last >= numel) {
    throw InvalidArgument(std::string("storage ") + access + " of " + std::to_string(n) + " elements from " +
                          std::to_string(first) + " stride " + std::to_string(stride) +
                          " outside a storage of " + std::to_string(numel) + " elements");
  }
}

}  // namespace

Storage::Storage(DType t, std::int64_t numel) : dtype(t) {
  if (numel < 0) throw InvalidArgument("storage of " + std::to_string(numel) + " elements");
  bytes.resize(static_cast<std::size_t>(numel * dtype_size(t)));
}

namespace {

// Elements first + i * stride (i < n) of `bytes`, each of `size` bytes, through `f(pointer to element, i)`.
// Element indices, not a byte step: first + i * stride is in range for every i < n (checked by the caller),
// while stride * size may overflow where n is 1. One loop per dtype (the callers switch outside it): loads
// and stores of whole caches run through here.
template <class Byte, class F>
void for_each_element(Byte* bytes, std::int64_t first, std::int64_t stride, std::int64_t n, int size, F f) {
  for (std::int64_t i = 0; i < n; ++i) f(bytes + (first + i * stride) * size, i);
}

// Writes a double into one element of a small float format (small_code's parameters).
template <int Bits, int ManBits, int Bias>
auto small_writer(const FloatFormat& f, double max_finite, Overflow ov) {
  using Code = std::conditional_t<Bits == 16, std::uint16_t, std::uint8_t>;
  return [&f, max_finite, ov](std::byte* p, double v) {
    write_as<Code>(p, static_cast<Code>(small_code<Bits, ManBits, Bias>(f, max_finite, v, ov)));
  };
}

}  // namespace

void Storage::load_f64(std::int64_t first, std::int64_t stride, std::int64_t n, double* out) const {
  if (n <= 0) return;
  check_run("read", first, stride, n, numel());
  const int size = dtype_size(dtype);
  const double* table = decode_table(dtype);
  const auto load = [&](auto read) {
    for_each_element(bytes.data(), first, stride, n, size,
                     [&](const std::byte* p, std::int64_t i) { out[i] = read(p); });
  };
  switch (dtype) {
    case DType::kF64:
      return load([](const std::byte* p) { return read_as<double>(p); });
    case DType::kF32:
      return load([](const std::byte* p) { return static_cast<double>(read_as<float>(p)); });
    case DType::kI32:
      return load([](const std::byte* p) { return static_cast<double>(read_as<std::int32_t>(p)); });
    case DType::kBF16:
      return load([](const std::byte* p) { return bf16_value(read_as<std::uint16_t>(p)); });
    case DType::kF16:
      return load([&](const std::byte* p) { return table[read_as<std::uint16_t>(p)]; });
    default:
      return load([&](const std::byte* p) { return table[read_as<std::uint8_t>(p)]; });
  }
}

void Storage::store_f64(std::int64_t first, std::int64_t stride, std::int64_t n, const double* in,
                        Overflow ov) {
  if (n <= 0) return;
  check_run("write", first, stride, n, numel());
  const int size = dtype_size(dtype);
  const auto store = [&](auto write) {
    for_each_element(bytes.data(), first, stride, n, size,
                     [&](std::byte* p, std::int64_t i) { write(p, in[i]); });
  };
  switch (dtype) {
    case DType::kF64:
      return store([](std::byte* p, double v) { write_as<double>(p, v); });
    case DType::kF32:
      return store([&](std::byte* p, double v) {
        write_as<float>(p, static_cast<float>(round_to(DType::kF32, v, ov)));
      });
    case DType::kI32:
      return store([](std::byte* p, double v) { write_as<std::int32_t>(p, to_i32(v)); });
    case DType::kBF16:
      return store(small_writer<16, 7, 127>(kFormatBF16, 0x1.fep127, ov));
    case DType::kF16:
      return store(small_writer<16, 10, 15>(kFormatF16, 65504.0, ov));
    case DType::kF8E4M3FN:
      return store(small_writer<8, 3, 7>(kFormatE4M3FN, 448.0, ov));
    case DType::kF8E4M3FNUZ:
      return store(small_writer<8, 3, 8>(kFormatE4M3FNUZ, 240.0, ov));
    case DType::kF8E5M2:
      return store(small_writer<8, 2, 15>(kFormatE5M2, 57344.0, ov));
  }
}

double Storage::load(std::int64_t i) const {
  double v;
  load_f64(i, 1, 1, &v);
  return v;
}

void Storage::store(std::int64_t i, double v, Overflow ov) {
  store_f64(i, 1, 1, &v, ov);
}

std::uint64_t Storage::load_bits(std::int64_t i) const {
  if (i < 0 || i >= numel())
    throw InvalidArgument("storage bit read at " + std::to_string(i) + " out of range");
  std::uint64_t bits = 0;
  std::memcpy(&bits, bytes.data() + i * dtype_size(dtype), static_cast<std::size_t>(dtype_size(dtype)));
  return bits;
}

void Storage::store_bits(std::int64_t i, std::uint64_t bits) {
  if (i < 0 || i >= numel())
    throw InvalidArgument("storage bit write at " + std::to_string(i) + " out of range");
  std::memcpy(bytes.data() + i * dtype_size(dtype), &bits, static_cast<std::size_t>(dtype_size(dtype)));
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * std::max<std::int64_t>(shape[d], 1);
  return strides;
}

namespace {

std::string join(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

std::int64_t product(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

}  // namespace

Tensor Tensor::zeros(DType t, Shape shape) {
  for (std::int64_t s : shape) {
    if (s < 0) throw InvalidArgument("negative dimension in shape " + join(shape));
  }
  auto storage = std::make_shared<Storage>(t, product(shape));
  Shape strides = contiguous_strides(shape);
  return view(std::move(storage), std::move(shape), std::move(strides), 0);
}

Tensor Tensor::view(std::shared_ptr<Storage> storage, Shape shape, Shape strides, std::int64_t offset) {
  if (!storage) throw InvalidArgument("view of a null storage");
  if (shape.size() != strides.size()) {
    throw InvalidArgument("view shape " + join(shape) + " and strides " + join(strides) + " differ in rank");
  }
  std::optional<std::int64_t> last = offset;
  bool empty = false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || strides[d] < 0) {
      throw InvalidArgument("view shape " + join(shape) + " strides " + join(strides) + ": negative entry");
    }
    empty = empty || shape[d] == 0;
    if (shape[d] > 0 && last) last = last_of_run(*last, strides[d], shape[d]);
  }
  const std::int64_t n = storage->numel();
  if (offset < 0 || (empty ? offset > n : !last || *last >= n)) {
    throw InvalidArgument("view " + join(shape) + " strides " + join(strides) + " offset " +
                          std::to_string(offset) + " reaches outside a storage of " + std::to_string(n) +
                          " elements");
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  return t;
}

Tensor Tensor::padded(DType t, Shape shape, std::int64_t row_stride, std::int64_t offset,
                      std::int64_t guard) {
  if (shape.empty()) throw InvalidArgument("padded tensor needs at least one dimension");
  const std::size_t r = shape.size();
  if (row_stride < shape[r - 1] || offset < 0 || guard < 0) {
    throw InvalidArgument("padded " + join(shape) + ": row stride " + std::to_string(row_stride) +
                          ", offset " + std::to_string(offset) + ", guard " + std::to_string(guard));
  }
  Shape strides(r, 1);
  for (std::size_t d = r - 1; d-- > 0;) strides[d] = d == r - 2 ? row_stride : strides[d + 1] * shape[d + 1];
  std::int64_t extent = product(shape) == 0 ? 0 : 1;
  for (std::size_t d = 0; d < r && extent > 0; ++d) extent += (shape[d] - 1) * strides[d];
  auto storage = std::make_shared<Storage>(t, guard + offset + extent + guard);
  return view(std::move(storage), std::move(shape), std::move(strides), guard + offset);
}

std::int64_t Tensor::numel() const {
  return product(shape_);
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t d = shape_.size(); d-- > 0;) {
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

std::int64_t Tensor::index(std::span<const std::int64_t> idx) const {
  if (idx.size() != shape_.size()) {
    throw InvalidArgument("index of rank " + std::to_string(idx.size()) + " into " + describe());
  }
  std::int64_t i = offset_;
  for (std::size_t d = 0; d < idx.size(); ++d) {
    if (idx[d] < 0 || idx[d] >= shape_[d]) {
      throw InvalidArgument("index " + std::to_string(idx[d]) + " out of range in dim " + std::to_string(d) +
                            " of " + describe());
    }
    i += idx[d] * strides_[d];
  }
  return i;
}

std::int64_t Tensor::index_of_linear(std::int64_t linear) const {
  if (linear < 0 || linear >= numel()) {
    throw InvalidArgument("linear index " + std::to_string(linear) + " out of range of " + describe());
  }
  std::int64_t i = offset_;
  for (std::size_t d = shape_.size(); d-- > 0;) {
    i += (linear % shape_[d]) * strides_[d];
    linear /= shape_[d];
  }
  return i;
}

namespace {

// Calls f(storage index of the row's first element, row number) for every innermost row of t, in row-major
// order; rows are t.size(-1) elements at stride t.strides().back().
template <class F>
void for_each_row(const Tensor& t, F&& f) {
  if (t.numel() == 0) return;
  if (t.dim() == 0) {
    f(t.offset(), 0);
    return;
  }
  const std::int64_t rows = t.numel() / t.shape().back();
  Shape idx(t.shape().size() - 1, 0);
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t base = t.offset();
    for (std::size_t d = 0; d < idx.size(); ++d) base += idx[d] * t.strides()[d];
    f(base, row);
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
}

std::int64_t row_length(const Tensor& t) {
  return t.dim() == 0 ? 1 : t.shape().back();
}
std::int64_t row_stride(const Tensor& t) {
  return t.dim() == 0 ? 1 : t.strides().back();
}

}  // namespace

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  const std::int64_t len = row_length(*this);
  for_each_row(*this, [&](std::int64_t base, std::int64_t row) {
    storage_->load_f64(base, row_stride(*this), len, out.data() + row * len);
  });
  return out;
}

std::vector<float> Tensor::to_f32() const {
  const std::vector<double> v = to_f64();
  return {v.begin(), v.end()};
}

void Tensor::copy_from(std::span<const double> values, Overflow ov) {
  if (static_cast<std::int64_t>(values.size()) != numel()) {
    throw InvalidArgument("copy of " + std::to_string(values.size()) + " values into " + describe());
  }
  const std::int64_t len = row_length(*this);
  for_each_row(*this, [&](std::int64_t base, std::int64_t row) {
    storage_->store_f64(base, row_stride(*this), len, values.data() + row * len, ov);
  });
}

Tensor Tensor::clone_contiguous() const {
  Tensor out = zeros(dtype(), shape_);
  for (std::int64_t i = 0; i < numel(); ++i)
    out.storage_->store_bits(i, storage_->load_bits(index_of_linear(i)));
  return out;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype())) + join(shape_) + " strides " + join(strides_) + " offset " +
         std::to_string(offset_);
}

}  // namespace driftcheck
