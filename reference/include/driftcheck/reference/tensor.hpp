// Tensors as real kernels see them: a dtype, a shape, strides in elements and an element offset into a shared
// storage. Several tensors may view one storage (strided rows, misaligned bases, an output aliasing an
// input), and the bytes of the storage not covered by any view act as guard bands the oracle checks after a
// backend ran.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "driftcheck/reference/format.hpp"

namespace driftcheck {

// A contract violation in what a caller passed (shape, dtype, parameter): the message names the problem.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Elements of one dtype in one byte buffer. Element i lives at bytes [i*size, (i+1)*size).
struct Storage {
  DType dtype;
  std::vector<std::byte> bytes;

  Storage(DType t, std::int64_t numel);
  std::int64_t numel() const { return static_cast<std::int64_t>(bytes.size()) / dtype_size(dtype); }
  // Value of element i as a double (exact for every dtype, int32 included).
  double load(std::int64_t i) const;
  // Stores round_to(dtype, v, ov) (int32: v must be integral and in range).
  void store(std::int64_t i, double v, Overflow ov = Overflow::kIeee);
  // Raw encoding of element i (the low dtype_size bytes), for bit-exact comparisons and fp8 reinterpretation.
  std::uint64_t load_bits(std::int64_t i) const;
  void store_bits(std::int64_t i, std::uint64_t bits);
  // Elements first, first + stride, ..., n of them, with one dtype dispatch for the whole run (the fast path
  // of gathers and row copies). Same values and rounding as load/store; every index is bounds-checked.
  void load_f64(std::int64_t first, std::int64_t stride, std::int64_t n, double* out) const;
  void store_f64(std::int64_t first, std::int64_t stride, std::int64_t n, const double* in,
                 Overflow ov = Overflow::kIeee);
};

using Shape = std::vector<std::int64_t>;

class Tensor {
 public:
  Tensor() = default;
  // A fresh contiguous, zero-filled tensor.
  static Tensor zeros(DType t, Shape shape);
  // A view into an existing storage. Throws InvalidArgument if any element falls outside the storage or a
  // stride is negative.
  static Tensor view(std::shared_ptr<Storage> storage, Shape shape, Shape strides, std::int64_t offset);
  // A view whose last dim is contiguous, whose rows (dim -2) are `row_stride` elements apart (>= last dim;
  // outer dims packed), starting at element guard + offset of a fresh zero-filled storage that ends `guard`
  // elements after the view's last element: the usual way to build strided, misaligned tensors with guard
  // bands.
  static Tensor padded(DType t, Shape shape, std::int64_t row_stride, std::int64_t offset,
                       std::int64_t guard);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return storage_->dtype; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  std::int64_t offset() const { return offset_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t size(std::int64_t d) const { return shape_.at(static_cast<std::size_t>(d)); }
  std::int64_t numel() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Storage index of a multi-index; throws InvalidArgument for a wrong rank or an index outside the shape.
  std::int64_t index(std::span<const std::int64_t> idx) const;
  std::int64_t index(std::initializer_list<std::int64_t> idx) const {
    return index(std::span(idx.begin(), idx.size()));
  }
  double at(std::initializer_list<std::int64_t> idx) const { return storage_->load(index(idx)); }
  void set(std::initializer_list<std::int64_t> idx, double v, Overflow ov = Overflow::kIeee) {
    storage_->store(index(idx), v, ov);
  }
  // Storage index of the element with row-major linear position `linear` in this view.
  std::int64_t index_of_linear(std::int64_t linear) const;

  // All elements in row-major order, as doubles (exact).
  std::vector<double> to_f64() const;
  std::vector<float> to_f32()
      const;  // only for dtypes that fit float exactly (all but fp64/int32 large values)
  // Writes row-major values, rounding each to the dtype once.
  void copy_from(std::span<const double> values, Overflow ov = Overflow::kIeee);

  // A deep copy of this view into a fresh contiguous tensor of the same dtype.
  Tensor clone_contiguous() const;

  std::string describe() const;  // "bf16[4, 96] strides [104, 1] offset 3"

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  std::int64_t offset_ = 0;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace driftcheck
