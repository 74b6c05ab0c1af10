#include "device_access.hpp"
#include "reference_kernels.hpp"

namespace driftcheck::gpu {
namespace {

constexpr int kRefThreads = 256;  // whole warps of 32 or 64 lanes

// Warp-wide sum by an xor butterfly: every lane ends with the same value.
__device__ inline double warp_sum(double v) {
  for (int m = warpSize / 2; m > 0; m /= 2) v += DC_SHFL_XOR(v, m);
  return v;
}

__device__ inline void flag_nonfinite(const ReferenceArgs& a, double x) {
  if (!isfinite(x)) *a.nonfinite = 1;
}

// One row's q, held across the lanes of a warp: lane l holds dims l, l + warp, ...
struct RowQ {
  double q[kRefDimsPerLane];
};

// The logit of key t: q . k in double (lanes' sequential partial dots, then the butterfly), times
// scale * k_scale, soft-capped. Every lane returns it.
__device__ inline double logit(const ReferenceArgs& a, const RowQ& rq, const DeviceView& k,
                               std::int64_t index0) {
  double dot = 0;
  const int lane = threadIdx.x % warpSize;
  for (int j = 0; j < kRefDimsPerLane; ++j) {
    const std::int64_t d = lane + static_cast<std::int64_t>(j) * warpSize;
    if (d < a.head_dim) {
      const double kd = load_f64(k, index0 + d * k.stride[3]);
      flag_nonfinite(a, kd);
      dot += rq.q[j] * kd;
    }
  }
  double s = warp_sum(dot) * a.logit_scale;
  if (a.softcap > 0) s = a.softcap * tanh(s / a.softcap);
  return s;
}

__device__ inline std::int64_t key_at(const ReferenceArgs& a, const DeviceView& cache, std::int64_t seq,
                                      std::int64_t t, std::int64_t g) {
  const std::int64_t page = load_i32(a.block_table, a.block_table.offset + seq * a.block_table.stride[0] +
                                                        (t / a.block_size) * a.block_table.stride[1]);
  return cache.offset + page * cache.stride[0] + (t % a.block_size) * cache.stride[1] + g * cache.stride[2];
}

// Grid (token, q head, chunk): the softmax state of one chunk of the row's visible keys, in two passes over
// them (the chunk's max logit, then the sum of exp(s - max) and the exp-weighted sum of V rows), warps taking
// keys in turn and their states added in warp order.
__global__ void attention_partials_f64(ReferenceArgs a) {
  __shared__ double shared_max[kRefThreads / 32];
  __shared__ double shared_sum[kRefThreads / 32];
  extern __shared__ double shared_o[];  // [warps][head_dim]
  const std::int64_t token = blockIdx.x, head = blockIdx.y, chunk = blockIdx.z;
  const VisibleKeys keys = visible_keys(a.query_start_loc, a.seq_lens, a.num_seqs, token, a.causal, a.window);
  const std::int64_t begin = keys.lo + chunk * a.chunk;
  const std::int64_t end = begin + a.chunk < keys.hi ? begin + a.chunk : keys.hi;
  const std::int64_t g = head / (a.num_q_heads / a.num_kv_heads);
  const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize, warps = blockDim.x / warpSize;
  RowQ rq;
  for (int j = 0; j < kRefDimsPerLane; ++j) {
    const std::int64_t d = lane + static_cast<std::int64_t>(j) * warpSize;
    rq.q[j] =
        d < a.head_dim
            ? load_f64(a.q, a.q.offset + token * a.q.stride[0] + head * a.q.stride[1] + d * a.q.stride[2])
            : 0.0;
    flag_nonfinite(a, rq.q[j]);
  }
  double m = -INFINITY;
  for (std::int64_t t = begin + warp; t < end; t += warps) {
    const double s = logit(a, rq, a.k_cache, key_at(a, a.k_cache, keys.seq, t, g));
    m = s > m ? s : m;
  }
  if (lane == 0) shared_max[warp] = m;
  __syncthreads();
  for (int w = 0; w < warps; ++w) m = shared_max[w] > m ? shared_max[w] : m;
  double sum = 0, o[kRefDimsPerLane] = {};
  for (std::int64_t t = begin + warp; t < end; t += warps) {
    const double e = exp(logit(a, rq, a.k_cache, key_at(a, a.k_cache, keys.seq, t, g)) - m);
    sum += e;
    const std::int64_t v0 = key_at(a, a.v_cache, keys.seq, t, g);
    for (int j = 0; j < kRefDimsPerLane; ++j) {
      const std::int64_t d = lane + static_cast<std::int64_t>(j) * warpSize;
      if (d < a.head_dim) {
        const double vd = load_f64(a.v_cache, v0 + d * a.v_cache.stride[3]);
        flag_nonfinite(a, vd);
        o[j] += e * vd;
      }
    }
  }
  if (lane == 0) shared_sum[warp] = sum;
  for (int j = 0; j < kRefDimsPerLane; ++j) {
    const std::int64_t d = lane + static_cast<std::int64_t>(j) * warpSize;
    if (d < a.head_dim) shared_o[warp * a.head_dim + d] = o[j];
  }
  __syncthreads();
  double* out = a.partials + ((token * a.num_q_heads + head) * a.splits + chunk) * (a.head_dim + 2);
  for (std::int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    double acc = 0;
    for (int w = 0; w < warps; ++w) acc += shared_o[w * a.head_dim + d];
    out[d] = acc;
  }
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < warps; ++w) total += shared_sum[w];
    out[a.head_dim] = m;
    out[a.head_dim + 1] = total;
  }
}

// Grid (token, q head): the chunks' states merged in chunk order with the sink, rescaled to the row's max;
// o = v_scale * sum / total, lse = max + log(total). A row with no key and no sink gets o = 0, lse = -inf.
__global__ void attention_merge_f64(ReferenceArgs a) {
  const std::int64_t token = blockIdx.x, head = blockIdx.y;
  const std::int64_t row = token * a.num_q_heads + head;
  const double* part = a.partials + row * a.splits * (a.head_dim + 2);
  const std::int64_t stride = a.head_dim + 2;
  const double sink = a.has_sinks ? load_f64(a.sinks, a.sinks.offset + head * a.sinks.stride[0]) : -INFINITY;
  if (a.has_sinks && threadIdx.x == 0) flag_nonfinite(a, sink);
  double m = sink;
  for (std::int64_t i = 0; i < a.splits; ++i)
    if (part[i * stride + a.head_dim + 1] > 0 && part[i * stride + a.head_dim] > m)
      m = part[i * stride + a.head_dim];
  double total = a.has_sinks ? exp(sink - m) : 0.0;
  for (std::int64_t i = 0; i < a.splits; ++i)
    if (part[i * stride + a.head_dim + 1] > 0)
      total += part[i * stride + a.head_dim + 1] * exp(part[i * stride + a.head_dim] - m);
  for (std::int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    double acc = 0;
    for (std::int64_t i = 0; i < a.splits; ++i)
      if (part[i * stride + a.head_dim + 1] > 0)
        acc += part[i * stride + d] * exp(part[i * stride + a.head_dim] - m);
    a.o[row * a.head_dim + d] = total > 0 ? acc / total * a.v_scale : 0.0;
  }
  if (threadIdx.x == 0) a.lse[row] = total > 0 ? m + log(total) : -INFINITY;
}

}  // namespace

hipError_t launch_reference_attention(const ReferenceArgs& a, hipStream_t stream) {
  if (a.num_tokens == 0) return hipSuccess;
  if (a.head_dim > kRefMaxHeadDim) return hipErrorInvalidValue;
  const dim3 rows(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.num_q_heads));
  const auto shared =
      static_cast<std::size_t>(kRefThreads / 32) * static_cast<std::size_t>(a.head_dim) * sizeof(double);
  hipLaunchKernelGGL(attention_partials_f64, dim3(rows.x, rows.y, static_cast<unsigned>(a.splits)),
                     dim3(kRefThreads), shared, stream, a);
  if (const hipError_t e = hipGetLastError(); e != hipSuccess) return e;
  hipLaunchKernelGGL(attention_merge_f64, rows, dim3(128), 0, stream, a);
  return hipGetLastError();
}

}  // namespace driftcheck::gpu
