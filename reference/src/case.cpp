#include "driftcheck/reference/case.hpp"

#include <array>
#include <cmath>
#include <unordered_map>
#include <utility>

namespace driftcheck {

const Tensor& Case::tensor(std::string_view name) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) {
    throw InvalidArgument(std::string(op_name(op)) + ": case has no tensor '" + std::string(name) + "'");
  }
  return it->second;
}

Tensor& Case::tensor(std::string_view name) {
  return const_cast<Tensor&>(static_cast<const Case&>(*this).tensor(name));
}

Case Case::clone() const {
  Case out;
  out.op = op;
  out.params = params;
  out.seed = seed;
  out.index = index;
  std::unordered_map<const Storage*, std::shared_ptr<Storage>> copies;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) {
      out.tensors.emplace(name, Tensor());
      continue;
    }
    auto& copy = copies[t.storage().get()];
    if (!copy) copy = std::make_shared<Storage>(*t.storage());
    out.tensors.emplace(name, Tensor::view(copy, t.shape(), t.strides(), t.offset()));
  }
  return out;
}

OpSignature op_signature(const Case& c) {
  switch (c.op) {
    case OpKind::kRmsNorm:
      if (c.has("residual")) return {{"x", "w", "residual"}, {"y", "residual"}};
      return {{"x", "w"}, {"y"}};
    case OpKind::kConcat:
      return {{"a", "b"}, {"out"}};
    case OpKind::kDualRmsNormCat:
      return {{"e", "h", "w_e", "w_h"}, {"out"}};
    case OpKind::kAttention: {
      OpSignature s{{"q", "k_cache", "v_cache", "block_table", "seq_lens", "query_start_loc"}, {"o", "lse"}};
      if (c.has("sinks")) s.inputs.emplace_back("sinks");
      if (c.has("k_new")) s.inputs.emplace_back("k_new");
      if (c.has("v_new")) s.inputs.emplace_back("v_new");
      return s;
    }
  }
  throw InvalidArgument("op_signature: unknown op");
}

namespace {
constexpr std::array<std::pair<OpKind, std::string_view>, 4> kOpNames{{
    {OpKind::kRmsNorm, "rmsnorm"},
    {OpKind::kConcat, "concat"},
    {OpKind::kDualRmsNormCat, "dual_rmsnorm_cat"},
    {OpKind::kAttention, "attention"},
}};
}  // namespace

std::string_view op_name(OpKind op) {
  for (const auto& [k, name] : kOpNames) {
    if (k == op) return name;
  }
  return "unknown";
}

bool parse_op(std::string_view name, OpKind* out) {
  for (const auto& [k, n] : kOpNames) {
    if (n == name) {
      *out = k;
      return true;
    }
  }
  return false;
}

namespace {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Checks shared by every op; each message starts with the op's name so a one-line error says where it came
// from.
class Checker {
 public:
  explicit Checker(const Case& c) : c_(c), op_(op_name(c.op)) {}

  [[noreturn]] void fail(const std::string& msg) const {
    throw InvalidArgument(std::string(op_) + ": " + msg);
  }
  void require(bool ok, const std::string& msg) const {
    if (!ok) fail(msg);
  }

  const Tensor& tensor(std::string_view name) const {
    if (!c_.has(name)) fail("missing tensor '" + std::string(name) + "'");
    const Tensor& t = c_.tensor(name);
    if (!t.defined()) fail("tensor '" + std::string(name) + "' is undefined");
    return t;
  }
  const Tensor& shaped(std::string_view name, const Shape& shape) const {
    const Tensor& t = tensor(name);
    if (t.shape() != shape) {
      fail("tensor '" + std::string(name) + "' has shape " + shape_str(t.shape()) + ", expected " +
           shape_str(shape));
    }
    return t;
  }
  const Tensor& float_tensor(std::string_view name, const Shape& shape) const {
    const Tensor& t = shaped(name, shape);
    if (!is_float(t.dtype())) fail("tensor '" + std::string(name) + "' must be a float dtype, not i32");
    return t;
  }
  const Tensor& int_tensor(std::string_view name, const Shape& shape) const {
    const Tensor& t = shaped(name, shape);
    if (t.dtype() != DType::kI32) {
      fail("tensor '" + std::string(name) + "' must be i32, not " + std::string(dtype_name(t.dtype())));
    }
    return t;
  }
  void same_dtype(std::string_view a, std::string_view b) const {
    const DType da = tensor(a).dtype();
    const DType db = tensor(b).dtype();
    if (da != db) {
      fail("tensors '" + std::string(a) + "' (" + std::string(dtype_name(da)) + ") and '" + std::string(b) +
           "' (" + std::string(dtype_name(db)) + ") must have one dtype");
    }
  }
  // A matrix [N, H] with N, H read from it (H >= 1).
  const Tensor& matrix(std::string_view name) const {
    const Tensor& t = tensor(name);
    require(t.dim() == 2,
            "tensor '" + std::string(name) + "' must be 2-D, has shape " + shape_str(t.shape()));
    require(t.size(1) >= 1, "tensor '" + std::string(name) + "' has an empty row");
    return float_tensor(name, t.shape());
  }
  template <class P>
  const P& params() const {
    if (!std::holds_alternative<P>(c_.params)) fail("case holds the parameters of another op");
    return std::get<P>(c_.params);
  }
  void eps(double e) const {
    require(std::isfinite(e) && e >= 0.0, "eps " + std::to_string(e) + " must be >= 0");
  }

 private:
  const Case& c_;
  std::string_view op_;
};

void validate_rmsnorm(const Case& c, const Checker& k) {
  const auto& p = k.params<RmsNormParams>();
  k.eps(p.eps);
  const Tensor& x = k.matrix("x");
  k.float_tensor("w", {x.size(1)});
  k.float_tensor("y", x.shape());
  k.require(p.residual == c.has("residual"), p.residual
                                                 ? "params.residual is set but tensor 'residual' is missing"
                                                 : "tensor 'residual' given but params.residual is false");
  if (p.residual) k.float_tensor("residual", x.shape());
}

void validate_concat(const Checker& k) {
  k.params<ConcatParams>();
  const Tensor& a = k.matrix("a");
  const Tensor& b = k.matrix("b");
  k.require(a.size(0) == b.size(0),
            "a has " + std::to_string(a.size(0)) + " rows, b " + std::to_string(b.size(0)));
  k.float_tensor("out", {a.size(0), a.size(1) + b.size(1)});
  k.same_dtype("a", "b");
  k.same_dtype("a", "out");
}

void validate_dual(const Checker& k) {
  const auto& p = k.params<DualRmsNormCatParams>();
  k.eps(p.eps);
  const Tensor& e = k.matrix("e");
  k.float_tensor("h", e.shape());
  k.float_tensor("w_e", {e.size(1)});
  k.float_tensor("w_h", {e.size(1)});
  k.float_tensor("out", {e.size(0), 2 * e.size(1)});
  k.same_dtype("e", "h");
  k.same_dtype("w_e", "w_h");
}

void validate_attention_params(const AttentionParams& p, const Checker& k) {
  k.require(p.num_q_heads >= 1 && p.num_kv_heads >= 1 && p.head_dim >= 1 && p.block_size >= 1,
            "num_q_heads, num_kv_heads, head_dim and block_size must be >= 1");
  k.require(p.num_q_heads % p.num_kv_heads == 0, "num_q_heads " + std::to_string(p.num_q_heads) +
                                                     " is not a multiple of num_kv_heads " +
                                                     std::to_string(p.num_kv_heads));
  k.require(std::isfinite(p.scale), "scale must be finite");
  k.require(p.window >= 0, "window " + std::to_string(p.window) + " must be >= 0");
  k.require(std::isfinite(p.softcap) && p.softcap >= 0.0, "softcap must be finite and >= 0");
  k.require(std::isfinite(p.k_scale) && std::isfinite(p.v_scale), "k_scale and v_scale must be finite");
}

// Sequence lengths, query lengths and block tables against each other and the cache.
void validate_batch(const Checker& k, const AttentionParams& p, std::int64_t num_tokens,
                    std::int64_t num_blocks) {
  const std::int64_t block_size = p.block_size;
  const Tensor& table = k.tensor("block_table");
  k.require(table.dim() == 2,
            "block_table must be 2-D [num_seqs, max_blocks], has shape " + shape_str(table.shape()));
  const std::int64_t seqs = table.size(0);
  const std::vector<double> tab = k.int_tensor("block_table", table.shape()).to_f64();
  const std::vector<double> lens = k.int_tensor("seq_lens", {seqs}).to_f64();
  const std::vector<double> qsl = k.int_tensor("query_start_loc", {seqs + 1}).to_f64();
  k.require(qsl[0] == 0, "query_start_loc[0] must be 0");
  k.require(qsl[static_cast<std::size_t>(seqs)] == static_cast<double>(num_tokens),
            "query_start_loc ends at " + std::to_string(static_cast<std::int64_t>(qsl.back())) + ", q has " +
                std::to_string(num_tokens) + " tokens");
  for (std::int64_t s = 0; s < seqs; ++s) {
    const auto i = static_cast<std::size_t>(s);
    const auto len = static_cast<std::int64_t>(lens[i]);
    const auto q_len = static_cast<std::int64_t>(qsl[i + 1] - qsl[i]);
    const std::string seq = "sequence " + std::to_string(s) + ": ";
    k.require(q_len >= 0, "query_start_loc is not monotonic at " + std::to_string(s));
    k.require(len >= 0, seq + "seq_len " + std::to_string(len) + " < 0");
    // Causal queries beyond the keys sit at negative positions and see nothing (fully masked rows, as
    // FlashAttention allows for seqlen_q > seqlen_k); without causality such a query has no defined position.
    k.require(p.causal || q_len <= len, seq + "query length " + std::to_string(q_len) + " > seq_len " +
                                            std::to_string(len) + " in a non-causal case");
    const std::int64_t blocks = (len + block_size - 1) / block_size;
    k.require(blocks <= table.size(1), seq + "seq_len " + std::to_string(len) + " needs " +
                                           std::to_string(blocks) + " blocks, block_table has " +
                                           std::to_string(table.size(1)));
    for (std::int64_t j = 0; j < blocks; ++j) {
      const auto b = static_cast<std::int64_t>(tab[i * static_cast<std::size_t>(table.size(1)) + j]);
      k.require(b >= 0 && b < num_blocks, "block_table[" + std::to_string(s) + "][" + std::to_string(j) +
                                              "] = " + std::to_string(b) + " outside the cache's " +
                                              std::to_string(num_blocks) + " blocks");
    }
  }
}

void validate_attention(const Case& c, const Checker& k) {
  const auto& p = k.params<AttentionParams>();
  validate_attention_params(p, k);
  const Tensor& q = k.tensor("q");
  k.require(q.dim() == 3, "q must be 3-D [T, Hq, D], has shape " + shape_str(q.shape()));
  const std::int64_t tokens = q.size(0);
  k.float_tensor("q", {tokens, p.num_q_heads, p.head_dim});
  const Tensor& kc = k.tensor("k_cache");
  k.require(kc.dim() == 4,
            "k_cache must be 4-D [num_blocks, block_size, Hkv, D], has shape " + shape_str(kc.shape()));
  const std::int64_t blocks = kc.size(0);
  const Shape cache{blocks, p.block_size, p.num_kv_heads, p.head_dim};
  k.float_tensor("k_cache", cache);
  k.float_tensor("v_cache", cache);
  k.same_dtype("k_cache", "v_cache");
  validate_batch(k, p, tokens, blocks);
  k.require(p.has_sinks == c.has("sinks"), p.has_sinks
                                               ? "params.has_sinks is set but tensor 'sinks' is missing"
                                               : "tensor 'sinks' given but params.has_sinks is false");
  if (p.has_sinks) k.float_tensor("sinks", {p.num_q_heads});
  k.require(c.has("k_new") == c.has("v_new"), "tensors 'k_new' and 'v_new' come together: one is missing");
  if (c.has("k_new")) {
    k.float_tensor("k_new", {tokens, p.num_kv_heads, p.head_dim});
    k.float_tensor("v_new", {tokens, p.num_kv_heads, p.head_dim});
    k.same_dtype("q", "k_new");
    k.same_dtype("q", "v_new");
  }
  k.float_tensor("o", {tokens, p.num_q_heads, p.head_dim});
  k.float_tensor("lse", {tokens, p.num_q_heads});
}

}  // namespace

void validate(const Case& c) {
  const Checker k(c);
  switch (c.op) {
    case OpKind::kRmsNorm:
      return validate_rmsnorm(c, k);
    case OpKind::kConcat:
      return validate_concat(k);
    case OpKind::kDualRmsNormCat:
      return validate_dual(k);
    case OpKind::kAttention:
      return validate_attention(c, k);
  }
  k.fail("unknown op");
}

}  // namespace driftcheck
