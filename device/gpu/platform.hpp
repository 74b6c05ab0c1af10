// The one mapping file between the HIP dialect the kernels are written in and CUDA. Kernels and launchers use
// the HIP names below and nothing else of either runtime; on AMD they are the real HIP API (hipcc), on NVIDIA
// they map to CUDA (nvcc). Debian's HIP-for-NVIDIA headers (HIP 5.2) do not compile against CUDA 13, hence
// this file.
#pragma once

// Host-only translation units (the backends' launch code, compiled by the C++ compiler) see only the runtime
// API; kernel sources (compiled by hipcc or nvcc) see the whole runtime.
#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)  // __HIP__: clang compiling HIP source
#if defined(__HIP__)
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>
#endif
#define DC_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#define DC_SHFL_DOWN(v, delta) __shfl_down((v), (delta))
#else
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include <cuda_runtime_api.h>
#endif

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
inline constexpr cudaError_t hipSuccess = cudaSuccess;
inline constexpr cudaMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr cudaMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr cudaMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
inline constexpr cudaError_t hipErrorInvalidValue = cudaErrorInvalidValue;
inline constexpr cudaError_t hipErrorNotReady = cudaErrorNotReady;
inline constexpr cudaError_t hipErrorOutOfMemory = cudaErrorMemoryAllocation;
inline constexpr unsigned hipHostMallocDefault = cudaHostAllocDefault;
inline constexpr cudaDeviceAttr hipDeviceAttributeWarpSize = cudaDevAttrWarpSize;

inline cudaError_t hipHostMalloc(void** p, size_t bytes, unsigned flags) {
  return cudaHostAlloc(p, bytes, flags);
}

#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemset cudaMemset
#define hipMemcpyAsync cudaMemcpyAsync
#define hipHostFree cudaFreeHost
#define hipStreamCreate cudaStreamCreate
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamQuery cudaStreamQuery
#define hipStreamSynchronize cudaStreamSynchronize
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceCount cudaGetDeviceCount
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#if defined(__CUDACC__)
// Full-mask shuffle within the executing warp; the width is the hardware warp (warpSize), never assumed 32.
#define DC_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define DC_SHFL_DOWN(v, delta) __shfl_down_sync(0xffffffffu, (v), (delta))
#endif
#endif
