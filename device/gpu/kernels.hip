#include "kernels.hpp"

namespace driftcheck::gpu {
namespace {

constexpr int kBlock = 256;             // threads per block: a multiple of both 32 and 64
constexpr int kMaxWarps = kBlock / 32;  // shared slots for the smallest warp size
constexpr int kMaxDimsPerThread = 4;    // attention head_dim <= 4 * kAttnBlock
constexpr int kAttnBlock = 128;

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

// Sum over the block, the same value returned to every thread: lanes reduce with shuffles over the hardware
// warp (32 or 64 lanes), then every thread adds the per-warp partials in warp order. The order is fixed for a
// given warp size, so runs are deterministic; it differs between warp sizes, which the oracle's reduction
// term covers.
__device__ inline float block_sum(float v, float* slots) {
  for (int m = warpSize / 2; m > 0; m /= 2) v += DC_SHFL_XOR(v, m);
  const int warp = threadIdx.x / warpSize;
  const int warps = (blockDim.x + warpSize - 1) / warpSize;
  __syncthreads();  // slots may still be read from the previous call
  if (threadIdx.x % warpSize == 0) slots[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < warps; ++i) total += slots[i];
  return total;
}

__device__ inline float weight_at(const DeviceView& w, std::int64_t j, bool one_plus) {
  const float wj = load(w, w.offset + j * w.stride[0]);
  return one_plus ? 1.f + wj : wj;
}

// vLLM's rms_norm / fused_add_rms_norm (csrc/layernorm_kernels.cu): fp32 block reduction; with a residual the
// sum z = x + r is rounded to the activation dtype, stored back into the residual, and the variance is taken
// from the rounded z; y = act(act(z * s) * w): two roundings.
__global__ void rmsnorm_kernel(RmsNormArgs a) {
  __shared__ float slots[kMaxWarps];
  const std::int64_t row = blockIdx.x;
  const DType act = a.y.dtype;
  float ss = 0.f;
  for (std::int64_t j = threadIdx.x; j < a.hidden; j += blockDim.x) {
    float v = load(a.x, at2(a.x, row, j));
    if (a.has_residual) {
      v = round_act(act, v + load(a.residual, at2(a.residual, row, j)));
      store(a.residual, at2(a.residual, row, j), v);
    }
    ss += v * v;
  }
  const float s = rsqrtf(block_sum(ss, slots) / static_cast<float>(a.hidden) + a.eps);
  for (std::int64_t j = threadIdx.x; j < a.hidden; j += blockDim.x) {
    const float v = a.has_residual ? load(a.residual, at2(a.residual, row, j)) : load(a.x, at2(a.x, row, j));
    store(a.y, at2(a.y, row, j), round_act(act, v * s) * weight_at(a.w, j, a.one_plus_weight));
  }
}

// The fused layer-0 kernel of DOMAIN.md section 1: grid (rows, 2), half 0 normalises e with w_e into columns
// [0, H), half 1 normalises h with w_h into [H, 2H); fp32 math, weight multiplied in fp32, one rounding.
__global__ void dual_rmsnorm_cat_kernel(DualArgs a) {
  __shared__ float slots[kMaxWarps];
  const std::int64_t row = blockIdx.x;
  const bool second = blockIdx.y == 1;
  const DeviceView& x = second ? a.h : a.e;
  const DeviceView& w = second ? a.w_h : a.w_e;
  float ss = 0.f;
  for (std::int64_t j = threadIdx.x; j < a.hidden; j += blockDim.x) {
    const float v = load(x, at2(x, row, j));
    ss += v * v;
  }
  const float s = rsqrtf(block_sum(ss, slots) / static_cast<float>(a.hidden) + a.eps);
  const std::int64_t col0 = second ? a.hidden : 0;
  for (std::int64_t j = threadIdx.x; j < a.hidden; j += blockDim.x) {
    const float v = load(x, at2(x, row, j));
    store(a.out, at2(a.out, row, col0 + j), v * s * weight_at(w, j, a.one_plus_weight));
  }
}

// Data movement: copies encodings, never values, so the result is bit-exact whatever the dtype.
__device__ inline void copy_element(const DeviceView& src, std::int64_t si, const DeviceView& dst,
                                    std::int64_t di) {
  switch (dtype_size(src.dtype)) {
    case 8:
      static_cast<std::uint64_t*>(dst.base)[di] = static_cast<const std::uint64_t*>(src.base)[si];
      return;
    case 4:
      static_cast<std::uint32_t*>(dst.base)[di] = static_cast<const std::uint32_t*>(src.base)[si];
      return;
    case 2:
      static_cast<std::uint16_t*>(dst.base)[di] = static_cast<const std::uint16_t*>(src.base)[si];
      return;
    default:
      static_cast<std::uint8_t*>(dst.base)[di] = static_cast<const std::uint8_t*>(src.base)[si];
      return;
  }
}

__global__ void concat_kernel(ConcatArgs a) {
  const std::int64_t row = blockIdx.x;
  for (std::int64_t j = threadIdx.x; j < a.width_a + a.width_b; j += blockDim.x) {
    if (j < a.width_a)
      copy_element(a.a, at2(a.a, row, j), a.out, at2(a.out, row, j));
    else
      copy_element(a.b, at2(a.b, row, j - a.width_a), a.out, at2(a.out, row, j));
  }
}

// Straightforward paged attention: one block per (query token, query head), keys visited in order, online
// softmax in fp32 with the logits of one key reduced over the block; only valid keys are visited, so unused
// (poisoned) cache slots are never read. Sinks start the running state at (m = sink, l = 1). One rounding of
// the output.
__global__ void attention_kernel(AttentionArgs a) {
  __shared__ float slots[kAttnBlock / 32];
  const std::int64_t token = blockIdx.x;
  const std::int64_t head = blockIdx.y;
  std::int64_t seq =
      0;  // the sequence whose query range holds this token (query_start_loc is non-decreasing)
  while (seq + 1 < a.num_seqs &&
         load_i32(a.query_start_loc, a.query_start_loc.offset + (seq + 1) * a.query_start_loc.stride[0]) <=
             token)
    ++seq;
  const std::int64_t q_begin =
      load_i32(a.query_start_loc, a.query_start_loc.offset + seq * a.query_start_loc.stride[0]);
  const std::int64_t q_end =
      load_i32(a.query_start_loc, a.query_start_loc.offset + (seq + 1) * a.query_start_loc.stride[0]);
  const std::int64_t seq_len = load_i32(a.seq_lens, a.seq_lens.offset + seq * a.seq_lens.stride[0]);
  const std::int64_t pos = seq_len - (q_end - q_begin) + (token - q_begin);
  std::int64_t hi = a.causal ? (pos + 1 < seq_len ? pos + 1 : seq_len) : seq_len;
  std::int64_t lo = a.window > 0 ? pos - a.window + 1 : 0;
  if (lo < 0) lo = 0;
  const std::int64_t kv_head = head / (a.num_q_heads / a.num_kv_heads);

  float q[kMaxDimsPerThread];
  float acc[kMaxDimsPerThread];
  for (int i = 0; i < kMaxDimsPerThread; ++i) {
    const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(i) * blockDim.x;
    q[i] = d < a.head_dim ? load(a.q, at3(a.q, token, head, d)) : 0.f;
    acc[i] = 0.f;
  }
  float m = a.has_sinks ? load(a.sinks, a.sinks.offset + head * a.sinks.stride[0]) : -INFINITY;
  float l = a.has_sinks ? 1.f : 0.f;
  for (std::int64_t t = lo; t < hi; ++t) {
    const std::int64_t block = load_i32(a.block_table, at2(a.block_table, seq, t / a.block_size));
    const std::int64_t slot = t % a.block_size;
    float part = 0.f;
    for (int i = 0; i < kMaxDimsPerThread; ++i) {
      const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(i) * blockDim.x;
      if (d < a.head_dim) part += q[i] * load(a.k_cache, at4(a.k_cache, block, slot, kv_head, d));
    }
    float s = block_sum(part, slots) * a.k_scale * a.scale;
    if (a.softcap > 0.f) s = a.softcap * tanhf(s / a.softcap);
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new);  // exp(-inf) = 0 on the first key without sinks
    const float p = expf(s - m_new);
    l = l * alpha + p;
    for (int i = 0; i < kMaxDimsPerThread; ++i) {
      const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(i) * blockDim.x;
      if (d < a.head_dim)
        acc[i] = acc[i] * alpha + p * load(a.v_cache, at4(a.v_cache, block, slot, kv_head, d));
    }
    m = m_new;
  }
  const float inv = l > 0.f ? a.v_scale / l : 0.f;  // a row with no key and no sink: o = 0, lse = -inf
  for (int i = 0; i < kMaxDimsPerThread; ++i) {
    const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(i) * blockDim.x;
    if (d < a.head_dim) store(a.o, at3(a.o, token, head, d), acc[i] * inv);
  }
  if (threadIdx.x == 0) store(a.lse, at2(a.lse, token, head), l > 0.f ? m + logf(l) : -INFINITY);
}

}  // namespace

hipError_t launch_rmsnorm(const RmsNormArgs& args) {
  if (args.rows == 0) return hipSuccess;
  hipLaunchKernelGGL(rmsnorm_kernel, dim3(static_cast<unsigned>(args.rows)), dim3(kBlock), 0, 0, args);
  return hipGetLastError();
}

hipError_t launch_dual_rmsnorm_cat(const DualArgs& args) {
  if (args.rows == 0) return hipSuccess;
  hipLaunchKernelGGL(dual_rmsnorm_cat_kernel, dim3(static_cast<unsigned>(args.rows), 2), dim3(kBlock), 0, 0,
                     args);
  return hipGetLastError();
}

hipError_t launch_concat(const ConcatArgs& args) {
  if (args.rows == 0) return hipSuccess;
  hipLaunchKernelGGL(concat_kernel, dim3(static_cast<unsigned>(args.rows)), dim3(kBlock), 0, 0, args);
  return hipGetLastError();
}

hipError_t launch_attention(const AttentionArgs& args) {
  if (args.num_tokens == 0) return hipSuccess;
  hipLaunchKernelGGL(attention_kernel,
                     dim3(static_cast<unsigned>(args.num_tokens), static_cast<unsigned>(args.num_q_heads)),
                     dim3(kAttnBlock), 0, 0, args);
  return hipGetLastError();
}

}  // namespace driftcheck::gpu
