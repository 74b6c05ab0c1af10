#include "driftcheck/reference/reference.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace driftcheck {
namespace {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Eigen picks its matrix-product blocking from the CPU's cache sizes, and the depth block (kc, from the L1
// size) sets the order of the sums in q k^T and s v: the same golden case gave references up to 2^-35 apart
// (relative, in the smallest elements) on a 32 KiB-L1 AMD EPYC and on the 48 KiB-L1 machines the golden files
// were recorded on. Pinned at start-up to those sizes, before any product, the fp64 reference has the same
// bits on every machine (golden/README.md; test Reference.MatrixBlockingIsPinnedSoBitsDoNotDependOnTheCpu).
const bool kBlockingPinned = [] {
  Eigen::setCpuCacheSizes(kReferenceL1Bytes, kReferenceL2Bytes, kReferenceL3Bytes);
  return true;
}();

// Storage index of element (i0, i1, ..., 0) of t: the start of an innermost row, without per-element checks
// (load_f64 checks the whole run).
std::int64_t row_base(const Tensor& t, std::initializer_list<std::int64_t> leading) {
  std::int64_t i = t.offset();
  std::size_t d = 0;
  for (std::int64_t v : leading) i += v * t.strides()[d++];
  return i;
}

void load_row(const Tensor& t, std::initializer_list<std::int64_t> leading, double* out) {
  t.storage()->load_f64(row_base(t, leading), t.strides().back(), t.shape().back(), out);
}

// Writes n values at linear position pos of a contiguous fp64 output.
void put(Tensor& out, std::int64_t pos, const double* v, std::int64_t n) {
  out.storage()->store_f64(pos, 1, n, v);
}

std::vector<std::int64_t> ints(const Tensor& t) {
  const std::vector<double> v = t.to_f64();
  return {v.begin(), v.end()};
}

// rmsnorm of every row of x (plus residual, when given) into columns [col, col + H) of `out` ([N, W], fp64):
// z = x + r, y_i = z_i / sqrt(sum(z^2) / H + eps) * w'_i with w' = w or 1 + w. The one definition that
// rmsnorm and dual_rmsnorm_cat share, so the fused op equals the concat of two rmsnorms bit for bit.
void rmsnorm_rows(const Tensor& x, const Tensor* residual, const Tensor& w, double eps, WeightMode mode,
                  Tensor& out, std::int64_t col, Tensor* residual_out) {
  const std::int64_t rows = x.size(0);
  const std::int64_t h = x.size(1);
  std::vector<double> weight(static_cast<std::size_t>(h));
  load_row(w, {}, weight.data());
  if (mode == WeightMode::kOnePlus) {
    for (double& v : weight) v += 1.0;
  }
  std::vector<double> z(static_cast<std::size_t>(h));
  std::vector<double> r(static_cast<std::size_t>(h));
  std::vector<double> y(static_cast<std::size_t>(h));
  for (std::int64_t n = 0; n < rows; ++n) {
    load_row(x, {n}, z.data());
    if (residual != nullptr) {
      load_row(*residual, {n}, r.data());
      for (std::size_t i = 0; i < z.size(); ++i) z[i] += r[i];
      put(*residual_out, n * h, z.data(), h);
    }
    double sum_sq = 0.0;
    for (double v : z) sum_sq += v * v;
    const double rms = std::sqrt(sum_sq / static_cast<double>(h) + eps);
    for (std::size_t i = 0; i < z.size(); ++i) y[i] = z[i] / rms * weight[i];
    put(out, n * out.size(1) + col, y.data(), h);
  }
}

}  // namespace

Outputs reference_rmsnorm(const Case& c) {
  validate(c);
  const auto& p = c.get<RmsNormParams>();
  const Tensor& x = c.tensor("x");
  Outputs out;
  Tensor& y = out["y"] = Tensor::zeros(DType::kF64, x.shape());
  Tensor* res_out = p.residual ? &(out["residual"] = Tensor::zeros(DType::kF64, x.shape())) : nullptr;
  rmsnorm_rows(x, p.residual ? &c.tensor("residual") : nullptr, c.tensor("w"), p.eps, p.weight_mode, y, 0,
               res_out);
  return out;
}

Outputs reference_dual_rmsnorm_cat(const Case& c) {
  validate(c);
  const auto& p = c.get<DualRmsNormCatParams>();
  const Tensor& e = c.tensor("e");
  Outputs out;
  Tensor& o = out["out"] = Tensor::zeros(DType::kF64, {e.size(0), 2 * e.size(1)});
  rmsnorm_rows(e, nullptr, c.tensor("w_e"), p.eps, p.weight_mode, o, 0, nullptr);
  rmsnorm_rows(c.tensor("h"), nullptr, c.tensor("w_h"), p.eps, p.weight_mode, o, e.size(1), nullptr);
  return out;
}

Outputs reference_concat(const Case& c) {
  validate(c);
  const Tensor& a = c.tensor("a");
  const Tensor& b = c.tensor("b");
  const std::int64_t width = a.size(1) + b.size(1);
  Outputs out;
  Tensor& o = out["out"] = Tensor::zeros(DType::kF64, {a.size(0), width});
  std::vector<double> row(static_cast<std::size_t>(width));
  for (std::int64_t n = 0; n < a.size(0); ++n) {
    load_row(a, {n}, row.data());
    load_row(b, {n}, row.data() + a.size(1));
    put(o, n * width, row.data(), width);
  }
  return out;
}

namespace {

// One sequence's attention for one kv head and its group of q heads (GQA: all G q heads that share the kv
// head are computed together, as rows of one GEMM). K and V are gathered once from the paged cache into
// contiguous fp64 matrices; queries are processed in tiles whose key range is the union of their rows'
// visible ranges, so a causal or windowed prefill skips the masked blocks.
class AttentionHead {
 public:
  AttentionHead(const Case& c, const std::vector<std::int64_t>& table_row, std::int64_t seq_len)
      : c_(c), p_(c.get<AttentionParams>()), table_row_(table_row), len_(seq_len) {}

  // Gathers logical tokens [0, len) of kv head g from the cache; with NewKv::kInputs and a query length
  // above 1, the new tokens' rows (positions >= len - q_len) from k_new / v_new instead.
  void gather(std::int64_t g, NewKv source, std::int64_t first, std::int64_t q_len) {
    gather_cache(g);
    if (source == NewKv::kCache || q_len <= 1) return;
    for (std::int64_t t = std::max<std::int64_t>(0, len_ - q_len); t < len_; ++t) {
      const std::int64_t token = first + t - (len_ - q_len);
      load_input("k_new", token, g, p_.k_scale, k_.row(t).data());
      load_input("v_new", token, g, p_.v_scale, v_.row(t).data());
    }
    count_nonfinite_v();
  }

 private:
  // An input row holds the real key (value); the logits and outputs multiply every row by k_scale (v_scale)
  // afterwards, so the row is stored divided by it: one fp64 rounding (2^-53 relative) where the scale is not
  // a power of two, none for the usual scale 1.
  void load_input(std::string_view name, std::int64_t token, std::int64_t g, double scale,
                  double* row) const {
    load_row(c_.tensor(name), {token, g}, row);
    if (scale != 1.0)
      for (std::int64_t d = 0; d < p_.head_dim; ++d) row[d] /= scale;
  }

  void count_nonfinite_v() {
    for (std::int64_t t = 0; t < len_; ++t)
      nonfinite_v_[static_cast<std::size_t>(t) + 1] =
          nonfinite_v_[static_cast<std::size_t>(t)] + !v_.row(t).allFinite();
  }

  void gather_cache(std::int64_t g) {
    k_.resize(len_, p_.head_dim);
    v_.resize(len_, p_.head_dim);
    nonfinite_v_.assign(static_cast<std::size_t>(len_) + 1, 0);
    const Tensor& kc = c_.tensor("k_cache");
    const Tensor& vc = c_.tensor("v_cache");
    for (std::int64_t t = 0; t < len_; ++t) {
      const std::int64_t block = table_row_[static_cast<std::size_t>(t / p_.block_size)];
      load_row(kc, {block, t % p_.block_size, g}, k_.row(t).data());
      load_row(vc, {block, t % p_.block_size, g}, v_.row(t).data());
    }
    count_nonfinite_v();
  }

 public:
  // Visible keys [lo, hi) of the query at absolute position pos (case.hpp's definition).
  std::pair<std::int64_t, std::int64_t> visible(std::int64_t pos) const {
    const std::int64_t lo = p_.window > 0 ? std::max<std::int64_t>(0, pos - p_.window + 1) : 0;
    const std::int64_t hi = p_.causal ? std::min(len_, pos + 1) : len_;
    return {lo, std::max(lo, hi)};
  }

  // Queries [j0, j1) of the sequence (its first query at token `first`) against kv head g; writes o and lse.
  void run_tile(std::int64_t g, std::int64_t first, std::int64_t q_len, std::int64_t j0, std::int64_t j1,
                Outputs& out) {
    const std::int64_t group = p_.num_q_heads / p_.num_kv_heads;
    const std::int64_t rows = (j1 - j0) * group;
    const std::int64_t base_pos = len_ - q_len;
    const std::int64_t lo = visible(base_pos + j0).first;  // visible ranges only move right as pos grows
    const std::int64_t hi = visible(base_pos + j1 - 1).second;
    const std::int64_t n = std::max<std::int64_t>(0, hi - lo);
    Matrix q(rows, p_.head_dim);
    const Tensor& qt = c_.tensor("q");
    for (std::int64_t r = 0; r < rows; ++r)
      load_row(qt, {first + j0 + r / group, g * group + r % group}, q.row(r).data());
    Matrix s(rows, n);
    s.noalias() = q * k_.middleRows(lo, n).transpose();
    s *= p_.scale * p_.k_scale;
    if (p_.softcap > 0.0) {
      const double cap = p_.softcap;
      s = s.unaryExpr([cap](double v) { return cap * std::tanh(v / cap); });
    }
    Eigen::VectorXd lse(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto [a, b] = visible(base_pos + j0 + r / group);
      lse[r] = softmax_row(s.row(r), std::max(a, lo) - lo, std::min(b, hi) - lo, g * group + r % group);
    }
    Matrix o(rows, p_.head_dim);
    if (nonfinite_v_[static_cast<std::size_t>(hi)] == nonfinite_v_[static_cast<std::size_t>(lo)]) {
      o.noalias() = s * v_.middleRows(lo, n);
    } else {
      // A masked weight is an exact 0 but 0 * NaN is NaN: rows are multiplied by their visible keys only, so
      // NaN/Inf in keys a row does not see (poisoned slots, outside its window) cannot leak into it.
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto [a, b] = visible(base_pos + j0 + r / group);
        o.row(r).noalias() = s.row(r).segment(a - lo, b - a) * v_.middleRows(a, b - a);
      }
    }
    o *= p_.v_scale;
    write(g, first + j0, rows, o, lse, out);
  }

 private:
  // Replaces row[a, b) (0 <= a <= b <= size) by its softmax weights, with the sink in the denominator, and
  // the rest of the row by 0; returns lse.
  template <class Row>
  double softmax_row(Row&& row, std::int64_t a, std::int64_t b, std::int64_t head) {
    const bool sink = p_.has_sinks;
    const double sink_logit = sink ? c_.tensor("sinks").at({head}) : 0.0;
    row.head(a).setZero();
    row.tail(row.size() - b).setZero();
    if (b == a && !sink) return -std::numeric_limits<double>::infinity();
    double m = sink ? sink_logit : -std::numeric_limits<double>::infinity();
    if (b > a) m = std::max(m, row.segment(a, b - a).maxCoeff());
    double sum = sink ? std::exp(sink_logit - m) : 0.0;
    for (std::int64_t t = a; t < b; ++t) {
      row[t] = std::exp(row[t] - m);
      sum += row[t];
    }
    if (b > a) row.segment(a, b - a) /= sum;
    return m + std::log(sum);
  }

  void write(std::int64_t g, std::int64_t token0, std::int64_t rows, const Matrix& o,
             const Eigen::VectorXd& lse, Outputs& out) const {
    const std::int64_t group = p_.num_q_heads / p_.num_kv_heads;
    Tensor& ot = out["o"];
    Tensor& lt = out["lse"];
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t token = token0 + r / group;
      const std::int64_t head = g * group + r % group;
      put(ot, (token * p_.num_q_heads + head) * p_.head_dim, o.row(r).data(), p_.head_dim);
      put(lt, token * p_.num_q_heads + head, &lse[r], 1);
    }
  }

  const Case& c_;
  const AttentionParams& p_;
  const std::vector<std::int64_t>& table_row_;
  std::int64_t len_;
  Matrix k_;
  Matrix v_;
  std::vector<std::int64_t> nonfinite_v_;  // prefix counts of V rows holding NaN/Inf
};

// Rows (query x head pairs) per tile: large enough for GEMM efficiency, small enough that a causal tile
// computes few masked logits (a tile of m queries wastes about m/2 keys per query at the diagonal).
constexpr std::int64_t kTileRows = 256;

}  // namespace

Outputs reference_attention(const Case& c, NewKv source) {
  validate(c);
  const auto& p = c.get<AttentionParams>();
  const std::int64_t tokens = c.tensor("q").size(0);
  Outputs out;
  out["o"] = Tensor::zeros(DType::kF64, {tokens, p.num_q_heads, p.head_dim});
  out["lse"] = Tensor::zeros(DType::kF64, {tokens, p.num_q_heads});
  const Tensor& table = c.tensor("block_table");
  const std::vector<std::int64_t> tab = ints(table);
  const std::vector<std::int64_t> lens = ints(c.tensor("seq_lens"));
  const std::vector<std::int64_t> qsl = ints(c.tensor("query_start_loc"));
  const std::int64_t tile_q = std::max<std::int64_t>(1, kTileRows / (p.num_q_heads / p.num_kv_heads));
  for (std::size_t s = 0; s < lens.size(); ++s) {
    const auto row_begin = tab.begin() + static_cast<std::ptrdiff_t>(s) * table.size(1);
    const std::vector<std::int64_t> table_row(row_begin, row_begin + table.size(1));
    const std::int64_t q_len = qsl[s + 1] - qsl[s];
    AttentionHead head(c, table_row, lens[s]);
    for (std::int64_t g = 0; g < p.num_kv_heads && q_len > 0; ++g) {
      head.gather(g, source, qsl[s], q_len);
      for (std::int64_t j0 = 0; j0 < q_len; j0 += tile_q) {
        head.run_tile(g, qsl[s], q_len, j0, std::min(q_len, j0 + tile_q), out);
      }
    }
  }
  return out;
}

Outputs reference(const Case& c) {
  switch (c.op) {
    case OpKind::kRmsNorm:
      return reference_rmsnorm(c);
    case OpKind::kConcat:
      return reference_concat(c);
    case OpKind::kDualRmsNormCat:
      return reference_dual_rmsnorm_cat(c);
    case OpKind::kAttention:
      return reference_attention(c);
  }
  throw InvalidArgument("reference: unknown op");
}

}  // namespace driftcheck
