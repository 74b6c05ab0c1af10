#include "device_access.hpp"
#include "kernels.hpp"

namespace driftcheck::gpu {
namespace {

constexpr int kMaxDimsPerThread = 4;  // attention: head_dim <= kMaxDimsPerThread * kAttnThreads

// fp8 bytes as the fn/fnuz-swapping mutant reads them.
__device__ inline DType misread_fp8(DType t) {
  if (t == DType::kF8E4M3FN) return DType::kF8E4M3FNUZ;
  if (t == DType::kF8E4M3FNUZ) return DType::kF8E4M3FN;
  return t;
}

__device__ inline float weight_at(const DeviceView& w, std::int64_t j) {
  return load(w, w.offset + j * w.stride[0]);
}

// 1 / sqrt(mean + eps) with IEEE division and square root (nvcc's and hipcc's defaults): vLLM calls rsqrtf,
// whose hardware approximation no CPU twin can reproduce; the twins compute 1.0f / std::sqrt, and so does
// this port, so that they predict it bit for bit (docs/gpu/README.md, "GPU kernels and their twins").
__device__ inline float inverse_rms(float sum_squares, std::int64_t hidden, float eps, GpuBug bug) {
  const float mean = sum_squares / static_cast<float>(hidden);
  return bug == GpuBug::kEpsOutsideRsqrt ? 1.f / sqrtf(mean) + eps : 1.f / sqrtf(mean + eps);
}

// vLLM's rms_norm / fused_add_rms_norm (csrc/layernorm_kernels.cu): fp32 block reduction in the plan's
// order (the twin's, device/gpu/norm_plan.hpp: threads from H and the token count, chunk ownership, cub's
// tree); with a residual the sum z = x + r is rounded to the activation dtype, stored back into the residual,
// and the variance is taken from the rounded z; y = act(act(z * s) * w): two roundings. The port reads and
// writes element by element: where vLLM's vector accesses fault (misaligned rows), the host reports the
// fault before launching (gpu_backends.cpp), as the twin does.
__global__ void rmsnorm_kernel(RmsNormArgs a) {
  __shared__ float slots[kMaxBlockWarps];
  const std::int64_t row = blockIdx.x;
  const DType act = a.y.dtype;
  const std::int64_t x_row = a.bug == GpuBug::kRowStrideIgnored ? a.x.offset + row * a.hidden * a.x.stride[1]
                                                                : a.x.offset + row * a.x.stride[0];
  const auto x_at = [&](std::int64_t j) { return load(a.x, x_row + j * a.x.stride[1]); };
  const float ss = thread_sum_squares(a.plan, threadIdx.x, a.hidden, [&](std::int64_t j) {
    float v = x_at(j);
    if (a.has_residual) {
      v = round_act(act, v + load(a.residual, at2(a.residual, row, j)));
      store(a.residual, at2(a.residual, row, j), v);
    }
    return v;
  });
  // block_total's barriers also make every thread's residual stores visible to the second pass.
  const float s = inverse_rms(block_total(a.plan, ss, slots), a.hidden, a.eps, a.bug);
  for (std::int64_t j = threadIdx.x; j < a.hidden; j += blockDim.x) {
    float v = a.has_residual ? load(a.residual, at2(a.residual, row, j)) : x_at(j);
    if (a.has_residual && a.bug == GpuBug::kResidualReread) v = round_act(act, x_at(j) + v);  // x + z
    const std::int64_t at = at2(a.y, row, j);
    const float y = round_act(act, v * s) * weight_at(a.w, j);
    store(a.y, at, y);
    if (a.bug == GpuBug::kOobWrite && j == a.hidden - 1 && at + a.y.stride[1] < a.y.storage_numel)
      store(a.y, at + a.y.stride[1], y);
  }
}

// The fused layer-0 kernel (an EAGLE3 drafter's input: [norm(e), norm(h)]): grid (rows, 2), half 0 normalises
// e with w_e into columns [0, H), half 1 normalises h with w_h into [H, 2H); fp32 math, weight multiplied in
// fp32, one rounding. The plan is cpu.dual.fused's model of tl.sum (num_warps warps from next_pow2(H),
// 16-byte chunks per lane, descending lane trees, a tree over the warp totals).
__global__ void dual_rmsnorm_cat_kernel(DualArgs a) {
  __shared__ float slots[kMaxBlockWarps];
  const std::int64_t row = blockIdx.x;
  const bool second = blockIdx.y == 1;
  const DeviceView& x = second ? a.h : a.e;
  const DeviceView& w = second ? a.w_h : a.w_e;
  const DType act = a.out.dtype;
  const float ss = thread_sum_squares(a.plan, threadIdx.x, a.hidden,
                                      [&](std::int64_t j) { return load(x, at2(x, row, j)); });
  const float s = inverse_rms(block_total(a.plan, ss, slots), a.hidden, a.eps, a.bug);
  const std::int64_t col0 = second != (a.bug == GpuBug::kHalvesSwapped) ? a.hidden : 0;
  for (std::int64_t j = threadIdx.x; j < a.hidden; j += blockDim.x) {
    const float v = load(x, at2(x, row, j));
    const float wj = weight_at(w, j);
    store(a.out, at2(a.out, row, col0 + j),
          a.bug == GpuBug::kWeightRoundedEarly ? round_act(act, v * s) * wj : v * s * wj);
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
  const bool swapped = a.bug == GpuBug::kHalvesSwapped;
  const DeviceView& first = swapped ? a.b : a.a;
  const DeviceView& second = swapped ? a.a : a.b;
  const std::int64_t width_first = swapped ? a.width_b : a.width_a;
  for (std::int64_t j = threadIdx.x; j < a.width_a + a.width_b; j += blockDim.x) {
    if (j < width_first)
      copy_element(first, at2(first, row, j), a.out, at2(a.out, row, j));
    else
      copy_element(second, at2(second, row, j - width_first), a.out, at2(a.out, row, j));
  }
}

// Storage index of element d of logical key t of sequence `seq`, kv head g, through the block table.
__device__ inline std::int64_t cache_at(const AttentionArgs& a, const DeviceView& cache, std::int64_t seq,
                                        std::int64_t t, std::int64_t g, std::int64_t d) {
  const DeviceView& tb = a.block_table;
  const std::int64_t row =
      a.bug == GpuBug::kTableStrideIgnored ? seq * a.max_blocks * tb.stride[1] : seq * tb.stride[0];
  std::int64_t page = load_i32(tb, tb.offset + row + (t / a.block_size) * tb.stride[1]);
  if (page < 0 || page >= a.num_blocks) {  // never an out-of-bounds read: the host reports it
    auto* flag = reinterpret_cast<unsigned long long*>(a.fault);
    if (atomicCAS(flag, 0ull, 1ull) == 0ull)
      a.fault[1] = seq, a.fault[2] = t / a.block_size, a.fault[3] = page;
    page = 0;
  }
  std::int64_t slot = t % a.block_size;
  if (a.bug == GpuBug::kPageConversion && a.block_size >= 64) {  // vllm#24486: 16-token kernel blocks
    const std::int64_t flat = page * 16 + t % 16;
    page = flat / a.block_size;
    slot = flat % a.block_size;
  }
  return at4(cache, page, slot, g, d);
}

// Straightforward paged attention: one block per (query token, query head), keys visited in order, online
// softmax in fp32 with the logit of one key reduced over the block (plan: kAttnThreads threads, descending
// lane tree, warp totals in order); only visible keys are visited, so unused (poisoned) cache slots are never
// read. Sinks start the running state at (m = sink, l = 1). One rounding of the output.
__global__ void attention_kernel(AttentionArgs a) {
  __shared__ float slots[kMaxBlockWarps];
  constexpr ReducePlan plan{kAttnThreads, 1, false, false, DType::kF32};
  const std::int64_t token = blockIdx.x;
  const std::int64_t head = blockIdx.y;
  const VisibleKeys keys =
      visible_keys(a.query_start_loc, a.seq_lens, a.num_seqs, token, a.causal, a.window,
                   a.bug == GpuBug::kCausalOffByOne ? 2 : 1, a.bug == GpuBug::kWindowOffByOne ? 1 : 0);
  const std::int64_t seq = keys.seq, lo = keys.lo, hi = keys.hi;
  // The masked-P-times-V mutant walks on to the end of the page holding the last key, P = 0 there.
  const std::int64_t end =
      a.bug == GpuBug::kMaskedPTimesV ? (hi + a.block_size - 1) / a.block_size * a.block_size : hi;
  const std::int64_t kv_head =
      a.bug == GpuBug::kGqaModulo ? head % a.num_kv_heads : head / (a.num_q_heads / a.num_kv_heads);
  DeviceView k_cache = a.k_cache, v_cache = a.v_cache;
  if (a.bug == GpuBug::kFp8FnFnuzSwapped) k_cache.dtype = v_cache.dtype = misread_fp8(k_cache.dtype);

  float q[kMaxDimsPerThread];
  float acc[kMaxDimsPerThread];
  for (int i = 0; i < kMaxDimsPerThread; ++i) {
    const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(i) * blockDim.x;
    q[i] = d < a.head_dim ? load(a.q, at3(a.q, token, head, d)) : 0.f;
    acc[i] = 0.f;
  }
  const bool sink = a.has_sinks && a.bug != GpuBug::kSinkDropped;
  float m = sink ? load(a.sinks, a.sinks.offset + head * a.sinks.stride[0]) : -INFINITY;
  float l = sink ? 1.f : 0.f;
  for (std::int64_t t = lo; t < end; ++t) {
    float s = -INFINITY;  // a masked key (the mutant's page tail): selected away, never a dot product
    if (t < hi) {
      float part = 0.f;
      for (int i = 0; i < kMaxDimsPerThread; ++i) {
        const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(i) * blockDim.x;
        if (d < a.head_dim) part += q[i] * load(k_cache, cache_at(a, k_cache, seq, t, kv_head, d));
      }
      s = block_total(plan, part, slots) * a.k_scale * a.scale;
      if (a.softcap > 0.f && a.bug != GpuBug::kSoftcapMissing) s = a.softcap * tanhf(s / a.softcap);
    }
    const float m_new = a.bug == GpuBug::kNoMaxSubtraction ? 0.f : fmaxf(m, s);
    const float alpha = expf(m - m_new);  // exp(-inf) = 0 on the first key without sinks
    const float p = expf(s - m_new);
    l = l * alpha + p;
    for (int i = 0; i < kMaxDimsPerThread; ++i) {
      const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(i) * blockDim.x;
      if (d < a.head_dim)
        acc[i] = acc[i] * alpha + p * load(v_cache, cache_at(a, v_cache, seq, t, kv_head, d));
    }
    m = m_new;
  }
  // A row with no key and no sink (l exactly 0): o = 0, lse = -inf. A NaN logit makes l NaN (fmaxf drops it
  // from the max, exp does not): that row's o and lse are NaN, as the reference's are, never the empty row's
  // 0 / -inf.
  const bool empty = l == 0.f;
  const float inv = empty ? 0.f : a.v_scale / l;
  for (int i = 0; i < kMaxDimsPerThread; ++i) {
    const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(i) * blockDim.x;
    if (d < a.head_dim) store(a.o, at3(a.o, token, head, d), acc[i] * inv);
  }
  if (threadIdx.x == 0) store(a.lse, at2(a.lse, token, head), empty ? -INFINITY : m + logf(l));
}

// Whole 64-lane wavefronts (two 32-lane warps on NVIDIA): every lane of a warp takes part in the shuffles.
unsigned norm_block(const ReducePlan& plan) {
  const int threads = plan.threads < 1 ? 1 : plan.threads;
  return static_cast<unsigned>((threads + 63) / 64 * 64);
}

}  // namespace

hipError_t launch_rmsnorm(const RmsNormArgs& args, hipStream_t stream) {
  if (args.rows == 0) return hipSuccess;
  if (args.plan.threads > kMaxNormThreads) return hipErrorInvalidValue;
  hipLaunchKernelGGL(rmsnorm_kernel, dim3(static_cast<unsigned>(args.rows)), dim3(norm_block(args.plan)), 0,
                     stream, args);
  return hipGetLastError();
}

hipError_t launch_dual_rmsnorm_cat(const DualArgs& args, hipStream_t stream) {
  if (args.rows == 0) return hipSuccess;
  if (args.plan.threads > kMaxNormThreads) return hipErrorInvalidValue;
  hipLaunchKernelGGL(dual_rmsnorm_cat_kernel, dim3(static_cast<unsigned>(args.rows), 2),
                     dim3(norm_block(args.plan)), 0, stream, args);
  return hipGetLastError();
}

hipError_t launch_concat(const ConcatArgs& args, hipStream_t stream) {
  if (args.rows == 0) return hipSuccess;
  hipLaunchKernelGGL(concat_kernel, dim3(static_cast<unsigned>(args.rows)), dim3(256), 0, stream, args);
  return hipGetLastError();
}

hipError_t launch_attention(const AttentionArgs& args, hipStream_t stream) {
  if (args.num_tokens == 0) return hipSuccess;
  hipLaunchKernelGGL(attention_kernel,
                     dim3(static_cast<unsigned>(args.num_tokens), static_cast<unsigned>(args.num_q_heads)),
                     dim3(kAttnThreads), 0, stream, args);
  return hipGetLastError();
}

}  // namespace driftcheck::gpu
