/* Concat plugins for tests/plugin_test.cpp, one per TEST_PLUGIN_VARIANT: a correct one, and variants that
 * each break one rule of driftcheck/plugin.h, to prove driftcheck turns the breach into a one-line error (a
 * plugin it cannot load) or a verdict (a plugin that misbehaves on a case). Concat moves bytes, so one kernel
 * serves every dtype and a correct run is bit-exact. ABI_1 is the correct plugin compiled against version 1's
 * header (tests/plugins/v1/driftcheck/plugin.h, a copy of it as released): driftcheck must still load it.
 * ATTN_DECODE is an attention "kernel" that declares ABI version 2's numerics2 and query_supports (decode
 * only, head sizes 32 and 64): its supports() and run() refuse everything, with a reason saying so, so that a
 * case the static declaration declines shows it was never asked. BAD_QUERY declares query_supports on concat.
 * The output variants write a wrong thing into out: UNWRITTEN returns without writing (as a kernel that
 * returns its result would), FLOAT32_OUT writes every element as a float32 at the element's address in float
 * units (a kernel that takes a bf16 buffer for a float* one). SLOW is tests/faults_test.cpp's case that takes
 * minutes (an interrupt must not wait for it): its run call number DC_TEST_PLUGIN_SLOW_CALL sleeps 600 s, and
 * it breaks rows >= 3 so that it has findings to shrink (DC_TEST_PLUGIN_COUNT prints every call's number). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driftcheck/plugin.h"

#define CORRECT 0
#define ABI_9 1
#define NULL_RUN 2
#define CREATE_FAILS 3
#define RUN_FAILS 4
#define GUARD_WRITE 5
#define INPUT_WRITE 6
#define NO_ENTRY 7
#define CRASHES 8
#define SLOW 9
#define ABI_1 10
#define ATTN_DECODE 11
#define BAD_QUERY 12
#define UNWRITTEN 13
#define FLOAT32_OUT 14
#define ABI_2 15
#define REDUCTION 16
#define BAD_REDUCTION 17

static int instances;

static void* create(const char* config, char* error, size_t error_size) {
  if (TEST_PLUGIN_VARIANT == CREATE_FAILS) {
    snprintf(error, error_size, "cannot open device for config '%s'\nsecond line", config);
    return NULL;
  }
  return &instances;
}

static int supports(void* self, const dc_case* c, char* reason, size_t reason_size) {
  (void)self;
  if (TEST_PLUGIN_VARIANT == ATTN_DECODE) {
    snprintf(reason, reason_size, "the plugin's supports() was asked");
    return 0;
  }
  if (dc_find_tensor(c, "a")->dtype == DC_F64) {
    snprintf(reason, reason_size, "fp64: not in this test plugin");
    return 0;
  }
  return 1;
}

static void copy(const dc_case* c, const dc_tensor* from, int64_t row, int64_t col, const dc_tensor* to,
                 int64_t to_col) {
  const int size = dc_dtype_size(from->dtype);
  const char* src = (const char*)c->storages[from->storage].data +
                    size * (from->offset + row * from->strides[0] + col * from->strides[1]);
  char* dst = (char*)c->storages[to->storage].data +
              size * (to->offset + row * to->strides[0] + to_col * to->strides[1]);
  memcpy(dst, src, (size_t)size);
}

#if TEST_PLUGIN_VARIANT == SLOW
/* Its calls, counted across threads. */
static int calls;

static void maybe_sleep(void) {
  const int call = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  const char* slow = getenv("DC_TEST_PLUGIN_SLOW_CALL");
  int s;
  if (getenv("DC_TEST_PLUGIN_COUNT") != NULL) fprintf(stderr, "test plugin: call %d\n", call);
  if (slow == NULL || atoi(slow) != call) return;
  fprintf(stderr, "test plugin: call %d sleeps\n", call);
  for (s = 0; s < 600; ++s) sleep(1); /* one-second steps: a signal does not end it early */
}
#endif

/* Element (row, col) of a 2-D view as a float in the kernel's own arithmetic (bf16 and f32 inputs only). */
static float value_at(const dc_case* c, const dc_tensor* t, int64_t row, int64_t col) {
  const char* p = (const char*)c->storages[t->storage].data;
  const int64_t at = t->offset + row * t->strides[0] + col * t->strides[1];
  float f = 0;
  if (t->dtype == DC_F32) {
    memcpy(&f, p + 4 * at, 4);
  } else {
    uint32_t bits = 0;
    uint16_t h;
    memcpy(&h, p + 2 * at, 2);
    bits = (uint32_t)h << 16;
    memcpy(&f, &bits, 4);
  }
  return f;
}

static int run(void* self, const dc_case* c, char* error, size_t error_size) {
  const dc_tensor* a = dc_find_tensor(c, "a");
  const dc_tensor* b = dc_find_tensor(c, "b");
  const dc_tensor* out = dc_find_tensor(c, "out");
  int64_t rows, ha, hb;
  int64_t i, j;
  (void)self;
  if (TEST_PLUGIN_VARIANT == ATTN_DECODE) {
    snprintf(error, error_size, "the plugin's run() was called");
    return 1;
  }
  rows = a->shape[0], ha = a->shape[1], hb = b->shape[1];
  if (TEST_PLUGIN_VARIANT == UNWRITTEN) return 0;
  if (TEST_PLUGIN_VARIANT == FLOAT32_OUT) {
    /* The mistake: a bf16 storage used as float*. Elements whose float would lie past the storage's end are
     * skipped, so that the test does not overrun the buffer as the real mistake would. */
    float* o = (float*)c->storages[out->storage].data;
    const int64_t floats = (int64_t)(c->storages[out->storage].nbytes / 4);
    for (i = 0; i < rows; ++i)
      for (j = 0; j < ha + hb; ++j) {
        const int64_t at = out->offset + i * out->strides[0] + j * out->strides[1];
        if (at < floats) o[at] = j < ha ? value_at(c, a, i, j) : value_at(c, b, i, j - ha);
      }
    return 0;
  }
  if (TEST_PLUGIN_VARIANT == CRASHES && a->shape[0] > 2) raise(SIGSEGV); /* as a wild pointer would */
  if (TEST_PLUGIN_VARIANT == RUN_FAILS) {
    snprintf(error, error_size, "CUDA error: an illegal memory access was encountered\nsecond line");
    return 7;
  }
  for (i = 0; i < rows; ++i) {
    for (j = 0; j < ha; ++j) copy(c, a, i, j, out, j);
    for (j = 0; j < hb; ++j) copy(c, b, i, j, out, ha + j);
  }
  if (TEST_PLUGIN_VARIANT == GUARD_WRITE && rows > 0) /* one element past the last row: the guard band */
    copy(c, a, 0, 0, out, (rows - 1) * out->strides[0] + ha + hb);
  if (TEST_PLUGIN_VARIANT == INPUT_WRITE && rows > 0 && ha > 0) copy(c, b, 0, 0, a, 0);
#if TEST_PLUGIN_VARIANT == SLOW
  maybe_sleep();
  if (rows > 2 && ha > 0 && hb > 0) copy(c, b, 2, 0, out, 0); /* row 2 starts with b's element */
#endif
  return 0;
}

static const dc_plugin kPlugin = {
    TEST_PLUGIN_VARIANT == ABI_9 ? 9u : DC_PLUGIN_ABI_VERSION,
    sizeof(dc_plugin),
    TEST_PLUGIN_VARIANT == ATTN_DECODE ? "test_attention" : "test_concat",
    TEST_PLUGIN_VARIANT == ATTN_DECODE ? "attention declaration test plugin (tests/plugins/test_plugin.c)"
                                       : "concat test plugin (tests/plugins/test_plugin.c)",
    TEST_PLUGIN_VARIANT == ATTN_DECODE ? DC_ATTENTION : DC_CONCAT,
    DC_PLUGIN_THREAD_SAFE,
    {1, 0, 0, 0, 1, 1, 1},
    create,
    NULL,
    NULL,
    supports,
    TEST_PLUGIN_VARIANT == NULL_RUN ? NULL : run,
#if TEST_PLUGIN_VARIANT == ATTN_DECODE
    {1, 0, DC_NEW_KV_INPUTS, 0},
    {1, 0, 0, {32, 64}, 64},
#elif TEST_PLUGIN_VARIANT == BAD_QUERY
    {0, 0, DC_NEW_KV_CACHE, 0},
    {1, 0, 0, {0}, 0},
#elif TEST_PLUGIN_VARIANT != ABI_1 /* version 1's dc_plugin ends at run */
    {0, 0, DC_NEW_KV_CACHE, 0},
    {0, 0, 0, {0}, 0},
#endif
#if TEST_PLUGIN_VARIANT == REDUCTION
    {256, 4, 32, 0},
#elif TEST_PLUGIN_VARIANT == BAD_REDUCTION
    {256, 0, 32, 0},
#elif TEST_PLUGIN_VARIANT != ABI_1 && \
    TEST_PLUGIN_VARIANT != ABI_2 /* version 2's dc_plugin ends at query_supports */
    {0, 0, 0, 0},
#endif
};

#if TEST_PLUGIN_VARIANT != NO_ENTRY
DC_PLUGIN_EXPORT const dc_plugin* driftcheck_plugin(void) {
  return &kPlugin;
}
#else
const dc_plugin* not_the_entry(void) {
  return &kPlugin;
}
#endif
