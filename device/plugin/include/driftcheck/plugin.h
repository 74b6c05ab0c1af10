/* driftcheck/plugin.h: the C ABI of driftcheck kernel plugins, ABI version 2 (C99 and C++; docs/PLUGIN.md).
 *
 * A plugin is a shared library that puts a kernel written in C, C++, CUDA or HIP in front of driftcheck
 * without a separate process: driftcheck dlopen()s it, asks it whether it supports each case (metadata only),
 * and calls it on the case's storages, each handed over whole (guard bands, row padding, poisoned KV slots,
 * aliasing between views), so the oracle's guard-band and input-modification checks apply to it as to a
 * built-in backend.
 *
 * The library exports one function, looked up by name:
 *
 *     const dc_plugin* driftcheck_plugin(void);
 *
 * returning a pointer to a static dc_plugin that stays valid until the library is unloaded. driftcheck reads
 * abi_version and struct_size first and refuses a plugin built for an ABI version it does not know (one-line
 * error, exit 2). A library holds one kernel of one op (dc_plugin.op); a second op is a second library.
 *
 * Versions: version 2 appended numerics2 and query_supports to dc_plugin, version 3 numerics3; a plugin built
 * against an earlier header (whose dc_plugin ends at run, or at query_supports) still loads, with the later
 * fields' zero defaults, which mean what its version meant. A plugin source written for an earlier version
 * compiles against this header unchanged: its positional initialiser leaves the appended fields zero.
 *
 * Memory: by default run() receives host pointers. A plugin that sets DC_PLUGIN_DEVICE_MEMORY in flags
 * receives device pointers instead (CUDA on an NVIDIA build of driftcheck, HIP on AMD): driftcheck allocates
 * every storage whole on the device, uploads it, calls run() with dc_case.stream set to the stream to launch
 * on, synchronises, checks for a device error and downloads every storage back. Such a plugin is unavailable
 * (with that reason) in a driftcheck built without GPU support.
 *
 * Faults: a non-zero return of run() is an `error` verdict carrying the plugin's message; a declined case
 * (supports() returning 0) is `unsupported` with its reason, never a pass. A plugin runs inside the
 * driftcheck process: a crash in it takes the process down, unless the backend is run isolated (`driftcheck
 * fuzz --isolate ext.NAME`), which serves it from a child process and turns a crash into a `crash` verdict.
 *
 * Threads: without DC_PLUGIN_THREAD_SAFE, driftcheck never calls one instance from two threads at once.
 */
#ifndef DRIFTCHECK_PLUGIN_H
#define DRIFTCHECK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DC_PLUGIN_ABI_VERSION 3u
/* The oldest ABI version this header's driftcheck loads. */
#define DC_PLUGIN_ABI_OLDEST 1u
#define DC_PLUGIN_ENTRY "driftcheck_plugin"
/* Size of the buffers supports() and run() write their one-line reason or error into (NUL included). */
#define DC_MESSAGE_SIZE 512u
#define DC_MAX_DIMS 8

#if defined(_WIN32)
#define DC_PLUGIN_EXPORT __declspec(dllexport)
#else
#define DC_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Element types; the values are fixed by the ABI (they follow driftcheck's DType). Encodings are IEEE/OCP,
 * little-endian; bf16 and the fp8 formats are raw bit patterns (fp8_e4m3fnuz: bias 8, no infinities, no -0,
 * the one NaN is 0x80). */
typedef enum dc_dtype {
  DC_F64 = 0,
  DC_F32 = 1,
  DC_F16 = 2,
  DC_BF16 = 3,
  DC_F8_E4M3FN = 4,
  DC_F8_E4M3FNUZ = 5,
  DC_F8_E5M2 = 6,
  DC_I32 = 7
} dc_dtype;

typedef enum dc_op { DC_RMSNORM = 0, DC_CONCAT = 1, DC_DUAL_RMSNORM_CAT = 2, DC_ATTENTION = 3 } dc_op;

/* dc_plugin.flags */
#define DC_PLUGIN_DEVICE_MEMORY 1u /* run() gets device pointers (see above) */
#define DC_PLUGIN_THREAD_SAFE 2u   /* supports() and run() may be called concurrently on one instance */

/* dc_tensor.role */
#define DC_ROLE_INPUT 1u
#define DC_ROLE_OUTPUT 2u /* an in-place tensor (the fused residual) has both bits */

/* One storage: numel elements of dtype, nbytes = numel x element size. data is NULL in supports(). */
typedef struct dc_storage {
  int32_t dtype;
  int64_t numel;
  uint64_t nbytes;
  void* data;
} dc_storage;

/* One view into a storage: element (i0, i1, ...) lives at element offset + sum(i_d * strides[d]) of the
 * storage (strides and offset in elements, not bytes; strides >= 0). Several views may share a storage. */
typedef struct dc_tensor {
  const char* name; /* the op's tensor names (docs/PLUGIN.md): x, w, residual, y; a, b, out; e, h, w_e, w_h,
                       out; q, k_cache, v_cache, block_table, seq_lens, query_start_loc, sinks, k_new, v_new,
                       o, lse */
  int32_t storage;  /* index into dc_case.storages */
  int32_t dtype;    /* equal to its storage's */
  int32_t ndim;
  uint32_t role; /* DC_ROLE_INPUT and/or DC_ROLE_OUTPUT */
  int64_t shape[DC_MAX_DIMS];
  int64_t strides[DC_MAX_DIMS];
  int64_t offset;
} dc_tensor;

/* The op's parameters (reference/include/driftcheck/reference/case.hpp defines their meaning); fields of
 * other ops are zero. */
typedef struct dc_params {
  /* rmsnorm, dual_rmsnorm_cat */
  double eps;
  int32_t weight_mode; /* 0: y = norm(x) * w; 1: y = norm(x) * (1 + w) */
  int32_t residual;    /* rmsnorm: 1 when residual is added first and updated in place */
  /* attention */
  int64_t num_q_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t block_size;
  int64_t window; /* sliding window in keys, 0: none */
  double scale;
  double softcap; /* 0: none */
  double k_scale;
  double v_scale;
  int32_t causal;
  int32_t has_sinks;
} dc_params;

typedef struct dc_case {
  int32_t op; /* dc_op */
  int32_t num_storages;
  int32_t num_tensors;
  int32_t reserved; /* zero */
  uint64_t seed;    /* campaign seed and case index, for messages */
  uint64_t index;
  dc_params params;
  dc_storage* storages;
  const dc_tensor* tensors; /* in byte-wise order of their names */
  void* stream; /* DC_PLUGIN_DEVICE_MEMORY: the cudaStream_t / hipStream_t to launch on; else NULL */
} dc_case;

/* The numerics the plugin declares; the oracle derives its tolerance from them (docs/ORACLE.md). Booleans are
 * 0 or 1. Declaring fewer roundings than the kernel does makes its rounding error a finding. */
typedef struct dc_numerics {
  int32_t output_roundings;   /* rmsnorm family: roundings to the output format per element, >= 1 */
  int32_t p_rounded;          /* attention: softmax weights P rounded to the activation dtype */
  int32_t partials_rounded;   /* attention: split-KV partial outputs stored in the activation dtype */
  int32_t kv_dequant_rounded; /* attention: dequantised fp8 K/V rounded to the activation dtype */
  int32_t deterministic;      /* same case, same bits */
  int32_t batch_invariant;    /* a row's bits do not depend on the other rows of the batch */
  int32_t block_permutation_invariant; /* attention: physical KV block placement changes no bit */
} dc_numerics;

/* dc_numerics2.new_kv: where an attention kernel reads the new tokens' keys and values. */
#define DC_NEW_KV_CACHE 0  /* from the paged cache (the new tokens' slots are already written) */
#define DC_NEW_KV_INPUTS 1 /* prefill/extend sequences (query length > 1) from the k_new / v_new inputs */

/* ABI version 2: the numerics terms version 1's dc_numerics lacks, in the order of driftcheck's Numerics
 * (device/include/driftcheck/device/backend.hpp). They are appended here, not inserted into dc_numerics, so
 * that version-1 binaries and sources keep their layout and meaning. Zero is version 1's behaviour. */
typedef struct dc_numerics2 {
  int32_t kv_dequant_rounded_prefill; /* attention: the dequantised fp8 K/V rounded to the activation dtype in
                                         the rows of prefill/extend sequences only (query length > 1) */
  int32_t fp8_mfma_decode; /* attention: decode rows (query length 1) of an fp8 cache run QK and P.V on fp8
                              MFMAs, q and P converted to the cache's fp8 format first */
  int32_t new_kv;          /* DC_NEW_KV_CACHE or DC_NEW_KV_INPUTS */
  int32_t
      lse_undefined_inf; /* attention: a row whose softmax sum is NaN or 0 gets lse +inf (FlashAttention-2's
                            convention) where the reference has NaN or -inf; this field was `reserved`
                            (zero) in the first version-2 header, so zero keeps its meaning */
} dc_numerics2;

/* ABI version 3: the rmsnorm family's reduction of the sum of squares, as the statistical tier reads it
 * (driftcheck's ReductionShape, docs/ORACLE.md): reduction_threads partial sums, each accumulated over chunks
 * of reduction_vec consecutive elements (chunk c to thread c % threads), combined by a shuffle tree within
 * warps of reduction_warp lanes and the warp totals added in order. All zero declares nothing: one sequential
 * sum, the worst case; otherwise each of the three is at least 1. Only the rmsnorm family reads it. */
typedef struct dc_numerics3 {
  int32_t reduction_threads;
  int32_t reduction_vec;
  int32_t reduction_warp;
  int32_t reserved; /* zero */
} dc_numerics3;

#define DC_MAX_HEAD_DIMS 8

/* ABI version 2: the attention query shapes the kernel runs, checked by driftcheck before supports() is
 * called: a case outside them is `unsupported` (the reason names the field) without a call into the plugin.
 * Zero restricts nothing; every field must be zero for another op. */
typedef struct dc_query_supports {
  int32_t decode_only;   /* 1: every sequence has query length 1 (no prefill or extend sequence) */
  int32_t reserved;      /* zero */
  int64_t max_query_len; /* the longest query of a sequence it runs; 0: any */
  int64_t head_dims[DC_MAX_HEAD_DIMS]; /* the head sizes it runs, zeros after the last; all zero: any */
  int64_t max_head_dim;                /* the largest head size it runs; 0: any */
} dc_query_supports;

typedef struct dc_plugin {
  uint32_t abi_version;    /* DC_PLUGIN_ABI_VERSION */
  uint32_t struct_size;    /* sizeof(dc_plugin) */
  const char* name;        /* [a-z0-9_.-]+; `--plugin PATH` registers the backend as plugin.<name> */
  const char* description; /* one line: what kernel, from where */
  int32_t op;              /* dc_op: the one op this library's kernel runs */
  uint32_t flags;          /* DC_PLUGIN_DEVICE_MEMORY | DC_PLUGIN_THREAD_SAFE */
  dc_numerics numerics;
  /* An instance for one backend entry; config is the backends file's plugin_config string ("" when absent).
   * NULL with a one-line message in error on failure (a bad config: exit 2). May be NULL: instance is then
   * NULL. */
  void* (*create)(const char* config, char* error, size_t error_size);
  void (*destroy)(void* instance); /* may be NULL */
  /* 1 when the kernel can run on this machine; 0 with a reason (no device, library missing). May be NULL. */
  int (*available)(void* instance, char* reason, size_t reason_size);
  /* 1 when the kernel runs this case; 0 with a reason in the field's words ("head_dim 96: 64 and 128 only").
   * Storages' data are NULL here: decide from the metadata. */
  int (*supports)(void* instance, const dc_case* c, char* reason, size_t reason_size);
  /* Runs the kernel: reads the input views, writes every element of every output view, and nothing else.
   * 0 on success; non-zero with a one-line message in error (an `error` verdict). */
  int (*run)(void* instance, const dc_case* c, char* error, size_t error_size);
  /* ABI version 2 (read only from a plugin whose abi_version is 2 or more; version 1 has them zero). */
  dc_numerics2 numerics2;
  dc_query_supports query_supports;
  /* ABI version 3 (read only from a plugin whose abi_version is 3 or more; earlier versions have it zero). */
  dc_numerics3 numerics3;
} dc_plugin;

typedef const dc_plugin* (*dc_plugin_entry)(void);

/* The view named `name`, or NULL. */
static inline const dc_tensor* dc_find_tensor(const dc_case* c, const char* name) {
  for (int32_t i = 0; i < c->num_tensors; ++i) {
    const char* a = c->tensors[i].name;
    const char* b = name;
    while (*a != '\0' && *a == *b) ++a, ++b;
    if (*a == *b) return &c->tensors[i];
  }
  return NULL;
}

/* Bytes per element of a dc_dtype. */
static inline int dc_dtype_size(int32_t dtype) {
  return dtype == DC_F64                       ? 8
         : dtype == DC_F32 || dtype == DC_I32  ? 4
         : dtype == DC_F16 || dtype == DC_BF16 ? 2
                                               : 1;
}

/* Address of element `linear` (row-major over the view's shape) of a view whose storage has host data. */
static inline void* dc_element(const dc_case* c, const dc_tensor* t, int64_t linear) {
  int64_t at = t->offset;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    const int64_t extent = t->shape[d] > 0 ? t->shape[d] : 1;
    at += (linear % extent) * t->strides[d];
    linear /= extent;
  }
  return (char*)c->storages[t->storage].data + at * dc_dtype_size(t->dtype);
}

#ifdef __cplusplus
}
#endif

#endif /* DRIFTCHECK_PLUGIN_H */
