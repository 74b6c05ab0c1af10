// An RMSNorm GPU kernel as a driftcheck plugin that takes device pointers (DC_PLUGIN_DEVICE_MEMORY,
// docs/PLUGIN.md): driftcheck uploads every storage whole, calls run() with device pointers, synchronises,
// checks for a device error and downloads every storage back. One HIP source for NVIDIA (nvcc) and AMD
// (hipcc). One block per row, fp32 sum of squares reduced in shared memory (no warp-size assumption), one
// rounding to the output format; bf16 and fp32 activations, any row stride and offset, y may alias x (each
// thread reads an element before it writes it).
//
// plugin_config = "planted_bug=stride_ignored" reads rows as if packed, as examples/plugins/rmsnorm_plugin.c.
#include <cstdio>
#include <cstring>

#include "driftcheck/plugin.h"

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define DEVICE_API(name) hip##name
#else
#include <cuda_runtime.h>
#define DEVICE_API(name) cuda##name
#endif

namespace {

constexpr int kThreads = 256;  // a power of two: the tree reduction halves it

struct View {
  char* base;
  int32_t dtype;
  int64_t offset, row_stride, col_stride;
};

View view_of(const dc_case* c, const dc_tensor* t, bool rows_packed) {
  const int64_t col_stride = t->ndim > 1 ? t->strides[1] : t->strides[0];
  const int64_t row_stride = t->ndim > 1 ? (rows_packed ? t->shape[1] : t->strides[0]) : 0;
  return {static_cast<char*>(c->storages[t->storage].data), t->dtype, t->offset, row_stride, col_stride};
}

__device__ float load(const View& v, int64_t row, int64_t col) {
  const int64_t at = v.offset + row * v.row_stride + col * v.col_stride;
  if (v.dtype == DC_F32) return reinterpret_cast<const float*>(v.base)[at];
  const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(v.base)[at]) << 16;
  return __uint_as_float(bits);  // bf16 is the top half of an fp32
}

// Round to nearest even into the view's format.
__device__ void store(const View& v, int64_t row, int64_t col, float x) {
  const int64_t at = v.offset + row * v.row_stride + col * v.col_stride;
  if (v.dtype == DC_F32) {
    reinterpret_cast<float*>(v.base)[at] = x;
    return;
  }
  uint32_t u = __float_as_uint(x);
  u = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u + 0x7fffu + ((u >> 16) & 1u);
  reinterpret_cast<uint16_t*>(v.base)[at] = static_cast<uint16_t>(u >> 16);
}

__global__ void rmsnorm_rows(View x, View w, View y, int64_t hidden, float eps, int one_plus) {
  __shared__ float partial[kThreads];
  const int64_t row = blockIdx.x;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float v = load(x, row, j);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float scale = 1.0f / sqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float wj = load(w, 0, j);
    store(y, row, j, load(x, row, j) * scale * (one_plus ? 1.0f + wj : wj));
  }
}

struct Instance {
  bool stride_ignored = false;
};

void* create(const char* config, char* error, size_t error_size) {
  auto* self = new Instance;
  if (std::strcmp(config, "planted_bug=stride_ignored") == 0) {
    self->stride_ignored = true;
  } else if (config[0] != '\0') {
    std::snprintf(error, error_size, "unknown plugin_config '%s' (known: planted_bug=stride_ignored)",
                  config);
    delete self;
    return nullptr;
  }
  return self;
}

void destroy(void* self) {
  delete static_cast<Instance*>(self);
}

int available(void*, char* reason, size_t reason_size) {
  int count = 0;
  const auto e = DEVICE_API(GetDeviceCount)(&count);
  if (e == DEVICE_API(Success) && count > 0) return 1;
  std::snprintf(reason, reason_size, "no GPU: %s",
                e == DEVICE_API(Success) ? "no device found" : DEVICE_API(GetErrorString)(e));
  return 0;
}

int supports(void*, const dc_case* c, char* reason, size_t reason_size) {
  const dc_tensor* x = dc_find_tensor(c, "x");
  if (c->params.residual) {
    std::snprintf(reason, reason_size, "fused residual add: this example kernel has none");
    return 0;
  }
  if (x->dtype != DC_BF16 && x->dtype != DC_F32) {
    std::snprintf(reason, reason_size, "activation dtype %d: this example kernel reads bf16 and fp32 only",
                  x->dtype);
    return 0;
  }
  return 1;
}

int run(void* self, const dc_case* c, char* error, size_t error_size) {
  const dc_tensor* x = dc_find_tensor(c, "x");
  const bool packed = static_cast<Instance*>(self)->stride_ignored;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (rows > 0) {
    rmsnorm_rows<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<DEVICE_API(Stream_t)>(c->stream)>>>(
        view_of(c, x, packed), view_of(c, dc_find_tensor(c, "w"), false),
        view_of(c, dc_find_tensor(c, "y"), false), hidden, static_cast<float>(c->params.eps),
        c->params.weight_mode);
  }
  const auto e = DEVICE_API(GetLastError)();
  if (e == DEVICE_API(Success)) return 0;
  std::snprintf(error, error_size, "launch: %s", DEVICE_API(GetErrorString)(e));
  return 1;
}

const dc_plugin kPlugin = {
    DC_PLUGIN_ABI_VERSION,
    sizeof(dc_plugin),
    "example_rmsnorm_device",
    "example HIP plugin on device memory: RMSNorm, one block per row, fp32 tree reduction "
    "(examples/plugins/rmsnorm_device_plugin.hip)",
    DC_RMSNORM,
    DC_PLUGIN_DEVICE_MEMORY,
    {1, 0, 0, 0, 1, 1, 1},
    create,
    destroy,
    available,
    supports,
    run,
    {0, 0, DC_NEW_KV_CACHE, 0}, /* numerics2: the terms of attention kernels */
    {0, 0, 0, {0}, 0},          /* query_supports: attention only */
    {0, 0, 0, 0}, /* numerics3: no reduction shape declared (the worst case, a sequential sum) */
};

}  // namespace

extern "C" DC_PLUGIN_EXPORT const dc_plugin* driftcheck_plugin(void) {
  return &kPlugin;
}
