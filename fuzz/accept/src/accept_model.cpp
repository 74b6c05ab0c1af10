#include "accept_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/fuzz/value_rng.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck::fuzz {
namespace {

using Values = std::map<std::string, std::vector<double>, std::less<>>;

// Value streams of the drafter: one per tensor, so changing one size leaves the other tensors' values alone.
enum Stream : std::uint64_t {
  kSeqLens = 101,
  kEmbeds,
  kHidden,
  kHiddenOutliers,
  kNormWeights,
  kQkv,
  kO,
  kGate,
  kUp,
  kDown,
  kLm,
};

// Scales of realistic checkpoints (docs/ACCEPT.md "The drafter"): embeddings with std 0.02 (the usual
// initializer range), target hidden states of unit scale with "massive activation" channels (one in 128,
// 8x), RMSNorm weights 1 +- 0.25 with one channel in 64 at 4x, linear weights 1/sqrt(fan_in) with one input
// channel in 64 at 4x. The branch gain makes o_proj and down_proj outputs as large as the residual stream, so
// both paths decide the next token (as in a real drafter, where the sampled token's embedding reaches the
// logits only through attention and the MLP). The LM head's scale sets the logits' spread.
constexpr double kEmbedStd = 0.02;
constexpr double kHiddenOutlierGain = 8.0;
constexpr double kWeightOutlierGain = 4.0;
constexpr double kBranchGain = 2.0;
constexpr double kLmScale = 4.0;

double act_round(DType t, double x) {
  return round_to(t, x);
}

Act draw_act(std::int64_t rows, std::int64_t cols, double stdev, DType t, ValueRng& rng) {
  Act a(rows, cols);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.data()[i] = static_cast<float>(act_round(t, stdev * rng.normal()));
  return a;
}

// Channels that get an outlier gain: about one in `every` (at least one), drawn without order.
std::vector<bool> outlier_channels(std::int64_t n, std::int64_t every, ValueRng& rng) {
  std::vector<bool> out(static_cast<std::size_t>(n), false);
  for (std::int64_t k = 0; k < std::max<std::int64_t>(1, n / every); ++k)
    out[rng.below(static_cast<std::uint64_t>(n))] = true;
  return out;
}

std::vector<double> draw_norm_weight(std::int64_t h, DType t, ValueRng& rng) {
  const auto outlier = outlier_channels(h, 64, rng);
  std::vector<double> w(static_cast<std::size_t>(h));
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = act_round(t, (1.0 + 0.25 * rng.normal()) * (outlier[i] ? kWeightOutlierGain : 1.0));
  return w;
}

// Weights are stored in the activation format (checkpoints are bf16/fp16) and held as float for the GEMMs.
Weight draw_weight(std::int64_t in, std::int64_t out, double gain, DType t, ValueRng& rng) {
  const auto outlier = outlier_channels(in, 64, rng);
  const double stdev = gain / std::sqrt(static_cast<double>(in));
  Weight w(in, out);
  for (std::int64_t c = 0; c < out; ++c)
    for (std::int64_t r = 0; r < in; ++r)
      w(r, c) = static_cast<float>(act_round(
          t, stdev * rng.normal() * (outlier[static_cast<std::size_t>(r)] ? kWeightOutlierGain : 1.0)));
  return w;
}

// Sequences of 48 to 160 tokens (contexts end anywhere in a page), the last one taking what is left.
std::vector<std::int64_t> draw_seq_lens(std::int64_t positions, std::uint64_t seed) {
  ValueRng rng(seed, kSeqLens);
  std::vector<std::int64_t> lens;
  std::int64_t left = positions;
  while (left > 0) {
    const auto len = std::min<std::int64_t>(left, 48 + static_cast<std::int64_t>(rng.below(113)));
    // A remainder shorter than a chain of speculative tokens joins the sequence before it.
    if (left - len < 8 && !lens.empty() && left - len > 0) {
      lens.push_back(left);
      break;
    }
    lens.push_back(len);
    left -= len;
  }
  return lens;
}

std::vector<double> to_doubles(const Act& a) {
  return {a.data(), a.data() + a.size()};
}

Act from_doubles(const std::vector<double>& v, std::int64_t rows, std::int64_t cols) {
  Act a(rows, cols);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.data()[i] = static_cast<float>(v[static_cast<std::size_t>(i)]);
  return a;
}

bool same(const Act& a, const Act& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && (a.array() == b.array()).all();
}

// Runs `c` with `b` when it serves the case's op and accepts the case, else with the fp64 reference, whose
// outputs are rounded once to each output's stored format (what an ideal kernel writes). Returns every output
// row-major in its logical shape.
Values call_op(const Backend* b, Case c, const std::string& point, DrafterRun& run) {
  const OpSignature sig = op_signature(c);
  Values out;
  if (b != nullptr && b->op() == c.op) {
    const Support s = b->supports(c);
    if (s.ok) {
      b->run(c);
      run.substituted.push_back(point);
      for (const auto& name : sig.outputs) out[name] = c.tensor(name).to_f64();
      return out;
    }
    run.kept_reference.push_back(fmt::format("{}: {}", point, s.reason));
  }
  const Outputs ref = reference(c);
  for (const auto& name : sig.outputs) {
    std::vector<double> v = ref.at(name).to_f64();
    const DType t = c.tensor(name).dtype();
    for (auto& x : v) x = round_to(t, x);
    out[name] = std::move(v);
  }
  return out;
}

CaseSpec row_spec(OpKind op, const DrafterConfig& cfg, std::int64_t row_pad) {
  CaseSpec s;
  s.op = op;
  s.act_dtype = cfg.act_dtype;
  s.rows = cfg.positions;
  s.hidden = s.hidden_b = cfg.hidden;
  s.row_pad = row_pad;
  s.value_seed = cfg.seed;
  return s;
}

}  // namespace

Drafter::Drafter(const DrafterConfig& cfg) : cfg_(cfg), seq_lens_(draw_seq_lens(cfg.positions, cfg.seed)) {
  const std::int64_t n = cfg.positions, h = cfg.hidden, d = cfg.head_dim;
  const std::int64_t qkv = (cfg.num_q_heads + 2 * cfg.num_kv_heads) * d;
  const DType t = cfg.act_dtype;
  ValueRng re(cfg.seed, kEmbeds), rh(cfg.seed, kHidden), rho(cfg.seed, kHiddenOutliers);
  embeds_ = draw_act(n, h, kEmbedStd, t, re);
  hidden_ = draw_act(n, h, 1.0, t, rh);
  const auto massive = outlier_channels(h, 128, rho);
  for (std::int64_t c = 0; c < h; ++c) {
    if (!massive[static_cast<std::size_t>(c)]) continue;
    for (std::int64_t r = 0; r < n; ++r)
      hidden_(r, c) = static_cast<float>(act_round(t, hidden_(r, c) * kHiddenOutlierGain));
  }
  ValueRng rl(cfg.seed, kLm);
  w_lm_ = draw_weight(h, cfg.vocab, kLmScale, t, rl);
  ValueRng rn(cfg.seed, kNormWeights);
  w_input_norm_ = draw_norm_weight(h, t, rn);
  w_hidden_norm_ = draw_norm_weight(h, t, rn);
  w_post_norm_ = draw_norm_weight(h, t, rn);
  w_final_norm_ = draw_norm_weight(h, t, rn);
  ValueRng rq(cfg.seed, kQkv), ro(cfg.seed, kO), rg(cfg.seed, kGate), ru(cfg.seed, kUp), rd(cfg.seed, kDown);
  w_qkv_ = draw_weight(2 * h, qkv, 1.0, t, rq);
  w_o_ = draw_weight(cfg.num_q_heads * d, h, kBranchGain, t, ro);
  w_gate_ = draw_weight(h, cfg.intermediate, 1.0, t, rg);
  w_up_ = draw_weight(h, cfg.intermediate, 1.0, t, ru);
  w_down_ = draw_weight(cfg.intermediate, h, kBranchGain, t, rd);
  // fp8 KV scales as vLLM computes them from the data: amax / the format's largest finite value, fixed for
  // every run (they come from the reference's k and v).
  if (is_fp8(cfg.kv_dtype)) {
    DrafterRun scratch;
    const Act kv = gemm(input_block(nullptr, scratch), w_qkv_);
    const double fmax = max_finite(*float_format(cfg.kv_dtype));
    const std::int64_t kv_cols = cfg.num_kv_heads * d;
    k_scale_ =
        std::max(1e-12,
                 static_cast<double>(kv.middleCols(cfg.num_q_heads * d, kv_cols).cwiseAbs().maxCoeff())) /
        fmax;
    v_scale_ = std::max(1e-12, static_cast<double>(kv.rightCols(kv_cols).cwiseAbs().maxCoeff())) / fmax;
  }
}

std::vector<std::int64_t> Drafter::sequence_starts() const {
  std::vector<std::int64_t> starts;
  std::int64_t at = 0;
  for (const auto len : seq_lens_) starts.push_back(at), at += len;
  return starts;
}

Act Drafter::gemm(const Act& x, const Weight& w) const {
  Act y = (x * w).eval();
  for (std::int64_t i = 0; i < y.size(); ++i)
    y.data()[i] = static_cast<float>(act_round(cfg_.act_dtype, y.data()[i]));
  return y;
}

// SiLU(gate) * up in fp32, rounded once (vLLM's silu_and_mul), then down_proj.
Act Drafter::mlp(const Act& x2) const {
  const Act g = gemm(x2, w_gate_), u = gemm(x2, w_up_);
  Act m(g.rows(), g.cols());
  for (std::int64_t i = 0; i < m.size(); ++i) {
    const float gi = g.data()[i];
    m.data()[i] = static_cast<float>(act_round(cfg_.act_dtype, gi / (1.0f + std::exp(-gi)) * u.data()[i]));
  }
  return gemm(m, w_down_);
}

// The layer's input: the fused dual norm + concat, or (for an rmsnorm or concat backend) the unfused chain of
// two norms and a concat. The hidden state is a slice of the target's [N, 3H] auxiliary hidden states (row
// stride 3H), as EAGLE3 receives it, so a kernel that ignores row strides reads the wrong rows. The norms
// write fresh contiguous outputs (vLLM's rms_norm checks out.is_contiguous()); fused_dual_rmsnorm_cat raises
// on strided inputs, so its caller passes contiguous copies.
Act Drafter::input_block(const Backend* b, DrafterRun& run) const {
  const std::int64_t n = cfg_.positions, h = cfg_.hidden;
  const bool unfused = b != nullptr && (b->op() == OpKind::kRmsNorm || b->op() == OpKind::kConcat);
  if (!unfused) {
    CaseSpec s = row_spec(OpKind::kDualRmsNormCat, cfg_, 0);
    s.params = DualRmsNormCatParams{cfg_.eps, WeightMode::kPlain};
    Case c = materialize(s);
    c.tensor("e").copy_from(to_doubles(embeds_));
    c.tensor("h").copy_from(to_doubles(hidden_));
    c.tensor("w_e").copy_from(w_input_norm_);
    c.tensor("w_h").copy_from(w_hidden_norm_);
    return from_doubles(call_op(b, std::move(c), "input_norms_cat", run).at("out"), n, 2 * h);
  }
  const auto norm = [&](const Act& x, const std::vector<double>& w, std::int64_t row_pad, const char* point) {
    CaseSpec s = row_spec(OpKind::kRmsNorm, cfg_, row_pad);
    s.params = RmsNormParams{cfg_.eps, WeightMode::kPlain, false};
    s.contiguous_output = true;
    Case c = materialize(s);
    c.tensor("x").copy_from(to_doubles(x));
    c.tensor("w").copy_from(w);
    return call_op(b, std::move(c), point, run).at("y");
  };
  const auto e = norm(embeds_, w_input_norm_, 0, "input_layernorm");
  const auto hn = norm(hidden_, w_hidden_norm_, 2 * h, "hidden_norm");
  CaseSpec s = row_spec(OpKind::kConcat, cfg_, 0);
  s.params = ConcatParams{};
  Case c = materialize(s);
  c.tensor("a").copy_from(e);
  c.tensor("b").copy_from(hn);
  return from_doubles(call_op(b, std::move(c), "concat", run).at("out"), n, 2 * h);
}

// z = x + residual, y = rmsnorm(z) written over x, residual <- z: vLLM's fused_add_rms_norm, in place.
void Drafter::fused_add_norm(const Backend* b, const std::string& point, const Act& x, const Act& residual,
                             const std::vector<double>& w, Act& y, Act& new_residual, DrafterRun& run) const {
  CaseSpec s = row_spec(OpKind::kRmsNorm, cfg_, 0);
  s.params = RmsNormParams{cfg_.eps, WeightMode::kPlain, true};
  s.inplace_output = true;
  Case c = materialize(s);
  c.tensor("x").copy_from(to_doubles(x));
  c.tensor("residual").copy_from(to_doubles(residual));
  c.tensor("w").copy_from(w);
  const Values out = call_op(b, std::move(c), point, run);
  y = from_doubles(out.at("y"), x.rows(), x.cols());
  new_residual = from_doubles(out.at("residual"), x.rows(), x.cols());
}

// The drafter's attention as a verification pass: every sequence is cut into query chunks of `query_len`
// tokens, and each chunk is a request whose context ends with it (speculative decoding with k = query_len - 1
// drafted tokens; 1 is plain decode, 0 one prefill per sequence). Each request owns its pages, shuffled as an
// allocator hands them out, with two spare poisoned pages; the slots past a request's context keep
// materialize()'s poison, as unwritten cache slots hold garbage, so a kernel that reads them produces NaN.
Case Drafter::attention_case(const Act& qkv, std::int64_t query_len) const {
  const std::int64_t d = cfg_.head_dim, hq = cfg_.num_q_heads, hkv = cfg_.num_kv_heads;
  CaseSpec s;
  s.op = OpKind::kAttention;
  s.act_dtype = cfg_.act_dtype;
  s.kv_dtype = cfg_.kv_dtype;
  std::vector<std::int64_t> seq_of;  // sequence of each request
  for (std::size_t q = 0; q < seq_lens_.size(); ++q) {
    const std::int64_t chunk = query_len > 0 ? query_len : seq_lens_[q];
    for (std::int64_t end = 0; end < seq_lens_[q];) {
      const std::int64_t len = std::min(chunk, seq_lens_[q] - end);
      end += len;
      s.query_lens.push_back(len), s.seq_lens.push_back(end), seq_of.push_back(static_cast<std::int64_t>(q));
    }
  }
  s.spare_blocks = 2;
  s.block_table_seed = cfg_.seed | 1;
  s.value_seed = cfg_.seed;
  AttentionParams p;
  p.num_q_heads = hq, p.num_kv_heads = hkv, p.head_dim = d, p.block_size = cfg_.block_size;
  p.scale = 1.0 / std::sqrt(static_cast<double>(d));
  p.window = cfg_.window, p.softcap = cfg_.softcap, p.has_sinks = cfg_.sinks;
  p.k_scale = k_scale_, p.v_scale = v_scale_;
  s.params = p;
  Case c = materialize(s);
  c.tensor("q").copy_from(to_doubles(qkv.leftCols(hq * d)));
  // reshape_and_cache: token t of a request goes to slot t % block_size of page block_table[r][t / bs]; fp8
  // caches store value / scale, saturated.
  Tensor& kc = c.tensor("k_cache");
  Tensor& vc = c.tensor("v_cache");
  const Tensor& table = c.tensor("block_table");
  const auto starts = sequence_starts();
  for (std::size_t r = 0; r < s.seq_lens.size(); ++r) {
    const std::int64_t first = starts[static_cast<std::size_t>(seq_of[r])];
    for (std::int64_t tok = 0; tok < s.seq_lens[r]; ++tok) {
      const auto page =
          static_cast<std::int64_t>(table.at({static_cast<std::int64_t>(r), tok / cfg_.block_size}));
      const std::int64_t slot = tok % cfg_.block_size;
      for (std::int64_t h = 0; h < hkv; ++h) {
        for (std::int64_t e = 0; e < d; ++e) {
          kc.set({page, slot, h, e}, qkv(first + tok, hq * d + h * d + e) / k_scale_, Overflow::kSaturate);
          vc.set({page, slot, h, e}, qkv(first + tok, (hq + hkv) * d + h * d + e) / v_scale_,
                 Overflow::kSaturate);
        }
      }
    }
  }
  // The new tokens' keys and values as the layer produced them, before the cache write: what a kernel that
  // reads them from its inputs (new_kv = "inputs": aiter's extend path, ROCM_ATTN's prefill kernel) sees.
  // materialize() derived k_new / v_new from the generated cache it wrote first; q's rows are the positions
  // in order, and so are theirs.
  if (c.has("k_new")) {
    c.tensor("k_new").copy_from(to_doubles(qkv.middleCols(hq * d, hkv * d)));
    c.tensor("v_new").copy_from(to_doubles(qkv.middleCols((hq + hkv) * d, hkv * d)));
  }
  return c;
}

Act Drafter::attention(const Backend* b, const Act& qkv, DrafterRun& run) const {
  std::int64_t query_len = cfg_.query_len;
  Case c = attention_case(qkv, query_len);
  // A backend that runs decode batches only (ROCM_ATTN's custom kernel) gets the same queries as decodes.
  if (b != nullptr && b->op() == OpKind::kAttention && query_len != 1 && !b->supports(c).ok) {
    Case decode = attention_case(qkv, 1);
    if (b->supports(decode).ok) c = std::move(decode), query_len = 1;
  }
  const std::string point = query_len == cfg_.query_len ? "attention" : "attention (as decodes)";
  const Values out = call_op(b, std::move(c), point, run);
  return from_doubles(out.at("o"), cfg_.positions, cfg_.num_q_heads * cfg_.head_dim);
}

DrafterRun Drafter::run(const Backend* b, const Trace* reference) const {
  const auto serves = [b](OpKind op) { return b != nullptr && b->op() == op; };
  DrafterRun r;
  Trace& t = r.trace;
  // `fresh`: some stage already differs from the reference, so every later stage must be computed.
  bool fresh = reference == nullptr;
  const bool input_op =
      serves(OpKind::kDualRmsNormCat) || serves(OpKind::kRmsNorm) || serves(OpKind::kConcat);
  t.x = fresh || input_op ? input_block(b, r) : reference->x;
  fresh = fresh || !same(t.x, reference->x);
  t.qkv = fresh ? gemm(t.x, w_qkv_) : reference->qkv;
  t.o = fresh || serves(OpKind::kAttention) ? attention(b, t.qkv, r) : reference->o;
  fresh = fresh || !same(t.o, reference->o);
  if (fresh || serves(OpKind::kRmsNorm)) {
    fused_add_norm(b, "post_attention_norm", gemm(t.o, w_o_), hidden_, w_post_norm_, t.x2, t.res, r);
    fresh = fresh || !same(t.x2, reference->x2) || !same(t.res, reference->res);
  } else {
    t.x2 = reference->x2, t.res = reference->res;
  }
  if (fresh || serves(OpKind::kRmsNorm)) {
    Act unused;
    fused_add_norm(b, "final_norm", mlp(t.x2), t.res, w_final_norm_, t.f, unused, r);
  } else {
    t.f = reference->f;
  }
  return r;
}

Eigen::MatrixXf Drafter::logits(const Act& rows) const {
  return w_lm_.transpose() * rows.transpose();
}

}  // namespace driftcheck::fuzz
