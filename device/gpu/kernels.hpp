// HIP kernels of driftcheck's GPU backends, written once for AMD (hipcc) and NVIDIA (nvcc through
// platform.hpp). Kernels read and write tensors through DeviceView (storage base, dtype, element offset,
// strides), so every layout a case exercises (row strides, misaligned bases, aliasing) reaches the kernel
// unchanged. The numeric helpers (decode/encode/round_bf16) are the same DC_HD functions the CPU side uses:
// one definition of each rounding. No kernel assumes a warp of 32: reductions use warpSize and a shared slot
// per warp of the largest block.
#pragma once

#include <cstdint>

#include "driftcheck/reference/format.hpp"
#include "platform.hpp"

namespace driftcheck::gpu {

inline constexpr int kMaxDims = 4;

struct DeviceView {
  void* base = nullptr;  // storage base on the device
  DType dtype = DType::kF32;
  std::int64_t offset = 0;
  std::int64_t stride[kMaxDims] = {0, 0, 0, 0};
};

struct RmsNormArgs {
  DeviceView x, w, residual, y;
  std::int64_t rows = 0, hidden = 0;
  float eps = 0;
  bool one_plus_weight = false;
  bool has_residual = false;
};

struct DualArgs {
  DeviceView e, h, w_e, w_h, out;
  std::int64_t rows = 0, hidden = 0;
  float eps = 0;
  bool one_plus_weight = false;
};

struct ConcatArgs {
  DeviceView a, b, out;
  std::int64_t rows = 0, width_a = 0, width_b = 0;
};

struct AttentionArgs {
  DeviceView q, k_cache, v_cache, block_table, seq_lens, query_start_loc, sinks, o, lse;
  std::int64_t num_tokens = 0, num_seqs = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 0, softcap = 0, k_scale = 1, v_scale = 1;
  std::int64_t window = 0;
  bool causal = true;
  bool has_sinks = false;
};

// Launchers (asynchronous on the default stream; the caller synchronises and checks errors).
hipError_t launch_rmsnorm(const RmsNormArgs& args);
hipError_t launch_dual_rmsnorm_cat(const DualArgs& args);
hipError_t launch_concat(const ConcatArgs& args);
hipError_t launch_attention(const AttentionArgs& args);

}  // namespace driftcheck::gpu
