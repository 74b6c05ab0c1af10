// Valid cases built by hand for tests (the tensor layout of case.hpp): deterministic values drawn from a
// seed, layouts and parameters chosen by the caller. Header-only so any test file can reuse it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "driftcheck/reference/case.hpp"

namespace driftcheck::builders {

// Where a 2-D tensor lives in its storage: rows `row_pad` elements wider than the row, the first element
// `offset` elements past a guard band of `guard` elements (Tensor::padded).
struct Layout {
  std::int64_t row_pad = 0;
  std::int64_t offset = 0;
  std::int64_t guard = 0;
};

inline Tensor matrix(DType t, std::int64_t rows, std::int64_t cols, const Layout& l = {}) {
  return Tensor::padded(t, {rows, cols}, cols + l.row_pad, l.offset, l.guard);
}

// Every element of t <- mean + stddev * N(0, 1), rounded to t's dtype.
inline void fill_normal(Tensor& t, std::mt19937_64& rng, double mean = 0.0, double stddev = 1.0) {
  std::normal_distribution<double> dist(mean, stddev);
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (double& x : v) x = dist(rng);
  t.copy_from(v);
}

inline Case rmsnorm_case(std::int64_t rows, std::int64_t hidden, DType dtype, const RmsNormParams& p,
                         std::uint64_t seed, const Layout& l = {}) {
  std::mt19937_64 rng(seed);
  Case c;
  c.op = OpKind::kRmsNorm;
  c.params = p;
  c.tensors["x"] = matrix(dtype, rows, hidden, l);
  c.tensors["w"] = Tensor::zeros(dtype, {hidden});
  c.tensors["y"] = matrix(dtype, rows, hidden, l);
  fill_normal(c.tensor("x"), rng);
  fill_normal(c.tensor("w"), rng, p.weight_mode == WeightMode::kPlain ? 1.0 : 0.0, 0.1);
  if (p.residual) {
    c.tensors["residual"] = matrix(dtype, rows, hidden, l);
    fill_normal(c.tensor("residual"), rng);
  }
  return c;
}

inline Case concat_case(std::int64_t rows, std::int64_t width_a, std::int64_t width_b, DType dtype,
                        std::uint64_t seed, const Layout& l = {}) {
  std::mt19937_64 rng(seed);
  Case c;
  c.op = OpKind::kConcat;
  c.params = ConcatParams{};
  c.tensors["a"] = matrix(dtype, rows, width_a, l);
  c.tensors["b"] = matrix(dtype, rows, width_b, l);
  c.tensors["out"] = matrix(dtype, rows, width_a + width_b, l);
  fill_normal(c.tensor("a"), rng);
  fill_normal(c.tensor("b"), rng);
  return c;
}

inline Case dual_case(std::int64_t rows, std::int64_t hidden, DType dtype, const DualRmsNormCatParams& p,
                      std::uint64_t seed, const Layout& l = {}) {
  std::mt19937_64 rng(seed);
  Case c;
  c.op = OpKind::kDualRmsNormCat;
  c.params = p;
  const double w_mean = p.weight_mode == WeightMode::kPlain ? 1.0 : 0.0;
  for (const char* name : {"e", "h"}) c.tensors[name] = matrix(dtype, rows, hidden, l);
  for (const char* name : {"w_e", "w_h"}) c.tensors[name] = Tensor::zeros(dtype, {hidden});
  c.tensors["out"] = matrix(dtype, rows, 2 * hidden, l);
  fill_normal(c.tensor("e"), rng);
  fill_normal(c.tensor("h"), rng, 0.0, 30.0);  // hidden states are larger than embeddings
  fill_normal(c.tensor("w_e"), rng, w_mean, 0.1);
  fill_normal(c.tensor("w_h"), rng, w_mean, 0.1);
  return c;
}

struct AttentionSpec {
  AttentionParams params;
  std::vector<std::int64_t> query_lens;  // one entry per sequence
  std::vector<std::int64_t> seq_lens;
  DType q_dtype = DType::kF32;  // q and o
  DType kv_dtype = DType::kF32;
  std::int64_t spare_blocks = 0;  // physical blocks no sequence uses
  bool shuffle_blocks = false;    // physical placement: a random permutation instead of in order
  bool poison_unused = true;      // NaN in every cache slot no sequence uses (a correct op never reads it)
  double q_stddev = 1.0;
};

// One query head, one KV head, head size 32, block size 16, scale 1, q and KV in `t`: the hand-built cases of
// the tests that follow one row's softmax.
inline AttentionSpec one_head(DType t, std::int64_t query_len, std::int64_t seq_len) {
  AttentionSpec s;
  s.params.num_q_heads = 1;
  s.params.num_kv_heads = 1;
  s.params.head_dim = 32;
  s.params.block_size = 16;
  s.params.scale = 1.0;
  s.q_dtype = t;
  s.kv_dtype = t;
  s.query_lens = {query_len};
  s.seq_lens = {seq_len};
  return s;
}

// One line for RapidCheck's counterexample output.
inline std::ostream& operator<<(std::ostream& os, const AttentionSpec& s) {
  const AttentionParams& p = s.params;
  os << "Hq " << p.num_q_heads << " Hkv " << p.num_kv_heads << " D " << p.head_dim << " bs " << p.block_size
     << " scale " << p.scale << " causal " << p.causal << " window " << p.window << " softcap " << p.softcap
     << " k_scale " << p.k_scale << " v_scale " << p.v_scale << " sinks " << p.has_sinks << " q "
     << dtype_name(s.q_dtype) << " kv " << dtype_name(s.kv_dtype) << " spare " << s.spare_blocks
     << " shuffle " << s.shuffle_blocks << " seqs";
  for (std::size_t i = 0; i < s.seq_lens.size(); ++i)
    os << " (q " << s.query_lens[i] << ", L " << s.seq_lens[i] << ")";
  return os;
}

inline std::int64_t blocks_for(std::int64_t len, std::int64_t block_size) {
  return (len + block_size - 1) / block_size;
}

// block_table [S, max_blocks]: sequence s's blocks in order; unused entries -1 (a correct op never reads
// them).
inline Tensor block_table_for(const AttentionSpec& s, std::mt19937_64& rng, std::int64_t* num_blocks) {
  const std::int64_t bs = s.params.block_size;
  std::int64_t used = 0;
  std::int64_t widest = 1;
  for (std::int64_t len : s.seq_lens) {
    used += blocks_for(len, bs);
    widest = std::max(widest, blocks_for(len, bs));
  }
  *num_blocks = std::max<std::int64_t>(used + s.spare_blocks, 1);
  std::vector<std::int64_t> physical(static_cast<std::size_t>(*num_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  if (s.shuffle_blocks) std::shuffle(physical.begin(), physical.end(), rng);
  const auto seqs = static_cast<std::int64_t>(s.seq_lens.size());
  Tensor table = Tensor::zeros(DType::kI32, {seqs, widest});
  std::size_t next = 0;
  for (std::int64_t i = 0; i < seqs; ++i) {
    for (std::int64_t j = 0; j < widest; ++j) {
      const bool used_entry = j < blocks_for(s.seq_lens[static_cast<std::size_t>(i)], bs);
      table.set({i, j}, used_entry ? static_cast<double>(physical[next++]) : -1.0);
    }
  }
  return table;
}

// NaN into every cache slot outside [0, seq_len) of every sequence (spare blocks and the tails of last
// blocks).
inline void poison_unused_slots(Tensor& cache, const Tensor& table,
                                const std::vector<std::int64_t>& seq_lens) {
  const std::int64_t bs = cache.size(1);
  std::vector<bool> used(static_cast<std::size_t>(cache.size(0) * bs), false);
  for (std::size_t s = 0; s < seq_lens.size(); ++s) {
    for (std::int64_t t = 0; t < seq_lens[s]; ++t) {
      const auto block = static_cast<std::int64_t>(table.at({static_cast<std::int64_t>(s), t / bs}));
      used[static_cast<std::size_t>(block * bs + t % bs)] = true;
    }
  }
  for (std::int64_t slot = 0; slot < cache.size(0) * bs; ++slot) {
    if (used[static_cast<std::size_t>(slot)]) continue;
    for (std::int64_t h = 0; h < cache.size(2); ++h) {
      for (std::int64_t d = 0; d < cache.size(3); ++d) cache.set({slot / bs, slot % bs, h, d}, NAN);
    }
  }
}

// MiniMax-M3's attention (64 q heads, 4 KV heads, head size 128, block size 128, bf16 q and KV cache) with
// the given sequences, blocks in shuffled order.
inline AttentionSpec minimax_m3_spec(std::vector<std::int64_t> seq_lens,
                                     std::vector<std::int64_t> query_lens) {
  AttentionSpec s;
  s.params.num_q_heads = 64;
  s.params.num_kv_heads = 4;
  s.params.head_dim = 128;
  s.params.block_size = 128;
  s.params.scale = 1.0 / std::sqrt(128.0);
  s.q_dtype = DType::kBF16;
  s.kv_dtype = DType::kBF16;
  s.seq_lens = std::move(seq_lens);
  s.query_lens = std::move(query_lens);
  s.shuffle_blocks = true;
  return s;
}

inline Case attention_case(const AttentionSpec& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const AttentionParams& p = s.params;
  Case c;
  c.op = OpKind::kAttention;
  c.params = p;
  const std::int64_t tokens = std::accumulate(s.query_lens.begin(), s.query_lens.end(), std::int64_t{0});
  std::int64_t num_blocks = 0;
  c.tensors["block_table"] = block_table_for(s, rng, &num_blocks);
  const auto seqs = static_cast<std::int64_t>(s.seq_lens.size());
  c.tensors["seq_lens"] = Tensor::zeros(DType::kI32, {seqs});
  c.tensors["query_start_loc"] = Tensor::zeros(DType::kI32, {seqs + 1});
  for (std::int64_t i = 0; i < seqs; ++i) {
    const auto u = static_cast<std::size_t>(i);
    c.tensor("seq_lens").set({i}, static_cast<double>(s.seq_lens[u]));
    c.tensor("query_start_loc")
        .set({i + 1}, c.tensor("query_start_loc").at({i}) + static_cast<double>(s.query_lens[u]));
  }
  c.tensors["q"] = Tensor::zeros(s.q_dtype, {tokens, p.num_q_heads, p.head_dim});
  fill_normal(c.tensor("q"), rng, 0.0, s.q_stddev);
  for (const char* name : {"k_cache", "v_cache"}) {
    c.tensors[name] = Tensor::zeros(s.kv_dtype, {num_blocks, p.block_size, p.num_kv_heads, p.head_dim});
    fill_normal(c.tensor(name), rng);
    if (s.poison_unused) poison_unused_slots(c.tensor(name), c.tensor("block_table"), s.seq_lens);
  }
  if (p.has_sinks) {
    c.tensors["sinks"] = Tensor::zeros(DType::kF32, {p.num_q_heads});
    fill_normal(c.tensor("sinks"), rng);
  }
  c.tensors["o"] = Tensor::zeros(s.q_dtype, {tokens, p.num_q_heads, p.head_dim});
  c.tensors["lse"] = Tensor::zeros(DType::kF32, {tokens, p.num_q_heads});
  return c;
}

}  // namespace driftcheck::builders
