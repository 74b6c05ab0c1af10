// CaseSpec -> JSON and back, and materialize(): the one place that turns a spec into tensors.
//
// Values come from std::mt19937_64 (its output sequence is fixed by the C++ standard) and from arithmetic
// that is exact in IEEE double, so a spec materialises into the same bits on every platform: normals are
// Irwin-Hall sums of four 16-bit uniforms (exact sums, no libm call), not std::normal_distribution
// (implementation-defined).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/fuzz/value_rng.hpp"

namespace driftcheck::fuzz {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// Deterministic values

// Streams: one per tensor role, so shrinking one tensor's shape leaves the others' values alone.
enum Stream : std::uint64_t {
  kX = 1,
  kW,
  kRes,
  kA,
  kB,
  kWe,
  kWh,
  kQ,
  kK,
  kV,
  kSinks,
  kPoison,
  kTable,
  kTableFill,
  kSpecial,
  kNewKv
};

double format_max(DType t) {
  if (t == DType::kF32) return std::numeric_limits<float>::max();
  if (t == DType::kF64) return std::numeric_limits<double>::max();
  return max_finite(*float_format(t));
}

double min_normal(DType t) {
  if (t == DType::kF32) return std::numeric_limits<float>::min();
  const FloatFormat& f = *float_format(t);
  return std::ldexp(1.0, 1 - f.bias);
}

// "Near max" magnitude for a row of `width` values reduced by a sum of squares in fp32: the format's max,
// capped where width * m^2 would overflow fp32 (bf16 and fp32 share fp32's range, so their true max cannot be
// squared in an fp32 accumulator: that is a limit of every fp32 kernel, not a bug to report). Power of two:
// exact.
double near_max_magnitude(DType t, std::int64_t width) {
  const int width_log2 =
      static_cast<int>(std::ceil(std::log2(static_cast<double>(std::max<std::int64_t>(width, 1)))));
  const double cap = std::ldexp(1.0, (126 - width_log2 - 2) / 2);
  return std::min(format_max(t) * 0.5, cap);
}

// One row of draw_values for distribution D (a template so that the per-element switch leaves the loop).
template <Distribution D>
void draw_row(double* out, std::int64_t width, double magnitude, double min_norm,
              const std::vector<bool>& outlier, ValueRng& rng) {
  const double row_level = rng.normal();
  const auto normal_col = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(width)));
  for (std::int64_t c = 0; c < width; ++c) {
    double x = rng.normal();
    if constexpr (D == Distribution::kOutlierChannels) {
      x *= outlier[static_cast<std::size_t>(c)] ? 100.0 : 1.0;
    } else if constexpr (D == Distribution::kNearConstant) {
      x = row_level + 1e-3 * x;
    } else if constexpr (D == Distribution::kNearMax) {
      x = rng.sign() * magnitude * (0.5 + 0.5 * rng.uniform());
    } else if constexpr (D == Distribution::kSubnormal) {
      // Three in four values below the smallest normal; one column per row stays normal so that the row's
      // sum of squares is not itself pure underflow (which no fp32 kernel can represent).
      if (c != normal_col && rng.below(4) != 0) x = rng.sign() * rng.uniform() * min_norm;
    } else if constexpr (D == Distribution::kLargeLogits) {
      x *= 1024.0;
    }
    out[c] = x;
  }
}

// Row-major values of a [rows, width] block drawn from a distribution. `magnitude` is the near-max magnitude.
std::vector<double> draw_values(Distribution d, DType t, std::int64_t rows, std::int64_t width,
                                double magnitude, ValueRng& rng) {
  std::vector<double> v(static_cast<std::size_t>(rows * width));
  std::vector<bool> outlier(static_cast<std::size_t>(width), false);
  if (d == Distribution::kOutlierChannels) {  // about one channel in 64 (at least one) is 100x larger
    const std::int64_t n = std::max<std::int64_t>(1, width / 64);
    for (std::int64_t k = 0; k < n; ++k) outlier[rng.below(static_cast<std::uint64_t>(width))] = true;
  }
  const double min_norm = d == Distribution::kSubnormal ? min_normal(t) : 0.0;
  const auto rows_of = [&](auto draw) {
    for (std::int64_t r = 0; r < rows; ++r)
      draw(v.data() + r * width, width, magnitude, min_norm, outlier, rng);
  };
  switch (d) {
    case Distribution::kNormal:
      rows_of(draw_row<Distribution::kNormal>);
      break;
    case Distribution::kOutlierChannels:
      rows_of(draw_row<Distribution::kOutlierChannels>);
      break;
    case Distribution::kNearConstant:
      rows_of(draw_row<Distribution::kNearConstant>);
      break;
    case Distribution::kNearMax:
      rows_of(draw_row<Distribution::kNearMax>);
      break;
    case Distribution::kSubnormal:
      rows_of(draw_row<Distribution::kSubnormal>);
      break;
    case Distribution::kLargeLogits:
      rows_of(draw_row<Distribution::kLargeLogits>);
      break;
  }
  return v;
}

// Guard bands, unwritten outputs and unused KV slots hold values no correct computation produces: NaN, +-inf
// (NaN in the fp8 formats without infinities) and +-max finite. Encoded once per dtype, then stored by bits.
std::array<std::uint64_t, 5> poison_codes(DType t) {
  std::array<std::uint64_t, 5> codes{};
  Storage tmp(t, 5);
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  const double big = t == DType::kI32 ? 2147483647.0 : format_max(t);
  const double values[] = {t == DType::kI32 ? -2147483647.0 : std::numeric_limits<double>::quiet_NaN(),
                           t == DType::kI32 ? big - 1 : kInf, t == DType::kI32 ? -big : -kInf, big, -big + 1};
  for (std::size_t k = 0; k < codes.size(); ++k) {
    tmp.store(static_cast<std::int64_t>(k), values[k]);
    codes[k] = tmp.load_bits(static_cast<std::int64_t>(k));
  }
  return codes;
}

// A cycle through the five codes from a drawn phase: cheap for the large KV caches, and every code appears in
// every run of five neighbours.
// The first cycle is stored element by element, the rest by doubling byte copies: KV caches with large blocks
// hold millions of poisoned slots, and this fill is most of a case's materialisation otherwise.
void poison_storage(Storage& s, ValueRng& rng) {
  const auto codes = poison_codes(s.dtype);
  const std::uint64_t phase = rng.below(codes.size());
  const std::int64_t head = std::min<std::int64_t>(s.numel(), static_cast<std::int64_t>(codes.size()));
  for (std::int64_t i = 0; i < head; ++i)
    s.store_bits(i, codes[(static_cast<std::uint64_t>(i) + phase) % codes.size()]);
  const std::size_t period = static_cast<std::size_t>(head) * static_cast<std::size_t>(dtype_size(s.dtype));
  for (std::size_t done = period; done < s.bytes.size() && period > 0;) {
    const std::size_t n = std::min(done - done % period, s.bytes.size() - done);
    std::memcpy(s.bytes.data() + done, s.bytes.data(), n);
    done += n;
  }
}

// Guard elements on each side of a storage: one full row plus a little, so an off-by-one-row write or a write
// that ignores the row stride lands inside the storage (and is caught) instead of corrupting the heap.
std::int64_t guard_for(std::int64_t width) {
  return width + 8;
}

Tensor make_padded(DType t, Shape shape, std::int64_t row_pad, std::int64_t offset, ValueRng& poison) {
  const std::int64_t width = shape.back();
  Tensor x = Tensor::padded(t, std::move(shape), width + row_pad, offset, guard_for(width));
  poison_storage(*x.storage(), poison);
  return x;
}

void fill(Tensor& t, Distribution d, std::int64_t rows, double magnitude, ValueRng& rng,
          Overflow ov = Overflow::kIeee) {
  const std::int64_t width = rows == 0 ? 0 : t.numel() / rows;
  const auto v = draw_values(d, t.dtype(), rows, width, magnitude, rng);
  t.copy_from(v, ov);
}

// Weights sit around 1 (w) or 0 (1 + w) like trained norm weights, with a spread that exercises the rounding.
void fill_weight(Tensor& w, WeightMode mode, ValueRng& rng) {
  std::vector<double> v(static_cast<std::size_t>(w.numel()));
  for (auto& x : v) x = (mode == WeightMode::kPlain ? 1.0 : 0.0) + 0.25 * rng.normal();
  w.copy_from(v);
}

// Special values (defined below): one NaN or infinity in an input a kernel reads.
void inject_row_input(const CaseSpec& s, Tensor& t);
struct Paging;
void inject_kv(const CaseSpec& s, const Paging& pg, Case& c);

// ---------------------------------------------------------------------------------------------------------------
// Row ops

Case materialize_rmsnorm(const CaseSpec& s, ValueRng& poison) {
  const auto& p = std::get<RmsNormParams>(s.params);
  Case c;
  c.params = p;
  const std::int64_t n = s.rows, h = s.hidden;
  // With a residual, x + r must stay finite in the activation format: halve the near-max magnitude.
  const double mag = near_max_magnitude(s.act_dtype, h) * (p.residual ? 0.5 : 1.0);
  ValueRng rx(s.value_seed, kX), rw(s.value_seed, kW), rr(s.value_seed, kRes);
  Tensor x = make_padded(s.act_dtype, {n, h}, s.row_pad, s.base_offset, poison);
  fill(x, s.distribution, n, mag, rx);
  inject_row_input(s, x);
  Tensor w = make_padded(s.act_dtype, {h}, 0, s.base_offset, poison);
  fill_weight(w, p.weight_mode, rw);
  c.tensors["x"] = x;
  c.tensors["w"] = w;
  if (p.residual) {
    Tensor r = make_padded(s.act_dtype, {n, h}, s.row_pad, s.base_offset, poison);
    fill(r, s.distribution, n, mag, rr);
    c.tensors["residual"] = r;
  }
  c.tensors["y"] = s.inplace_output      ? x
                   : s.contiguous_output ? make_padded(s.act_dtype, {n, h}, 0, 0, poison)
                                         : make_padded(s.act_dtype, {n, h}, s.row_pad, s.base_offset, poison);
  return c;
}

Case materialize_concat(const CaseSpec& s, ValueRng& poison) {
  Case c;
  c.params = ConcatParams{};
  ValueRng ra(s.value_seed, kA), rb(s.value_seed, kB);
  const std::int64_t n = s.rows;
  // b gets its own row padding and alignment so the two inputs never share a layout by accident.
  Tensor a = make_padded(s.act_dtype, {n, s.hidden}, s.row_pad, s.base_offset, poison);
  Tensor b = make_padded(s.act_dtype, {n, s.hidden_b}, (s.row_pad * 3) % 17, (s.base_offset + 3) % 8, poison);
  fill(a, s.distribution, n, near_max_magnitude(s.act_dtype, s.hidden), ra);
  inject_row_input(s, a);
  fill(b, s.distribution, n, near_max_magnitude(s.act_dtype, s.hidden_b), rb);
  c.tensors["a"] = a;
  c.tensors["b"] = b;
  c.tensors["out"] = make_padded(s.act_dtype, {n, s.hidden + s.hidden_b}, s.row_pad, s.base_offset, poison);
  return c;
}

// e is contiguous (embeddings), h strided (a slice of the target's concatenated aux hidden states), as in
// EAGLE3.
Case materialize_dual(const CaseSpec& s, ValueRng& poison) {
  const auto& p = std::get<DualRmsNormCatParams>(s.params);
  Case c;
  c.params = p;
  const std::int64_t n = s.rows, h = s.hidden;
  const double mag = near_max_magnitude(s.act_dtype, h);
  ValueRng re(s.value_seed, kX), rh(s.value_seed, kRes), rwe(s.value_seed, kWe), rwh(s.value_seed, kWh);
  Tensor e = make_padded(s.act_dtype, {n, h}, 0, s.base_offset, poison);
  Tensor hid = make_padded(s.act_dtype, {n, h}, s.row_pad, s.base_offset, poison);
  fill(e, s.distribution, n, mag, re);
  inject_row_input(s, e);
  fill(hid, s.distribution, n, mag, rh);
  Tensor we = make_padded(s.act_dtype, {h}, 0, s.base_offset, poison);
  Tensor wh = make_padded(s.act_dtype, {h}, 0, s.base_offset, poison);
  fill_weight(we, p.weight_mode, rwe);
  fill_weight(wh, p.weight_mode, rwh);
  c.tensors["e"] = e;
  c.tensors["h"] = hid;
  c.tensors["w_e"] = we;
  c.tensors["w_h"] = wh;
  c.tensors["out"] = make_padded(s.act_dtype, {n, 2 * h}, s.row_pad, s.base_offset, poison);
  return c;
}

// ---------------------------------------------------------------------------------------------------------------
// Attention

struct Paging {
  std::vector<std::int64_t> blocks_per_seq;
  std::int64_t used = 0, total = 0, max_blocks = 1;
  std::vector<std::int32_t> placement;  // logical block number (in order of sequences) -> physical block
};

Paging plan_paging(const CaseSpec& s, std::int64_t block_size) {
  Paging pg;
  for (const auto len : s.seq_lens) {
    const std::int64_t nb = (len + block_size - 1) / block_size;
    pg.blocks_per_seq.push_back(nb);
    pg.used += nb;
    pg.max_blocks = std::max(pg.max_blocks, nb);
  }
  pg.total = pg.used + s.spare_blocks;
  pg.placement.resize(static_cast<std::size_t>(pg.total));
  std::iota(pg.placement.begin(), pg.placement.end(), 0);
  if (s.block_table_seed != 0) {  // Fisher-Yates with the spec's seed: platform independent
    ValueRng r(s.block_table_seed, kTable);
    for (std::size_t i = pg.placement.size(); i > 1; --i)
      std::swap(pg.placement[i - 1], pg.placement[r.below(i)]);
  }
  return pg;
}

// Ids a kernel must never read, for tables drawn with table_poison: the usual "no block" sentinel, one past
// the cache, and the int32 extremes.
std::int32_t poisoned_id(std::size_t k, std::int64_t total) {
  const std::int32_t ids[] = {-1, static_cast<std::int32_t>(total), std::numeric_limits<std::int32_t>::max(),
                              std::numeric_limits<std::int32_t>::min()};
  return ids[k % std::size(ids)];
}

// The block table, as a slice of a wider table (CaseSpec::table_*): rows [before, before + seqs) and the
// first max_blocks columns of a [before + seqs + after, max_blocks + pad_cols] table. Row s of the view
// points at sequence s's blocks; its entries past the sequence's last block point at a spare (poisoned) block
// when there is one, so a kernel that reads beyond its row reads poison. Every entry outside the view holds
// the id of a block some sequence owns (or, with table_poison, an id outside the cache, as the entries past
// the last blocks then do too).
Tensor make_block_table(const CaseSpec& s, const Paging& pg, ValueRng& poison) {
  const auto seqs = static_cast<std::int64_t>(pg.blocks_per_seq.size());
  const std::int64_t stride = pg.max_blocks + s.table_pad_cols;
  const std::int64_t rows = s.table_rows_before + seqs + s.table_rows_after;
  Tensor full = make_padded(DType::kI32, {rows, stride}, 0, 0, poison);
  ValueRng fill(s.value_seed, kTableFill);
  std::size_t poisoned = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < stride; ++j)
      full.set({r, j}, s.table_poison ? poisoned_id(poisoned++, pg.total)
                                      : pg.placement[fill.below(static_cast<std::uint64_t>(pg.used))]);
  Tensor t = Tensor::view(full.storage(), {seqs, pg.max_blocks}, {stride, 1},
                          full.offset() + s.table_rows_before * stride);
  const std::int32_t filler = pg.total > pg.used ? pg.placement[static_cast<std::size_t>(pg.used)] : 0;
  std::size_t next = 0;
  for (std::int64_t q = 0; q < seqs; ++q) {
    for (std::int64_t j = 0; j < pg.max_blocks; ++j) {
      const bool used = j < pg.blocks_per_seq[static_cast<std::size_t>(q)];
      t.set({q, j}, used             ? pg.placement[next++]
                    : s.table_poison ? poisoned_id(poisoned++, pg.total)
                                     : filler);
    }
  }
  return t;
}

// The K and V caches as CaseSpec::kv_layout places them: storages of their own, or views of one tensor
// ([blocks, 2, bs, Hkv, D] or [2, blocks, bs, Hkv, D]). Every element starts as poison.
std::pair<Tensor, Tensor> make_caches(const CaseSpec& s, const Paging& pg, ValueRng& poison) {
  const auto& p = std::get<AttentionParams>(s.params);
  const Shape shape{pg.total, p.block_size, p.num_kv_heads, p.head_dim};
  if (s.kv_layout == KvLayout::kSeparate) {
    Tensor k = make_padded(s.kv_dtype, shape, 0, s.base_offset, poison);
    return {k, make_padded(s.kv_dtype, shape, 0, s.base_offset, poison)};
  }
  const std::int64_t block = p.block_size * p.num_kv_heads * p.head_dim;
  const bool interleaved = s.kv_layout == KvLayout::kBlockInterleaved;
  const Tensor all = make_padded(s.kv_dtype,
                                 interleaved ? Shape{pg.total, 2, p.block_size, p.num_kv_heads, p.head_dim}
                                             : Shape{2, pg.total, p.block_size, p.num_kv_heads, p.head_dim},
                                 0, s.base_offset, poison);
  Shape strides = contiguous_strides(shape);
  if (interleaved) strides[0] = 2 * block;
  const std::int64_t v_at = interleaved ? block : pg.total * block;
  return {Tensor::view(all.storage(), shape, strides, all.offset()),
          Tensor::view(all.storage(), shape, strides, all.offset() + v_at)};
}

// KV values are drawn for the slots the sequences own (in order of sequences and tokens) and stored with the
// fp8 formats' saturating quantisation (value / scale, as vLLM's quantised cache writes do); every other slot
// keeps its poison. A slot's Hkv * D elements are contiguous in every layout.
void fill_cache(Tensor& t, const CaseSpec& s, const Paging& pg, double scale, Distribution d, Stream stream) {
  const auto& p = std::get<AttentionParams>(s.params);
  const std::int64_t slot = p.num_kv_heads * p.head_dim;
  std::vector<std::int64_t> live;
  std::size_t next = 0;
  for (std::size_t q = 0; q < s.seq_lens.size(); ++q) {
    for (std::int64_t tok = 0; tok < s.seq_lens[q]; ++tok)
      live.push_back(t.offset() +
                     pg.placement[next + static_cast<std::size_t>(tok / p.block_size)] * t.strides()[0] +
                     tok % p.block_size * t.strides()[1]);
    next += static_cast<std::size_t>(pg.blocks_per_seq[q]);
  }
  ValueRng r(s.value_seed, stream);
  const bool fp8 = is_fp8(s.kv_dtype);
  const double mag = fp8 ? format_max(s.kv_dtype) * 0.5 : std::min(format_max(s.act_dtype) * 0.5, 0x1p64);
  const auto v = draw_values(d, s.act_dtype, static_cast<std::int64_t>(live.size()), slot, mag, r);
  const double inv = fp8 && d != Distribution::kNearMax ? 1.0 / scale : 1.0;
  Storage& st = *t.storage();
  std::vector<double> scaled(static_cast<std::size_t>(slot));
  for (std::size_t k = 0; k < live.size(); ++k) {
    for (std::size_t e = 0; e < scaled.size(); ++e) scaled[e] = v[k * scaled.size() + e] * inv;
    st.store_f64(live[k], 1, slot, scaled.data(), Overflow::kSaturate);
  }
}

// q [T, Hq, D]: heads D + row_pad apart; tokens q_token_pad further apart than the heads need (the q columns
// of a fused qkv output).
Tensor make_q(const CaseSpec& s, std::int64_t tokens, ValueRng& poison) {
  const auto& p = std::get<AttentionParams>(s.params);
  const Shape shape{tokens, p.num_q_heads, p.head_dim};
  if (s.q_token_pad == 0) return make_padded(s.act_dtype, shape, s.row_pad, s.base_offset, poison);
  const std::int64_t head = p.head_dim + s.row_pad, token = p.num_q_heads * head + s.q_token_pad;
  const Tensor all = make_padded(s.act_dtype, {tokens, token}, 0, s.base_offset, poison);
  return Tensor::view(all.storage(), shape, {token, head, 1}, all.offset());
}

Tensor i32_vector(const std::vector<std::int64_t>& v, ValueRng& poison) {
  Tensor t = make_padded(DType::kI32, {static_cast<std::int64_t>(v.size())}, 0, 0, poison);
  for (std::size_t i = 0; i < v.size(); ++i) t.set({static_cast<std::int64_t>(i)}, static_cast<double>(v[i]));
  return t;
}

Case materialize_attention(const CaseSpec& s, ValueRng& poison) {
  const auto& p = std::get<AttentionParams>(s.params);
  Case c;
  c.params = p;
  const std::int64_t tokens = std::accumulate(s.query_lens.begin(), s.query_lens.end(), std::int64_t{0});
  const Paging pg = plan_paging(s, p.block_size);
  ValueRng rq(s.value_seed, kQ), rs(s.value_seed, kSinks);
  Tensor q = make_q(s, tokens, poison);
  // Large logits: q scaled so that scale * q.k has a spread of ~hundreds (exp overflows without max
  // subtraction).
  const Distribution qd = s.distribution == Distribution::kNearMax ? Distribution::kNormal : s.distribution;
  fill(q, qd, tokens * p.num_q_heads, 0.0, rq);
  const Distribution kd =
      s.distribution == Distribution::kLargeLogits || s.distribution == Distribution::kNearMax
          ? Distribution::kNormal
          : s.distribution;
  c.tensors["q"] = q;
  auto [k_cache, v_cache] = make_caches(s, pg, poison);
  fill_cache(k_cache, s, pg, p.k_scale, kd, kK);
  fill_cache(v_cache, s, pg, p.v_scale,
             s.distribution == Distribution::kLargeLogits ? Distribution::kNormal : s.distribution, kV);
  c.tensors["k_cache"] = k_cache;
  c.tensors["v_cache"] = v_cache;
  c.tensors["block_table"] = make_block_table(s, pg, poison);
  inject_kv(s, pg, c);
  c.tensors["seq_lens"] = i32_vector(s.seq_lens, poison);
  std::vector<std::int64_t> starts{0};
  for (const auto ql : s.query_lens) starts.push_back(starts.back() + ql);
  c.tensors["query_start_loc"] = i32_vector(starts, poison);
  if (p.has_sinks) {
    Tensor sinks = make_padded(DType::kF32, {p.num_q_heads}, 0, 0, poison);
    std::vector<double> v(static_cast<std::size_t>(p.num_q_heads));
    for (auto& x : v) x = 2.0 * rs.normal();
    sinks.copy_from(v);
    c.tensors["sinks"] = sinks;
  }
  c.tensors["o"] =
      make_padded(s.act_dtype, {tokens, p.num_q_heads, p.head_dim}, s.row_pad, s.base_offset, poison);
  c.tensors["lse"] = make_padded(DType::kF32, {tokens, p.num_q_heads}, 0, s.base_offset, poison);
  add_new_kv(c, s.value_seed);
  return c;
}

// ---------------------------------------------------------------------------------------------------------------
// New tokens' K/V inputs

// A real key of the activation dtype that the cache write (value / scale, one rounding, saturating, as
// fill_cache stores) turns into the stored fp8 value `c`: a point drawn in the middle 80% of c's rounding
// interval, times the scale, rounded to act; where act's rounding still leaves the interval (act's subnormal
// range), act(c * scale), and c itself where that fails too (never met in generated cases: tested).
double input_for_fp8(DType kv, DType act, double c, double scale, ValueRng& rng) {
  if (!std::isfinite(c) || c == 0.0) return round_to(act, c * scale);
  const double m = std::fabs(c), down = next_down(kv, m), up_raw = next_up(kv, m);
  const double up = std::isfinite(up_raw) && up_raw > m ? up_raw : m + (m - down);
  const double lo = (down + m) / 2, hi = (m + up) / 2;
  const double x = std::copysign(lo + (0.1 + 0.8 * rng.uniform()) * (hi - lo), c);
  for (const double candidate : {round_to(act, x * scale), round_to(act, c * scale)})
    if (round_to(kv, candidate / scale, Overflow::kSaturate) == c) return candidate;
  return c;
}

}  // namespace

void add_new_kv(Case& c, std::uint64_t value_seed) {
  const auto& p = c.get<AttentionParams>();
  const DType act = c.tensor("q").dtype(), kv = c.tensor("k_cache").dtype();
  const std::int64_t tokens = c.tensor("q").size(0);
  const std::vector<double> lens = c.tensor("seq_lens").to_f64(), qsl = c.tensor("query_start_loc").to_f64();
  const Tensor& table = c.tensor("block_table");
  ValueRng rng(value_seed, kNewKv);
  for (const auto& [input, cache, scale] :
       {std::tuple{"k_new", "k_cache", p.k_scale}, std::tuple{"v_new", "v_cache", p.v_scale}}) {
    Tensor t = make_padded(act, {tokens, p.num_kv_heads, p.head_dim}, 0, 0, rng);
    // Rows of queries that have no key position (more queries than keys) stay 0.
    t.copy_from(std::vector<double>(static_cast<std::size_t>(t.numel()), 0.0));
    const Tensor& stored = c.tensor(cache);
    for (std::size_t s = 0; s < lens.size(); ++s) {
      const auto len = static_cast<std::int64_t>(lens[s]), start = static_cast<std::int64_t>(qsl[s]);
      const std::int64_t ql = static_cast<std::int64_t>(qsl[s + 1]) - start;
      for (std::int64_t pos = std::max<std::int64_t>(0, len - ql); pos < len; ++pos) {
        const auto block =
            static_cast<std::int64_t>(table.at({static_cast<std::int64_t>(s), pos / p.block_size}));
        for (std::int64_t g = 0; g < p.num_kv_heads; ++g)
          for (std::int64_t d = 0; d < p.head_dim; ++d) {
            const double v = stored.at({block, pos % p.block_size, g, d});
            t.set({start + pos - (len - ql), g, d},
                  is_fp8(kv) ? input_for_fp8(kv, act, v, scale, rng) : round_to(act, v * scale));
          }
      }
    }
    c.tensors[input] = t;
  }
}

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Special values

double special_value(Special sp, ValueRng& rng) {
  return sp == Special::kNanInput ? std::numeric_limits<double>::quiet_NaN()
                                  : rng.sign() * std::numeric_limits<double>::infinity();
}

// One element of a [rows, width] input row, drawn from the spec's own stream.
void inject_row_input(const CaseSpec& s, Tensor& t) {
  if (s.special != Special::kNanInput && s.special != Special::kInfInput) return;
  ValueRng rng(s.value_seed, kSpecial);
  const auto r = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(t.size(0))));
  const auto c = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(t.size(1))));
  t.set({r, c}, special_value(s.special, rng));
}

// One element of a slot a sequence owns: NaN in a key, +-inf in a value.
void inject_kv(const CaseSpec& s, const Paging& pg, Case& c) {
  if (s.special != Special::kNanInput && s.special != Special::kInfInput) return;
  const auto& p = std::get<AttentionParams>(s.params);
  ValueRng rng(s.value_seed, kSpecial);
  const auto seq = static_cast<std::size_t>(rng.below(s.seq_lens.size()));
  const auto tok = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(s.seq_lens[seq])));
  std::size_t first_block = 0;
  for (std::size_t q = 0; q < seq; ++q) first_block += static_cast<std::size_t>(pg.blocks_per_seq[q]);
  const std::int64_t block = pg.placement[first_block + static_cast<std::size_t>(tok / p.block_size)];
  const auto g = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(p.num_kv_heads)));
  const auto d = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(p.head_dim)));
  Tensor& cache = c.tensor(s.special == Special::kNanInput ? "k_cache" : "v_cache");
  cache.set({block, tok % p.block_size, g, d}, special_value(s.special, rng));
}

// ---------------------------------------------------------------------------------------------------------------
// JSON

std::string_view distribution_name(Distribution d) {
  switch (d) {
    case Distribution::kNormal:
      return "normal";
    case Distribution::kOutlierChannels:
      return "outlier_channels";
    case Distribution::kNearConstant:
      return "near_constant";
    case Distribution::kNearMax:
      return "near_max";
    case Distribution::kSubnormal:
      return "subnormal";
    case Distribution::kLargeLogits:
      return "large_logits";
  }
  return "normal";
}

std::string_view kv_layout_name(KvLayout l) {
  switch (l) {
    case KvLayout::kSeparate:
      return "separate";
    case KvLayout::kBlockInterleaved:
      return "block_interleaved";
    case KvLayout::kStacked:
      return "stacked";
  }
  return "separate";
}

constexpr Special kAllSpecials[] = {Special::kNone, Special::kNanInput, Special::kInfInput,
                                    Special::kMaskedRows};

constexpr Distribution kAllDistributions[] = {Distribution::kNormal,       Distribution::kOutlierChannels,
                                              Distribution::kNearConstant, Distribution::kNearMax,
                                              Distribution::kSubnormal,    Distribution::kLargeLogits};

[[noreturn]] void bad(std::string_view field, std::string_view why) {
  throw InvalidArgument(fmt::format("case spec field '{}': {}", field, why));
}

// The spec's fields are read through the checked accessors (json_fields.hpp); from_json names the spec in
// their FieldError.
double get_double(const nlohmann::json& j, const char* name, double min_value) {
  const double x = number_field(j, name);
  if (!std::isfinite(x) || x < min_value)
    bad(name, fmt::format("{} is not a finite number >= {}", x, min_value));
  return x;
}

// Fields added after format v1's first specs (issue #12 layouts) may be missing from older bundles: absent
// means the layout those bundles were drawn with.
std::int64_t get_int_or(const nlohmann::json& j, const char* name, std::int64_t min_value,
                        std::int64_t dflt) {
  return j.contains(name) ? int_field(j, name, min_value) : dflt;
}

DType get_dtype(const nlohmann::json& j, const char* name) {
  DType t{};
  const auto s = string_field(j, name);
  if (!parse_dtype(s, &t) || !is_float(t)) bad(name, fmt::format("unknown float dtype '{}'", s));
  return t;
}

WeightMode get_weight_mode(const nlohmann::json& j) {
  const auto s = string_field(j, "weight_mode");
  if (s == "plain") return WeightMode::kPlain;
  if (s == "one_plus") return WeightMode::kOnePlus;
  bad("weight_mode", fmt::format("unknown weight mode '{}' (plain, one_plus)", s));
}

std::string_view weight_mode_name(WeightMode m) {
  return m == WeightMode::kPlain ? "plain" : "one_plus";
}

std::vector<std::int64_t> get_int_list(const nlohmann::json& j, const char* name, std::int64_t min_value) {
  std::vector<std::int64_t> out;
  for (const auto& e : array_field(j, name)) out.push_back(int_value(e, name, min_value));
  return out;
}

nlohmann::json params_to_json(const OpParams& params) {
  return std::visit(
      [](const auto& p) -> nlohmann::json {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, RmsNormParams>) {
          return {{"eps", p.eps}, {"weight_mode", weight_mode_name(p.weight_mode)}, {"residual", p.residual}};
        } else if constexpr (std::is_same_v<P, DualRmsNormCatParams>) {
          return {{"eps", p.eps}, {"weight_mode", weight_mode_name(p.weight_mode)}};
        } else if constexpr (std::is_same_v<P, AttentionParams>) {
          return {{"num_q_heads", p.num_q_heads},
                  {"num_kv_heads", p.num_kv_heads},
                  {"head_dim", p.head_dim},
                  {"block_size", p.block_size},
                  {"scale", p.scale},
                  {"causal", p.causal},
                  {"window", p.window},
                  {"softcap", p.softcap},
                  {"k_scale", p.k_scale},
                  {"v_scale", p.v_scale},
                  {"has_sinks", p.has_sinks}};
        } else {
          return nlohmann::json::object();
        }
      },
      params);
}

OpParams params_from_json(OpKind op, const nlohmann::json& j) {
  switch (op) {
    case OpKind::kRmsNorm:
      return RmsNormParams{get_double(j, "eps", 0.0), get_weight_mode(j), bool_field(j, "residual")};
    case OpKind::kConcat:
      return ConcatParams{};
    case OpKind::kDualRmsNormCat:
      return DualRmsNormCatParams{get_double(j, "eps", 0.0), get_weight_mode(j)};
    case OpKind::kAttention: {
      AttentionParams p;
      p.num_q_heads = int_field(j, "num_q_heads", 1);
      p.num_kv_heads = int_field(j, "num_kv_heads", 1);
      p.head_dim = int_field(j, "head_dim", 1);
      p.block_size = int_field(j, "block_size", 1);
      p.scale = get_double(j, "scale", -std::numeric_limits<double>::max());
      p.causal = bool_field(j, "causal");
      p.window = int_field(j, "window", 0);
      p.softcap = get_double(j, "softcap", 0.0);
      p.k_scale = get_double(j, "k_scale", 0.0);
      p.v_scale = get_double(j, "v_scale", 0.0);
      p.has_sinks = bool_field(j, "has_sinks");
      return p;
    }
  }
  bad("op", "unknown op");
}

}  // namespace

std::string_view special_name(Special s) {
  switch (s) {
    case Special::kNone:
      return "none";
    case Special::kNanInput:
      return "nan_input";
    case Special::kInfInput:
      return "inf_input";
    case Special::kMaskedRows:
      return "masked_rows";
  }
  return "none";
}

// ---------------------------------------------------------------------------------------------------------------

Case materialize(const CaseSpec& spec) {
  ValueRng poison(spec.value_seed, kPoison);
  Case c;
  switch (spec.op) {
    case OpKind::kRmsNorm:
      c = materialize_rmsnorm(spec, poison);
      break;
    case OpKind::kConcat:
      c = materialize_concat(spec, poison);
      break;
    case OpKind::kDualRmsNormCat:
      c = materialize_dual(spec, poison);
      break;
    case OpKind::kAttention:
      c = materialize_attention(spec, poison);
      break;
  }
  c.op = spec.op;
  return c;
}

void to_json(nlohmann::json& j, const CaseSpec& s) {
  j = nlohmann::json{{"op", op_name(s.op)},
                     {"params", params_to_json(s.params)},
                     {"act_dtype", dtype_name(s.act_dtype)},
                     {"kv_dtype", dtype_name(s.kv_dtype)},
                     {"rows", s.rows},
                     {"hidden", s.hidden},
                     {"hidden_b", s.hidden_b},
                     {"query_lens", s.query_lens},
                     {"seq_lens", s.seq_lens},
                     {"spare_blocks", s.spare_blocks},
                     {"block_table_seed", s.block_table_seed},
                     {"table_pad_cols", s.table_pad_cols},
                     {"table_rows_before", s.table_rows_before},
                     {"table_rows_after", s.table_rows_after},
                     {"table_poison", s.table_poison},
                     {"q_token_pad", s.q_token_pad},
                     {"kv_layout", kv_layout_name(s.kv_layout)},
                     {"row_pad", s.row_pad},
                     {"base_offset", s.base_offset},
                     {"inplace_output", s.inplace_output},
                     {"contiguous_output", s.contiguous_output},
                     {"distribution", distribution_name(s.distribution)},
                     {"value_seed", s.value_seed},
                     {"special", special_name(s.special)}};
}

namespace {

CaseSpec spec_from_json(const nlohmann::json& j) {
  CaseSpec out;
  const auto op = string_field(j, "op");
  if (!parse_op(op, &out.op)) bad("op", fmt::format("unknown op '{}'", op));
  out.params = params_from_json(out.op, json_field(j, "params"));
  out.act_dtype = get_dtype(j, "act_dtype");
  out.kv_dtype = get_dtype(j, "kv_dtype");
  out.rows = int_field(j, "rows", 1);
  out.hidden = int_field(j, "hidden", 1);
  out.hidden_b = int_field(j, "hidden_b", 1);
  out.query_lens = get_int_list(j, "query_lens", 1);
  out.seq_lens = get_int_list(j, "seq_lens", 1);
  if (out.query_lens.size() != out.seq_lens.size()) bad("query_lens", "needs one entry per seq_lens entry");
  if (out.op == OpKind::kAttention && out.seq_lens.empty())
    bad("seq_lens", "attention needs at least one sequence");
  out.spare_blocks = int_field(j, "spare_blocks", 0);
  out.block_table_seed = u64_field(j, "block_table_seed");
  out.table_pad_cols = get_int_or(j, "table_pad_cols", 0, 0);
  out.table_rows_before = get_int_or(j, "table_rows_before", 0, 0);
  out.table_rows_after = get_int_or(j, "table_rows_after", 0, 0);
  out.table_poison = j.contains("table_poison") && bool_field(j, "table_poison");
  out.q_token_pad = get_int_or(j, "q_token_pad", 0, 0);
  if (j.contains("kv_layout")) {
    const auto layout = string_field(j, "kv_layout");
    const KvLayout all[] = {KvLayout::kSeparate, KvLayout::kBlockInterleaved, KvLayout::kStacked};
    const auto* l =
        std::find_if(std::begin(all), std::end(all), [&](KvLayout k) { return kv_layout_name(k) == layout; });
    if (l == std::end(all))
      bad("kv_layout", fmt::format("unknown layout '{}' (separate, block_interleaved, stacked)", layout));
    out.kv_layout = *l;
  }
  out.row_pad = int_field(j, "row_pad", 0);
  out.base_offset = int_field(j, "base_offset", 0);
  out.inplace_output = bool_field(j, "inplace_output");
  // Added after the first bundles were written: absent means the original layout (y shares x's).
  out.contiguous_output = j.contains("contiguous_output") && bool_field(j, "contiguous_output");
  const auto dist = string_field(j, "distribution");
  const auto* it = std::find_if(std::begin(kAllDistributions), std::end(kAllDistributions),
                                [&](Distribution d) { return distribution_name(d) == dist; });
  if (it == std::end(kAllDistributions)) bad("distribution", fmt::format("unknown distribution '{}'", dist));
  out.distribution = *it;
  out.value_seed = u64_field(j, "value_seed");
  // Added with special values: absent means none.
  if (j.contains("special")) {
    const auto sp = string_field(j, "special");
    const auto* hit = std::find_if(std::begin(kAllSpecials), std::end(kAllSpecials),
                                   [&](Special x) { return special_name(x) == sp; });
    if (hit == std::end(kAllSpecials)) bad("special", fmt::format("unknown special '{}'", sp));
    out.special = *hit;
  }
  return out;
}

}  // namespace

void from_json(const nlohmann::json& j, CaseSpec& s) {
  try {
    s = spec_from_json(j);
  } catch (const FieldError& e) {
    throw InvalidArgument(fmt::format("case spec {}", e.what()));
  }
}

}  // namespace driftcheck::fuzz
