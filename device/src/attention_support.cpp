// What the attention twins accept: each modelled backend's supports() and the routing of a batch's rows to
// the kernel path vLLM takes for them.
#include "attention_twin.hpp"

namespace driftcheck::twin::attention {

// ---- support

template <class T>
std::string join(const std::vector<T>& v, std::string_view last_sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += i + 1 == v.size() ? std::string(last_sep) : ", ";
    s += fmt::format("{}", v[i]);
  }
  return s;
}

bool has_decode_sequence(const Case& c) {
  const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
  for (std::size_t s = 0; s + 1 < qsl.size(); ++s)
    if (qsl[s + 1] - qsl[s] == 1) return true;
  return false;
}

bool extend_chunks(const Case& c) {
  if (c.get<AttentionParams>().window > 0) return false;
  const ExtendChunks e =
      extend_chunk_size(load_ints(c.tensor("query_start_loc")), load_ints(c.tensor("seq_lens")));
  return e.longest > e.chunk;
}

bool AttentionTwin::reaches_ll4mi_decode(const Case& c) const {
  return k_.schedule == AttnSchedule::kLl4mi && has_decode_sequence(c) &&
         !(k_.fa.windowed_decode && c.get<AttentionParams>().window > 0);
}

// use_rocm_custom_paged_attention (vllm/platforms/rocm.py, gfx9 branch, read at e2a00c7) for a batch, as
// chunked_prefill_paged_decode evaluates it: the SLIDING_WINDOW it is passed (window - 1 from ROCM_ATTN) is
// 0, head size 64/128, block size 16/32, GQA 1..16, max_seq_len <= 128K, no sinks (q bf16/fp16, the
// power-of-two page, VLLM_ROCM_CUSTOM_PAGED_ATTN on and aiter's paged attention off hold for every case the
// twin accepts). A twin without the Triton decode path sends every decode row to its one decode kernel.
bool AttentionTwin::custom_decode(const AttentionParams& p, std::int64_t max_seq_len) const {
  if (!k_.triton_decode.triton_decode_2d) return true;
  const std::int64_t passed = passed_window(p);
  const std::int64_t ratio = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  return passed <= 0 && contains(k_.accepts.head_dims, p.head_dim) &&
         contains(k_.accepts.block_sizes, p.block_size) && ratio >= 1 && ratio <= k_.accepts.max_gqa_ratio &&
         max_seq_len <= k_.triton_decode.custom_max_seq_len && !p.has_sinks;
}

bool AttentionTwin::custom_decode(const Case& c) const {
  if (!k_.triton_decode.triton_decode_2d) return true;
  const std::vector<std::int32_t> lens = load_ints(c.tensor("seq_lens"));
  const std::int64_t longest = lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());
  return custom_decode(c.get<AttentionParams>(), longest);
}

// The window a twin's backend passes its kernels: ROCM_ATTN's (window - 1, 0)[0], the layer's window less one
// (defect window_one_short; 0 is none); the layer's window otherwise.
std::int64_t AttentionTwin::passed_window(const AttentionParams& p) const {
  return p.window > 0 && k_.prefill.window_one_short ? p.window - 1 : p.window;
}

// The window ROCM_ATTN's Triton kernels apply (SLIDING_WINDOW): the passed window; the window mutant's one
// wider.
std::int64_t AttentionTwin::kernel_window(const AttentionParams& p) const {
  const std::int64_t sw = passed_window(p);
  return sw > 0 && bug_ == AttnBug::kWindowOffByOne ? sw + 1 : sw;
}

// ROCM_ATTN: decode rows on the Triton decode kernel dequantise fp8 K/V to act as the prefill rows do, so in
// a batch routed there every row rounds (kv_dequant_rounded); on the custom kernel decode rows read fp8
// exactly and only the prefill rows round (kv_dequant_rounded_prefill, declared).
Numerics AttentionTwin::numerics_for(const Case& c) const {
  Numerics n = numerics();
  if (k_.triton_decode.triton_decode_2d && c.op == OpKind::kAttention && c.has("seq_lens") &&
      c.has("query_start_loc") && has_decode_sequence(c) && !custom_decode(c))
    n.kv_dequant_rounded = true;
  // ROCM_AITER_FA gathers an extend's context in chunks of 32768 / (extends in the batch) tokens and merges
  // them in act: a sequence whose context exceeds its batch's chunk has outputs that depend on the batch.
  if (k_.fa.aiter_fa_extend && c.op == OpKind::kAttention && c.has("query_start_loc") && c.has("seq_lens") &&
      extend_chunks(c))
    n.batch_invariant = false;
  // ROCM_AITER_FA declares fp8 MFMAs for its decode rows (the error model's term is 0 outside fp8 decode
  // rows); a case says whether they happen: an fp8 cache, and decode rows on paged_attention_v1 (a windowed
  // batch's run the unified kernel, which keeps q and P in act).
  if (n.fp8_mfma_decode && c.op == OpKind::kAttention && c.has("query_start_loc") && c.has("k_cache") &&
      (!is_fp8(c.tensor("k_cache").dtype()) || !reaches_ll4mi_decode(c)))
    n.fp8_mfma_decode = false;
  return n;
}

Support AttentionTwin::supports_kv(const Case& c) const {
  const std::string& who = k_.accepts.name_for_reasons;
  const DType kv = c.tensor("k_cache").dtype();
  if (kv != c.tensor("v_cache").dtype()) return Support::no("k_cache and v_cache differ in dtype");
  if (kv == c.tensor("o").dtype()) return Support::yes();
  if (!is_fp8(kv))
    return Support::no(fmt::format("KV cache {}: {} reads the activation dtype or fp8", dtype_name(kv), who));
  // ROCM_AITER_FA: fp8 decode rows reach paged_attention_v1's fp8 MFMAs only without a window (windowed
  // decode runs the unified kernel). q is converted to fp8 there without a clamp: what the conversion makes
  // of a value beyond the format's range is not modelled.
  if (k_.ll4mi.fp8_mfma && reaches_ll4mi_decode(c)) {
    const FloatFormat f = float_format_of(kv);
    const Tensor& q = c.tensor("q");
    const std::vector<double> qv = q.to_f64();
    const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
    const auto row = static_cast<std::size_t>(q.numel() / std::max<std::int64_t>(q.size(0), 1));
    for (std::size_t s = 0; s + 1 < qsl.size(); ++s) {
      if (qsl[s + 1] - qsl[s] != 1) continue;
      for (std::size_t i = 0; i < row; ++i) {
        const double x = qv[static_cast<std::size_t>(qsl[s]) * row + i];
        if (std::isinf(x) || std::fabs(x) > max_finite(f))
          return Support::no(fmt::format(
              "q element {} of decode token {} is {}, beyond {}'s largest value {}: {} converts q to the "
              "cache's fp8 without a clamp (v_cvt_pk_fp8_f32), an overflow the twin does not model",
              i, qsl[s], x, dtype_name(kv), max_finite(f), who));
      }
    }
  }
  // ROCM_ATTN: decode rows go to the custom paged kernel (kv_dtypes) or the Triton decode kernel, prefill
  // rows to the Triton prefix prefill (both pp_kv_dtypes); a batch needs every kernel it reaches to read its
  // cache.
  const bool custom_rows = (!k_.prefill.prefix_prefill || has_decode_sequence(c)) && custom_decode(c);
  const std::vector<DType>& allowed = custom_rows ? k_.accepts.kv_dtypes : k_.prefill.pp_kv_dtypes;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), kv) == allowed.end()) {
    std::vector<std::string_view> names;
    for (DType t : allowed) names.push_back(dtype_name(t));
    return Support::no(fmt::format("KV cache {}: {} stores fp8 as {} only{}", dtype_name(kv), who,
                                   join(names, " or "), k_.prefill.prefix_prefill ? kDecodeRows : ""));
  }
  return Support::yes();
}

Support AttentionTwin::supports(const Case& c) const {
  const auto& p = c.get<AttentionParams>();
  const std::string& who = k_.accepts.name_for_reasons;
  if (Support s = check_act_dtype(c.tensor("o"), "o"); !s.ok) return s;
  if (c.tensor("q").dtype() != c.tensor("o").dtype())
    return Support::no("q and o differ in dtype: the kernel reads and writes the activation dtype");
  if (Support s = supports_kv(c); !s.ok) return s;
  if (p.block_size % 16 != 0)
    return Support::no(fmt::format("block_size {}: {} needs a multiple of 16", p.block_size, who));
  if (!k_.accepts.block_sizes.empty() && !contains(k_.accepts.block_sizes, p.block_size))
    return Support::no(fmt::format("block_size {}: {} supports KV block sizes {} only", p.block_size, who,
                                   join(k_.accepts.block_sizes, " and ")));
  // ROCM_ATTN: what only the custom paged kernel restricts applies to batches whose decode rows it runs; the
  // others run the Triton kernels alone (prefix prefill, kernel_paged_attention_2d).
  const bool decode_rows = !k_.prefill.prefix_prefill || has_decode_sequence(c);
  const bool custom_rows = decode_rows && custom_decode(c);
  const std::string_view decode_note = k_.prefill.prefix_prefill ? kDecodeRows : "";
  if (!custom_rows && !k_.prefill.pp_head_dims.empty() && !contains(k_.prefill.pp_head_dims, p.head_dim))
    return Support::no(fmt::format("head_dim {}: {} supports head sizes {} only", p.head_dim, who,
                                   join(k_.prefill.pp_head_dims, " and ")));
  if (custom_rows && !k_.accepts.head_dims.empty() && !contains(k_.accepts.head_dims, p.head_dim))
    return Support::no(fmt::format("head_dim {}: {} supports head sizes {} only{}", p.head_dim, who,
                                   join(k_.accepts.head_dims, " and "), decode_note));
  if (p.head_dim < k_.accepts.min_head_dim ||
      (k_.accepts.max_head_dim > 0 && p.head_dim > k_.accepts.max_head_dim))
    return Support::no(
        fmt::format("head_dim {}: {} supports head sizes {}..{}", p.head_dim, who, k_.accepts.min_head_dim,
                    k_.accepts.max_head_dim > 0 ? fmt::format("{}", k_.accepts.max_head_dim) : ""));
  const std::int64_t ratio = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  if (custom_rows && k_.accepts.max_gqa_ratio > 0 && ratio > k_.accepts.max_gqa_ratio)
    return Support::no(
        fmt::format("GQA ratio {}: {} supports 1..{}{}", ratio, who, k_.accepts.max_gqa_ratio, decode_note));
  // The window the decode kernel is passed: ROCM_ATTN's custom kernel is reached with a window of 1 (passed
  // as 0: no window).
  if (custom_rows && passed_window(p) > 0 && !k_.accepts.window)
    return Support::no(fmt::format("sliding window: {} has none{}", who, decode_note));
  if (p.softcap > 0 && !k_.accepts.softcap_unmodelled.empty())
    return Support::no(fmt::format("softcap: {}", k_.accepts.softcap_unmodelled));
  if (p.softcap > 0 && !k_.accepts.softcap) return Support::no(fmt::format("softcap: {} has none", who));
  if (custom_rows && p.has_sinks && k_.sinks == SinkPath::kNone)
    return Support::no(fmt::format("sinks: {} has none{}", who, decode_note));
  if (!p.causal && !k_.accepts.non_causal)
    return Support::no(fmt::format("non-causal attention: {}", k_.accepts.causal_reason.empty()
                                                                   ? fmt::format("{} is causal only", who)
                                                                   : k_.accepts.causal_reason));
  if (k_.unified.tile_divides_block_3d) {
    const Batch b = shape_of(c);
    if (b.hkv > 0 && b.hq % b.hkv == 0 && static_cast<std::int64_t>(b.query_start.size()) == b.num_seqs + 1) {
      Plan pl{};
      plan_launch(b, pl);
      if (pl.split && pl.tile > b.bs && pl.tile % b.bs != 0)
        return Support::no(
            fmt::format("block_size {}: this batch takes {}'s 3D path, whose select_3d_config asserts "
                        "\"TILE_SIZE needs to "
                        "be divisible by block_size\" (TILE_SIZE = min(64, next_pow2(block_size)) = {})",
                        p.block_size, who, pl.tile));
    }
  }
  if (k_.fa.aiter_fa_extend) return supports_extend(c);
  if (k_.triton_decode.triton_decode_2d && !custom_decode(c)) {
    // kernel_paged_attention_2d runs one program per sequence and returns only for query lengths above 1.
    const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
    for (std::size_t s = 0; s + 1 < qsl.size(); ++s)
      if (qsl[s + 1] == qsl[s])
        return Support::no(fmt::format(
            "sequence {} has query length 0: ROCM_ATTN's Triton kernel_paged_attention_2d skips only query "
            "lengths above 1, so its program for that sequence writes output row {} (another sequence's, or "
            "past the last: a race or an overrun the twin does not model)",
            s, qsl[s]));
  }
  if (k_.prefill.prefix_prefill) return supports_prefix_prefill(c);
  if (k_.accepts.max_query_len > 0) {
    const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
    for (std::size_t s = 0; s + 1 < qsl.size(); ++s)
      if (qsl[s + 1] - qsl[s] > k_.accepts.max_query_len)
        return Support::no(
            k_.accepts.long_query_unmodelled.empty()
                ? fmt::format("query length {}: {} is a decode kernel (query length <= {})",
                              qsl[s + 1] - qsl[s], who, k_.accepts.max_query_len)
                : fmt::format("query length {}: {}", qsl[s + 1] - qsl[s], k_.accepts.long_query_unmodelled));
  }
  return Support::yes();
}

// ROCM_ATTN's prefill/extend rows (chunked_prefill_paged_decode -> context_attention_fwd): what the Triton
// prefix prefill reads and which sequences it handles as the twin models them.
Support AttentionTwin::supports_prefix_prefill(const Case& c) const {
  const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
  const std::vector<std::int32_t> lens = load_ints(c.tensor("seq_lens"));
  for (std::size_t s = 0; s < lens.size(); ++s) {
    const std::int64_t ql = qsl[s + 1] - qsl[s];
    if (ql <= 1) continue;
    if (!c.has("k_new"))
      return Support::no(
          "ROCM_ATTN's prefill/extend rows run the Triton context_attention_fwd, which reads the new tokens' "
          "K/V from the layer's inputs (k_new, v_new); the case does not carry them");
    if (!c.get<AttentionParams>().causal)
      return Support::no(
          "non-causal attention: ROCM_ATTN is a decoder backend (RocmAttentionImpl raises for encoder "
          "self-attention) and context_attention_fwd masks the new tokens causally");
    if (ql > lens[s])
      return Support::no(
          fmt::format("query length {} > seq_len {}: vLLM schedules no more new tokens than the "
                      "sequence holds",
                      ql, lens[s]));
  }
  return Support::yes();
}

// ROCM_AITER_FA's prefill/extend path (rocm_aiter_fa.py forward / extend_forward): what it reads and which
// batches it handles as the twin models them.
Support AttentionTwin::supports_extend(const Case& c) const {
  const auto& p = c.get<AttentionParams>();
  const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
  const std::vector<std::int32_t> lens = load_ints(c.tensor("seq_lens"));
  for (std::size_t s = 0; s < lens.size(); ++s) {
    const std::int64_t ql = qsl[s + 1] - qsl[s], ctx = lens[s] - ql;
    if (ql <= 1) continue;
    if (!c.has("k_new"))
      return Support::no(
          "ROCM_AITER_FA's prefill/extend path reads the new tokens' K/V from the layer's inputs "
          "(k_new, v_new), which the case does not carry");
    if (!p.causal)
      return Support::no(
          "non-causal attention: ROCM_AITER_FA is a decoder backend; its prefill/extend passes "
          "run flash_attn_varlen_func with causal=True");
    if (ctx < 0)
      return Support::no(
          fmt::format("query length {} > seq_len {}: vLLM schedules no more new tokens than the "
                      "sequence holds",
                      ql, lens[s]));
  }
  return Support::yes();
}

}  // namespace driftcheck::twin::attention
