// HIP kernels of driftcheck's GPU backends, written once for AMD (hipcc) and NVIDIA (nvcc through
// platform.hpp). Kernels read and write tensors through DeviceView (storage base, dtype, element offset,
// strides), so every layout a case exercises (row strides, misaligned bases, aliasing) reaches the kernel
// unchanged. The numeric helpers (decode/encode/round_bf16) are the same DC_HD functions the CPU side uses:
// one definition of each rounding. Reductions follow a ReducePlan (block_reduce.hpp) whose order is a
// function of the hardware warp size. Kernels are compiled without floating-point contraction (no fused
// multiply-add the source does not write), so a CPU twin with the same plan predicts them bit for bit.
//
// Each kernel takes a GpuBug: kNone for the backends, one deliberate deviation for a mutant.gpu.* backend
// (the bug classes of the CPU mutants, docs/BACKENDS.md). A bug is a kernel parameter, never a copied kernel.
#pragma once

#include <cstdint>

#include "block_reduce.hpp"
#include "driftcheck/reference/format.hpp"
#include "platform.hpp"

namespace driftcheck::gpu {

inline constexpr int kMaxDims = 4;

struct DeviceView {
  void* base = nullptr;  // storage base on the device
  DType dtype = DType::kF32;
  std::int64_t offset = 0;
  std::int64_t stride[kMaxDims] = {0, 0, 0, 0};
  std::int64_t storage_numel = 0;  // elements of the whole storage (an out-of-bounds mutant stays inside it)
};

enum class GpuBug : std::uint8_t {
  kNone,
  // rmsnorm
  kRowStrideIgnored,  // rows read at r * H instead of r * row_stride
  kResidualReread,    // second pass re-adds the residual after it was overwritten with z
  kEpsOutsideRsqrt,   // 1 / sqrt(mean) + eps
  kActAccumulation,   // sum of squares accumulated in the activation dtype
  kOobWrite,          // writes one element past each output row
  // dual / concat
  kBatchVariantBlock,   // dual: a 256-thread cub block from 2 tokens on (the launcher's plan)
  kWeightRoundedEarly,  // act(act(x * s) * w) where one rounding is declared
  kHalvesSwapped,       // the two halves written in the wrong order
  // attention
  kMaskedPTimesV,       // masked P (0) multiplied with V up to the end of the last page
  kPageConversion,      // block_size >= 64: page id used as a 16-token kernel block id
  kFp8FnFnuzSwapped,    // e4m3fn bytes decoded as e4m3fnuz and vice versa
  kNoMaxSubtraction,    // exp(s) without the running max
  kGqaModulo,           // kv head h % Hkv
  kCausalOffByOne,      // sees key p + 1
  kWindowOffByOne,      // window one key wider
  kSoftcapMissing,      // softcap not applied
  kSinkDropped,         // the sink never enters the denominator
  kTableStrideIgnored,  // block table row s read at s * max_blocks instead of s * row stride
};

struct RmsNormArgs {
  DeviceView x, w, residual, y;
  std::int64_t rows = 0, hidden = 0;
  float eps = 0;
  bool has_residual = false;
  ReducePlan plan;
  GpuBug bug = GpuBug::kNone;
};

struct DualArgs {
  DeviceView e, h, w_e, w_h, out;
  std::int64_t rows = 0, hidden = 0;
  float eps = 0;
  ReducePlan plan;
  GpuBug bug = GpuBug::kNone;
};

struct ConcatArgs {
  DeviceView a, b, out;
  std::int64_t rows = 0, width_a = 0, width_b = 0;
  GpuBug bug = GpuBug::kNone;
};

struct AttentionArgs {
  DeviceView q, k_cache, v_cache, block_table, seq_lens, query_start_loc, sinks, o, lse;
  std::int64_t num_tokens = 0, num_seqs = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  std::int64_t max_blocks = 0;  // block_table columns
  std::int64_t num_blocks = 0;  // cache blocks
  // The first block-table entry read outside [0, num_blocks): {1, sequence, column, entry}, written by the
  // thread that read it first (the kernel reads block 0 instead, and the host turns the record into an
  // error).
  std::int64_t* fault = nullptr;
  float scale = 0, softcap = 0, k_scale = 1, v_scale = 1;
  std::int64_t window = 0;
  bool causal = true;
  bool has_sinks = false;
  GpuBug bug = GpuBug::kNone;
};

// Threads per attention block, and so the plan of its logit reduction: head_dim <= 4 * kAttnThreads.
inline constexpr int kAttnThreads = 128;

// Launchers: asynchronous on `stream`; the caller waits and checks errors. The norm kernels launch
// args.plan.threads rounded up to whole 64-lane wavefronts (so whole warps on either platform).
hipError_t launch_rmsnorm(const RmsNormArgs& args, hipStream_t stream);
hipError_t launch_dual_rmsnorm_cat(const DualArgs& args, hipStream_t stream);
hipError_t launch_concat(const ConcatArgs& args, hipStream_t stream);
hipError_t launch_attention(const AttentionArgs& args, hipStream_t stream);

}  // namespace driftcheck::gpu
