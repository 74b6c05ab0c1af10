#include "driftcheck/device/twin_common.hpp"

#include <fmt/format.h>

namespace driftcheck::twin {

namespace {

template <std::size_t N>
std::array<float, N> decode_table(DType t) {
  std::array<float, N> table{};
  const FloatFormat& f = *float_format(t);
  for (std::size_t code = 0; code < N; ++code)
    table[code] = static_cast<float>(decode(f, static_cast<std::uint32_t>(code)));
  return table;
}

}  // namespace

const std::array<float, 65536>& f16_table() {
  static const auto table = decode_table<65536>(DType::kF16);
  return table;
}

const std::array<float, 256>& fp8_table(DType t) {
  static const auto e4m3fn = decode_table<256>(DType::kF8E4M3FN);
  static const auto e4m3fnuz = decode_table<256>(DType::kF8E4M3FNUZ);
  static const auto e5m2 = decode_table<256>(DType::kF8E5M2);
  switch (t) {
    case DType::kF8E4M3FN:
      return e4m3fn;
    case DType::kF8E4M3FNUZ:
      return e4m3fnuz;
    case DType::kF8E5M2:
      return e5m2;
    default:
      throw BackendError(fmt::format("fp8_table: {} is not an fp8 dtype", dtype_name(t)));
  }
}

float round_act_toward_zero(DType act, float x) {
  if (std::isnan(x)) return x;
  if (act == DType::kBF16) return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & 0xffff0000u);
  std::uint16_t b = f16_bits(x);
  if (std::fabs(f16_value(b)) > std::fabs(x)) --b;  // one step toward zero in magnitude, sign kept
  return f16_value(b);
}

void load_run_as(const Storage& s, DType as, std::int64_t first, std::int64_t stride, std::int64_t n,
                 float* out) {
  const std::byte* p = s.bytes.data();
  switch (as) {
    case DType::kBF16:
      for (std::int64_t k = 0; k < n; ++k) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * (first + k * stride), 2);
        out[k] = bf16_value(b);
      }
      return;
    case DType::kF16: {
      const auto& table = f16_table();
      for (std::int64_t k = 0; k < n; ++k) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * (first + k * stride), 2);
        out[k] = table[b];
      }
      return;
    }
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2: {
      const auto& table = fp8_table(as);
      for (std::int64_t k = 0; k < n; ++k) out[k] = table[static_cast<std::uint8_t>(p[first + k * stride])];
      return;
    }
    default:
      for (std::int64_t k = 0; k < n; ++k) out[k] = load(s, first + k * stride);
  }
}

namespace {

float accumulate_in(DType t, float x) {
  return t == DType::kF32 ? x : round_act(t, x);
}

}  // namespace

namespace {

// Combines v[0..n) in place into v[0] by a shuffle tree over a power-of-two width: cub's shuffle-down with
// offsets 1, 2, 4, ... (pairs of neighbours first) or Triton's butterfly with offsets width/2, ..., 1.
// Entries at or past n are absent (a partial warp).
float shuffle_tree(float* v, int n, int width, bool ascending, DType accumulate) {
  if (ascending) {
    for (int offset = 1; offset < width; offset *= 2)
      for (int lane = 0; lane + offset < n; lane += 2 * offset)
        v[lane] = accumulate_in(accumulate, v[lane] + v[lane + offset]);
  } else {
    for (int offset = width / 2; offset >= 1; offset /= 2)
      for (int lane = 0; lane + offset < n && lane < offset; ++lane)
        v[lane] = accumulate_in(accumulate, v[lane] + v[lane + offset]);
  }
  return v[0];
}

}  // namespace

float sum_squares(const float* x, std::int64_t n, const ReduceOrder& order, DType accumulate, DType squares) {
  const int threads = std::max(order.threads, 1);
  std::vector<float> partial(static_cast<std::size_t>(threads), 0.0f);
  const std::int64_t vec = std::max(order.vec, 1);
  for (std::int64_t c0 = 0; c0 < n; c0 += vec) {
    float& acc = partial[static_cast<std::size_t>((c0 / vec) % threads)];
    const std::int64_t c1 = std::min(c0 + vec, n);
    if (order.chunk_sum_first) {
      // _f16Vec::sum_squares: each pair's squares added first (for an odd chunk, one square alone).
      float chunk = 0.0f;
      for (std::int64_t i = c0; i < c1; i += 2) {
        const float sq = accumulate_in(squares, x[i] * x[i]);
        const float pair =
            i + 1 < c1 ? accumulate_in(accumulate, sq + accumulate_in(squares, x[i + 1] * x[i + 1])) : sq;
        chunk = accumulate_in(accumulate, chunk + pair);
      }
      acc = accumulate_in(accumulate, acc + chunk);
    } else {
      for (std::int64_t i = c0; i < c1; ++i)
        acc = accumulate_in(accumulate, acc + accumulate_in(squares, x[i] * x[i]));
    }
  }
  // A partial last warp (threads not a multiple of the warp) still runs the full shuffle ladder; lanes past
  // the end hold nothing.
  const int warp = static_cast<int>(std::bit_ceil(static_cast<unsigned>(std::max(order.warp, 1))));
  std::vector<float> totals;
  for (int w0 = 0; w0 < threads; w0 += warp)
    totals.push_back(
        shuffle_tree(partial.data() + w0, std::min(warp, threads - w0), warp, order.ascending, accumulate));
  if (order.totals_tree) {
    const int n_warps = static_cast<int>(totals.size());
    return shuffle_tree(totals.data(), n_warps,
                        static_cast<int>(std::bit_ceil(static_cast<unsigned>(n_warps))), false, accumulate);
  }
  float total = 0.0f;
  for (float t : totals) total = accumulate_in(accumulate, total + t);
  return total;
}

Support check_act_dtype(const Tensor& t, std::string_view what) {
  if (t.dtype() == DType::kBF16 || t.dtype() == DType::kF16) return Support::yes();
  return Support::no(fmt::format("{} is {}: the modelled kernel is instantiated for bf16 and fp16 only", what,
                                 dtype_name(t.dtype())));
}

TwinInfo mutant_info(const TwinInfo& twin, std::string name, std::string description, std::string bug_class) {
  TwinInfo m = twin;
  m.name = std::move(name);
  m.description = std::move(description);
  m.kind = BackendKind::kMutant;
  m.mutates = twin.name;
  m.bug_class = std::move(bug_class);
  return m;
}

}  // namespace driftcheck::twin
