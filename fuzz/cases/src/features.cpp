#include "driftcheck/fuzz/features.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

namespace driftcheck::fuzz {
namespace {

bool is_attention(const CaseSpec& s) {
  return s.op == OpKind::kAttention;
}
AttentionParams& attn(CaseSpec& s) {
  return std::get<AttentionParams>(s.params);
}
const AttentionParams& attn(const CaseSpec& s) {
  return std::get<AttentionParams>(s.params);
}
std::int64_t round_up(std::int64_t v, std::int64_t m) {
  return m <= 1 ? v : (v + m - 1) / m * m;
}

// One feature: its name, whether a spec has it, and the edit that removes it (nullptr: none; the feature is
// still reported, but ablation cannot test it). `implies`: a broader feature every case with this one has
// ("H > 2048" implies "H > 256"), left out of a cause that names this one.
struct Feature {
  const char* name;
  std::function<bool(const CaseSpec&)> has;
  std::function<void(CaseSpec&)> remove;
  const char* implies = nullptr;
};

Feature distribution(const char* name, Distribution d) {
  return {name, [d](const CaseSpec& s) { return s.distribution == d; },
          [](CaseSpec& s) { s.distribution = Distribution::kNormal; }};
}

Feature kv_format(const char* name, DType t) {
  return {name, [t](const CaseSpec& s) { return is_attention(s) && s.kv_dtype == t; },
          [](CaseSpec& s) {
            s.kv_dtype = s.act_dtype;
            attn(s).k_scale = attn(s).v_scale = 1.0;
          }};
}

template <class P>
Feature weight_mode(const char* name) {
  return {name,
          [](const CaseSpec& s) {
            const auto* p = std::get_if<P>(&s.params);
            return p != nullptr && p->weight_mode == WeightMode::kOnePlus;
          },
          [](CaseSpec& s) { std::get<P>(s.params).weight_mode = WeightMode::kPlain; }};
}

template <class P>
Feature zero_eps(const char* name) {
  return {name,
          [](const CaseSpec& s) {
            const auto* p = std::get_if<P>(&s.params);
            return p != nullptr && p->eps == 0;
          },
          [](CaseSpec& s) { std::get<P>(s.params).eps = 1e-6; }};
}

// eps >= 1e-5 (`large`) or 0 < eps < 1e-5: removed by moving eps to 1e-6 or to 1e-5.
template <class P>
Feature eps_band(const char* name, bool large) {
  return {name,
          [large](const CaseSpec& s) {
            const auto* p = std::get_if<P>(&s.params);
            return p != nullptr && p->eps > 0 && (p->eps >= 1e-5) == large;
          },
          [large](CaseSpec& s) { std::get<P>(s.params).eps = large ? 1e-6 : 1e-5; }};
}

// The table. Names are in the field's words, as a kernel engineer would say what a case exercises.
const std::vector<Feature>& features() {
  static const std::vector<Feature> table = {
      // Layouts (every op).
      {"row stride != width", [](const CaseSpec& s) { return s.row_pad > 0; },
       [](CaseSpec& s) { s.row_pad = 0; }},
      {"misaligned base", [](const CaseSpec& s) { return s.base_offset > 0; },
       [](CaseSpec& s) { s.base_offset = 0; }},
      // Row ops.
      {"batch of rows", [](const CaseSpec& s) { return !is_attention(s) && s.rows > 1; },
       [](CaseSpec& s) { s.rows = 1; }},
      {"H % 8 != 0",
       [](const CaseSpec& s) {
         return !is_attention(s) && (s.hidden % 8 != 0 || (s.op == OpKind::kConcat && s.hidden_b % 8 != 0));
       },
       [](CaseSpec& s) { s.hidden = round_up(s.hidden, 8), s.hidden_b = round_up(s.hidden_b, 8); }},
      {"H > 256", [](const CaseSpec& s) { return !is_attention(s) && s.hidden > 256; },
       [](CaseSpec& s) { s.hidden = 256, s.hidden_b = std::min<std::int64_t>(s.hidden_b, 256); }},
      // fp16 partial sums overflow, one thread's chunk grows past a tile: causes that start at wide rows.
      {"H > 2048", [](const CaseSpec& s) { return !is_attention(s) && s.hidden > 2048; },
       [](CaseSpec& s) { s.hidden = 2048, s.hidden_b = std::min<std::int64_t>(s.hidden_b, 2048); },
       "H > 256"},
      {"residual add",
       [](const CaseSpec& s) {
         const auto* p = std::get_if<RmsNormParams>(&s.params);
         return p != nullptr && p->residual;
       },
       [](CaseSpec& s) { std::get<RmsNormParams>(s.params).residual = false; }},
      {"in-place output", [](const CaseSpec& s) { return s.inplace_output; },
       [](CaseSpec& s) { s.inplace_output = false; }},
      weight_mode<RmsNormParams>("(1 + w) weight"),
      weight_mode<DualRmsNormCatParams>("(1 + w) weight"),
      zero_eps<RmsNormParams>("eps = 0"),
      zero_eps<DualRmsNormCatParams>("eps = 0"),
      // Which eps: a kernel that ignores its eps argument fails on the cases whose eps is not its constant
      // (the generator draws 1e-5, 1e-6 and 0); each edit moves eps to the other side of 1e-5.
      eps_band<RmsNormParams>("eps < 1e-5", false),
      eps_band<DualRmsNormCatParams>("eps < 1e-5", false),
      eps_band<RmsNormParams>("eps >= 1e-5", true),
      eps_band<DualRmsNormCatParams>("eps >= 1e-5", true),
      // Formats.
      {"fp16 activations", [](const CaseSpec& s) { return s.act_dtype == DType::kF16; },
       [](CaseSpec& s) {
         if (s.kv_dtype == s.act_dtype) s.kv_dtype = DType::kBF16;
         s.act_dtype = DType::kBF16;
       }},
      {"fp32 activations", [](const CaseSpec& s) { return s.act_dtype == DType::kF32; },
       [](CaseSpec& s) { s.act_dtype = DType::kBF16; }},
      kv_format("fp8 e4m3fn KV", DType::kF8E4M3FN),
      kv_format("fp8 e4m3fnuz KV", DType::kF8E4M3FNUZ),
      kv_format("fp8 e5m2 KV", DType::kF8E5M2),
      {"KV scale != 1",
       [](const CaseSpec& s) {
         return is_attention(s) && is_fp8(s.kv_dtype) && (attn(s).k_scale != 1 || attn(s).v_scale != 1);
       },
       [](CaseSpec& s) { attn(s).k_scale = attn(s).v_scale = 1.0; }},
      // Attention.
      {"head_dim % 32 != 0", [](const CaseSpec& s) { return is_attention(s) && attn(s).head_dim % 32 != 0; },
       [](CaseSpec& s) {
         attn(s).head_dim = round_up(attn(s).head_dim, 32);
         if (s.q_token_pad > 0) s.q_token_pad = 2 * attn(s).num_kv_heads * attn(s).head_dim;
       }},
      {"GQA", [](const CaseSpec& s) { return is_attention(s) && attn(s).num_q_heads > attn(s).num_kv_heads; },
       [](CaseSpec& s) { attn(s).num_q_heads = attn(s).num_kv_heads; }},
      {"block_size >= 64", [](const CaseSpec& s) { return is_attention(s) && attn(s).block_size >= 64; },
       [](CaseSpec& s) { attn(s).block_size = 16; }},
      {"block_size % 16 != 0",
       [](const CaseSpec& s) { return is_attention(s) && attn(s).block_size % 16 != 0; },
       [](CaseSpec& s) { attn(s).block_size = 16; }},
      {"seq_len % block_size != 0",
       [](const CaseSpec& s) {
         return is_attention(s) && std::any_of(s.seq_lens.begin(), s.seq_lens.end(),
                                               [&](auto l) { return l % attn(s).block_size != 0; });
       },
       [](CaseSpec& s) {
         for (auto& l : s.seq_lens) l = round_up(l, attn(s).block_size);
       }},
      {"context > 256",
       [](const CaseSpec& s) {
         return is_attention(s) &&
                std::any_of(s.seq_lens.begin(), s.seq_lens.end(), [](auto l) { return l > 256; });
       },
       [](CaseSpec& s) {
         for (std::size_t i = 0; i < s.seq_lens.size(); ++i) {
           s.seq_lens[i] = std::min<std::int64_t>(s.seq_lens[i], 256);
           s.query_lens[i] = std::min(s.query_lens[i], s.seq_lens[i]);
         }
       }},
      {"query_len > 1",
       [](const CaseSpec& s) {
         return is_attention(s) &&
                std::any_of(s.query_lens.begin(), s.query_lens.end(), [](auto q) { return q > 1; });
       },
       [](CaseSpec& s) { std::fill(s.query_lens.begin(), s.query_lens.end(), 1); }},
      {"batch of sequences", [](const CaseSpec& s) { return is_attention(s) && s.seq_lens.size() > 1; },
       [](CaseSpec& s) { s.seq_lens.resize(1), s.query_lens.resize(1); }},
      {"non-causal", [](const CaseSpec& s) { return is_attention(s) && !attn(s).causal; },
       [](CaseSpec& s) { attn(s).causal = true; }},
      {"sliding window", [](const CaseSpec& s) { return is_attention(s) && attn(s).window > 0; },
       [](CaseSpec& s) { attn(s).window = 0; }},
      {"softcap", [](const CaseSpec& s) { return is_attention(s) && attn(s).softcap > 0; },
       [](CaseSpec& s) { attn(s).softcap = 0; }},
      {"sinks", [](const CaseSpec& s) { return is_attention(s) && attn(s).has_sinks; },
       [](CaseSpec& s) { attn(s).has_sinks = false; }},
      {"shuffled pages", [](const CaseSpec& s) { return is_attention(s) && s.block_table_seed != 0; },
       [](CaseSpec& s) { s.block_table_seed = 0; }},
      {"spare pages", [](const CaseSpec& s) { return is_attention(s) && s.spare_blocks > 0; },
       [](CaseSpec& s) { s.spare_blocks = 0; }},
      // Attention layouts (vLLM's persistent block table, fused qkv, K and V in one tensor).
      {"block table row stride != blocks",
       [](const CaseSpec& s) { return is_attention(s) && s.table_pad_cols > 0; },
       [](CaseSpec& s) { s.table_pad_cols = 0; }},
      {"block table rows offset",
       [](const CaseSpec& s) { return is_attention(s) && s.table_rows_before > 0; },
       [](CaseSpec& s) { s.table_rows_before = 0; }},
      {"poisoned unread table entries", [](const CaseSpec& s) { return is_attention(s) && s.table_poison; },
       [](CaseSpec& s) { s.table_poison = false; }},
      {"q from fused qkv", [](const CaseSpec& s) { return is_attention(s) && s.q_token_pad > 0; },
       [](CaseSpec& s) { s.q_token_pad = 0; }},
      {"K and V in one tensor",
       [](const CaseSpec& s) { return is_attention(s) && s.kv_layout != KvLayout::kSeparate; },
       [](CaseSpec& s) { s.kv_layout = KvLayout::kSeparate; }},
      // Values.
      distribution("outlier channels", Distribution::kOutlierChannels),
      distribution("near-constant rows", Distribution::kNearConstant),
      distribution("near-max values", Distribution::kNearMax),
      distribution("subnormal values", Distribution::kSubnormal),
      distribution("large logits", Distribution::kLargeLogits),
      // Special values (spec.hpp Special): rows ops one input element, attention one element of a live key
      // (NaN)
      // or value (inf).
      {"NaN input", [](const CaseSpec& s) { return s.special == Special::kNanInput; },
       [](CaseSpec& s) { s.special = Special::kNone; }},
      {"inf input", [](const CaseSpec& s) { return s.special == Special::kInfInput; },
       [](CaseSpec& s) { s.special = Special::kNone; }},
  };
  return table;
}

}  // namespace

std::vector<std::string> case_features(const CaseSpec& s) {
  std::vector<std::string> out;
  for (const auto& f : features())
    if (f.has(s) && std::find(out.begin(), out.end(), f.name) == out.end()) out.emplace_back(f.name);
  return out;
}

std::optional<CaseSpec> without_feature(const CaseSpec& s, std::string_view name) {
  for (const auto& f : features()) {
    if (name != f.name || !f.has(s) || !f.remove) continue;
    CaseSpec out = s;
    f.remove(out);
    return out;
  }
  return std::nullopt;
}

namespace {

// Powers of two: "<= 64", "65-128", ..., so that a growth with length shows as a slope.
ShapeKey power_of_two_bucket(const char* param, std::int64_t v) {
  std::int64_t hi = 64;
  while (hi < v) hi *= 2;
  return {param, hi == 64 ? "<= 64" : fmt::format("{}-{}", hi / 2 + 1, hi),
          std::log2(static_cast<double>(hi))};
}

}  // namespace

std::vector<ShapeKey> shape_buckets(const CaseSpec& s) {
  if (!is_attention(s)) return {power_of_two_bucket("hidden size", s.hidden)};
  const auto& p = attn(s);
  const auto longest = std::max_element(s.seq_lens.begin(), s.seq_lens.end());
  const std::int64_t len = longest == s.seq_lens.end() ? 0 : *longest, fill = len % p.block_size;
  const ShapeKey page = fill == 0                  ? ShapeKey{"last page fill", "full page", 0}
                        : fill == 1                ? ShapeKey{"last page fill", "1 token", 1}
                        : 2 * fill <= p.block_size ? ShapeKey{"last page fill", "<= half", 2}
                                                   : ShapeKey{"last page fill", "> half", 3};
  return {power_of_two_bucket("sequence length", len),
          {"block size", std::to_string(p.block_size), static_cast<double>(p.block_size)},
          {"head size", std::to_string(p.head_dim), static_cast<double>(p.head_dim)},
          page};
}

std::vector<std::string> without_implied(std::vector<std::string> names) {
  std::vector<std::string> implied;
  for (const auto& f : features())
    if (f.implies != nullptr && has_all(names, {f.name})) implied.emplace_back(f.implies);
  std::erase_if(names, [&](const auto& x) { return has_all(implied, {x}); });
  return names;
}

bool has_all(const std::vector<std::string>& have, const std::vector<std::string>& needed) {
  return std::all_of(needed.begin(), needed.end(),
                     [&](const auto& f) { return std::find(have.begin(), have.end(), f) != have.end(); });
}

bool has_any(const std::vector<std::string>& have, const std::vector<std::string>& these) {
  return std::any_of(these.begin(), these.end(),
                     [&](const auto& f) { return std::find(have.begin(), have.end(), f) != have.end(); });
}

}  // namespace driftcheck::fuzz
