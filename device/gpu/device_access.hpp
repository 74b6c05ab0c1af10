// Device-side access to tensors through DeviceView, shared by the kernels of kernels.hip and
// reference_kernels.hip: element loads (exact for every dtype) and rounding stores, storage index arithmetic,
// and the keys a query row of a paged-attention case sees (case.hpp's definition).
#pragma once

#include <cstdint>

#include "kernels.hpp"

namespace driftcheck::gpu {

__device__ inline float load(const DeviceView& v, std::int64_t i) {
  switch (v.dtype) {
    case DType::kF32:
      return static_cast<const float*>(v.base)[i];
    case DType::kI32:
      return static_cast<float>(static_cast<const std::int32_t*>(v.base)[i]);
    case DType::kBF16: {
      const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(v.base)[i])
                                 << 16;
      return bits_as<float>(bits);
    }
    case DType::kF16:
      return static_cast<float>(
          decode(float_format_of(DType::kF16), static_cast<const std::uint16_t*>(v.base)[i]));
    case DType::kF64:
      return static_cast<float>(static_cast<const double*>(v.base)[i]);
    default:
      return static_cast<float>(
          decode(float_format_of(v.dtype), static_cast<const std::uint8_t*>(v.base)[i]));
  }
}

__device__ inline std::int32_t load_i32(const DeviceView& v, std::int64_t i) {
  return static_cast<const std::int32_t*>(v.base)[i];
}

// Rounds to the view's dtype once (round to nearest even) and stores.
__device__ inline void store(const DeviceView& v, std::int64_t i, float x) {
  switch (v.dtype) {
    case DType::kF32:
      static_cast<float*>(v.base)[i] = x;
      return;
    case DType::kBF16: {
      const std::uint32_t bits = bits_as<std::uint32_t>(round_bf16(x));
      static_cast<std::uint16_t*>(v.base)[i] = static_cast<std::uint16_t>(bits >> 16);
      return;
    }
    case DType::kF16:
      static_cast<std::uint16_t*>(v.base)[i] =
          static_cast<std::uint16_t>(encode(float_format_of(DType::kF16), x));
      return;
    case DType::kF64:
      static_cast<double*>(v.base)[i] = x;
      return;
    default:
      static_cast<std::uint8_t*>(v.base)[i] = static_cast<std::uint8_t>(encode(float_format_of(v.dtype), x));
      return;
  }
}

__device__ inline float round_act(DType t, float x) {
  return t == DType::kBF16 ? round_bf16(x) : static_cast<float>(round_to(t, x));
}

__device__ inline std::int64_t at2(const DeviceView& v, std::int64_t i, std::int64_t j) {
  return v.offset + i * v.stride[0] + j * v.stride[1];
}
__device__ inline std::int64_t at3(const DeviceView& v, std::int64_t i, std::int64_t j, std::int64_t k) {
  return v.offset + i * v.stride[0] + j * v.stride[1] + k * v.stride[2];
}
__device__ inline std::int64_t at4(const DeviceView& v, std::int64_t i, std::int64_t j, std::int64_t k,
                                   std::int64_t l) {
  return v.offset + i * v.stride[0] + j * v.stride[1] + k * v.stride[2] + l * v.stride[3];
}

// Element i as a double, exactly (every dtype a case holds is a subset of fp64).
__device__ inline double load_f64(const DeviceView& v, std::int64_t i) {
  switch (v.dtype) {
    case DType::kF64:
      return static_cast<const double*>(v.base)[i];
    case DType::kI32:
      return static_cast<const std::int32_t*>(v.base)[i];
    default:
      return load(v, i);  // fp32, bf16, fp16 and fp8 values are floats: exact
  }
}

// The keys [lo, hi) query token `token` sees, and its sequence: query j of a sequence with q queries and L
// keys sits at p = L - q + j and sees key t when (!causal || t <= p) && (window == 0 || p - t < window) && t
// < L. `ahead` (1) and `wider` (0) move the causal and window bounds for the off-by-one mutants.
struct VisibleKeys {
  std::int64_t seq, lo, hi;
};
__device__ inline VisibleKeys visible_keys(const DeviceView& qsl, const DeviceView& seq_lens,
                                           std::int64_t num_seqs, std::int64_t token, bool causal,
                                           std::int64_t window, std::int64_t ahead = 1,
                                           std::int64_t wider = 0) {
  std::int64_t seq = 0;  // the sequence whose query range holds the token (query_start_loc is non-decreasing)
  while (seq + 1 < num_seqs && load_i32(qsl, qsl.offset + (seq + 1) * qsl.stride[0]) <= token) ++seq;
  const std::int64_t q_begin = load_i32(qsl, qsl.offset + seq * qsl.stride[0]);
  const std::int64_t q_end = load_i32(qsl, qsl.offset + (seq + 1) * qsl.stride[0]);
  const std::int64_t len = load_i32(seq_lens, seq_lens.offset + seq * seq_lens.stride[0]);
  const std::int64_t pos = len - (q_end - q_begin) + (token - q_begin);
  const std::int64_t hi = causal ? (pos + ahead < len ? pos + ahead : len) : len;
  const std::int64_t lo = window > 0 ? pos - window + 1 - wider : 0;
  return {seq, lo < 0 ? 0 : lo, hi};
}

}  // namespace driftcheck::gpu
