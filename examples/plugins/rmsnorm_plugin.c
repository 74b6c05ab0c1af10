/* An RMSNorm kernel in plain C99 as a driftcheck plugin (driftcheck/plugin.h, docs/PLUGIN.md): fp32 sum of
 * squares, y = round(x * rsqrt(mean(x^2) + eps) * w) with one rounding to the output format, bf16 and fp32
 * activations, any row stride and offset, y may alias x. Cases with a fused residual or fp16/fp8 activations
 * are declined with a reason.
 *
 * plugin_config = "planted_bug=stride_ignored" plants a bug real kernels have had: rows are read as if packed
 * (row stride = H), which is right only for contiguous inputs; a campaign finds it on padded rows.
 *
 * Build: cc -std=c99 -O2 -shared -fPIC -I<driftcheck>/device/plugin/include rmsnorm_plugin.c -o
 * rmsnorm_plugin.so
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driftcheck/plugin.h"

typedef struct {
  int stride_ignored;
} instance;

static void* create(const char* config, char* error, size_t error_size) {
  instance* self = (instance*)calloc(1, sizeof(instance));
  if (self == NULL) {
    snprintf(error, error_size, "out of memory");
    return NULL;
  }
  if (strcmp(config, "planted_bug=stride_ignored") == 0) {
    self->stride_ignored = 1;
  } else if (config[0] != '\0') {
    snprintf(error, error_size, "unknown plugin_config '%s' (known: planted_bug=stride_ignored)", config);
    free(self);
    return NULL;
  }
  return self;
}

static void destroy(void* self) {
  free(self);
}

static int supports(void* self, const dc_case* c, char* reason, size_t reason_size) {
  const dc_tensor* x = dc_find_tensor(c, "x");
  (void)self;
  if (c->params.residual) {
    snprintf(reason, reason_size, "fused residual add: this example kernel has none");
    return 0;
  }
  if (x->dtype != DC_BF16 && x->dtype != DC_F32) {
    snprintf(reason, reason_size, "activation dtype %d: this example kernel reads bf16 and fp32 only",
             x->dtype);
    return 0;
  }
  return 1;
}

static float load(const dc_case* c, const dc_tensor* t, int64_t at) {
  const char* base = (const char*)c->storages[t->storage].data;
  if (t->dtype == DC_F32) {
    float f;
    memcpy(&f, base + 4 * at, 4);
    return f;
  } else {
    uint16_t h;
    uint32_t u;
    float f;
    memcpy(&h, base + 2 * at, 2);
    u = (uint32_t)h << 16; /* bf16 is the top half of an fp32 */
    memcpy(&f, &u, 4);
    return f;
  }
}

/* Round to nearest even into the tensor's format (fp32 values are stored as they are). */
static void store(const dc_case* c, const dc_tensor* t, int64_t at, float v) {
  char* base = (char*)c->storages[t->storage].data;
  if (t->dtype == DC_F32) {
    memcpy(base + 4 * at, &v, 4);
  } else {
    uint32_t u;
    uint16_t h;
    memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      h = 0x7fc0; /* NaN */
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      h = (uint16_t)(u >> 16);
    }
    memcpy(base + 2 * at, &h, 2);
  }
}

static int run(void* self_, const dc_case* c, char* error, size_t error_size) {
  const instance* self = (const instance*)self_;
  const dc_tensor* x = dc_find_tensor(c, "x");
  const dc_tensor* w = dc_find_tensor(c, "w");
  const dc_tensor* y = dc_find_tensor(c, "y");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const int64_t x_row = self->stride_ignored ? hidden : x->strides[0];
  /* The whole row is read before any of it is written: y may alias x. */
  float* row = (float*)malloc((size_t)(hidden > 0 ? hidden : 1) * sizeof(float));
  int64_t i, j;
  if (row == NULL) {
    snprintf(error, error_size, "out of memory for a row of %lld", (long long)hidden);
    return 1;
  }
  for (i = 0; i < rows; ++i) {
    float sum = 0.0f, scale;
    for (j = 0; j < hidden; ++j) {
      row[j] = load(c, x, x->offset + i * x_row + j * x->strides[1]);
      sum += row[j] * row[j];
    }
    scale = 1.0f / sqrtf(sum / (float)hidden + (float)c->params.eps);
    for (j = 0; j < hidden; ++j) {
      const float wj = load(c, w, w->offset + j * w->strides[0]);
      const float weight = c->params.weight_mode == 1 ? 1.0f + wj : wj;
      store(c, y, y->offset + i * y->strides[0] + j * y->strides[1], row[j] * scale * weight);
    }
  }
  free(row);
  return 0;
}

static const dc_plugin kPlugin = {
    DC_PLUGIN_ABI_VERSION,
    sizeof(dc_plugin),
    "example_rmsnorm",
    "example C99 plugin: RMSNorm with fp32 accumulation and one rounding (examples/plugins/rmsnorm_plugin.c)",
    DC_RMSNORM,
    0, /* host memory; one call at a time */
    {1, 0, 0, 0, 1, 1, 1},
    create,
    destroy,
    NULL,
    supports,
    run,
    {0, 0, DC_NEW_KV_CACHE, 0}, /* numerics2: the terms of attention kernels */
    {0, 0, 0, {0}, 0},          /* query_supports: attention only */
    {0, 0, 0, 0}, /* numerics3: no reduction shape declared (the worst case, a sequential sum) */
};

DC_PLUGIN_EXPORT const dc_plugin* driftcheck_plugin(void) {
  return &kPlugin;
}
