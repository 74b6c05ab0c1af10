// Mutants of attention: each is the Triton unified twin (the twin that supports every case shape, so
// campaigns reach every mutant) with one AttnBug switched on, except the prefill/extend mutant: a path only
// the ROCM_AITER_FA twin has, so it breaks that twin.
#include "driftcheck/device/builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

namespace {

std::unique_ptr<Backend> triton_mutant(std::string name, std::string description, std::string bug_class,
                                       AttnBug bug) {
  return make_attention_backend(
      mutant_info(triton_unified_info(), std::move(name), std::move(description), std::move(bug_class)),
      triton_unified_kernel(), bug);
}

}  // namespace

std::unique_ptr<Backend> make_mutant_attn_masked_p_times_v() {
  return triton_mutant("mutant.attn.masked_p_times_v",
                       "masked P (0) multiplied with V of the whole last tile: NaN/Inf in unused slots leak",
                       "vllm#30887 masked P times NaN/garbage V past the last valid token",
                       AttnBug::kMaskedPTimesV);
}

std::unique_ptr<Backend> make_mutant_attn_page_conversion() {
  return triton_mutant(
      "mutant.attn.page_conversion",
      "block_size >= 64: page id used as a 16-token kernel block id (no page/kernel block conversion)",
      "vllm#24486 page size vs kernel block size conversion (also #47287, #42766)", AttnBug::kPageConversion);
}

std::unique_ptr<Backend> make_mutant_attn_fp8_fn_fnuz_swapped() {
  return triton_mutant("mutant.attn.fp8_fn_fnuz_swapped",
                       "e4m3fn KV bytes decoded as e4m3fnuz (values halved, -0 becomes NaN) and vice versa",
                       "vllm#45562 fp8 fnuz vs fn bytes reinterpreted (GSM8K 0.97 -> 0.01)",
                       AttnBug::kFp8FnFnuzSwapped);
}

std::unique_ptr<Backend> make_mutant_attn_no_max_subtraction() {
  return triton_mutant("mutant.attn.no_max_subtraction",
                       "online softmax with the running max fixed at 0: exp(s)",
                       "missing max subtraction: exp overflows (inf/inf = NaN) for logits above ~88",
                       AttnBug::kNoMaxSubtraction);
}

std::unique_ptr<Backend> make_mutant_attn_unscaled_split_merge() {
  return triton_mutant("mutant.attn.unscaled_split_merge",
                       "split-KV reduce adding segment sums and outputs without the exp(m_i - m) rescale",
                       "wrong split-KV merge (reduce_segments of the 3D decode path)",
                       AttnBug::kUnscaledSplitMerge);
}

std::unique_ptr<Backend> make_mutant_attn_gqa_modulo() {
  return triton_mutant("mutant.attn.gqa_modulo",
                       "query head h reads kv head h % Hkv instead of h / (Hq / Hkv)",
                       "GQA head mapping off (h % Hkv for h / (Hq / Hkv))", AttnBug::kGqaModulo);
}

std::unique_ptr<Backend> make_mutant_attn_causal_off_by_one() {
  return triton_mutant(
      "mutant.attn.causal_off_by_one", "causal mask t <= p + 1: each prefill row sees one future key",
      "causal mask off by one (mask alignment with query_start_loc / seq_lens)", AttnBug::kCausalOffByOne);
}

std::unique_ptr<Backend> make_mutant_attn_window_off_by_one() {
  return triton_mutant("mutant.attn.window_off_by_one", "sliding window p - t <= window: one key too many",
                       "sliding window off by one (window bound conventions differ across backends)",
                       AttnBug::kWindowOffByOne);
}

std::unique_ptr<Backend> make_mutant_attn_softcap_missing() {
  return triton_mutant("mutant.attn.softcap_missing", "logit softcap c*tanh(s/c) not applied after the scale",
                       "softcap dropped on one path (feature silently ignored, class of #57614)",
                       AttnBug::kSoftcapMissing);
}

std::unique_ptr<Backend> make_mutant_attn_sink_dropped() {
  return triton_mutant(
      "mutant.attn.sink_dropped", "attention sinks never enter the softmax denominator",
      "sink ignored in the denominator (unsupported feature silently accepted, class of #57614)",
      AttnBug::kSinkDropped);
}

std::unique_ptr<Backend> make_mutant_attn_table_stride_ignored() {
  return triton_mutant(
      "mutant.attn.table_stride_ignored",
      "block table row s read at s * max_blocks instead of s * row stride (wrong from the second sequence on "
      "when the table is a column slice of a wider one)",
      "ignores block_table.stride(0): vLLM passes slices of its persistent [max_reqs, max_blocks_per_req] "
      "block table; kernels take the row stride as an argument (issue #12)",
      AttnBug::kTableStrideIgnored);
}

std::unique_ptr<Backend> make_mutant_attn_logits_rounded() {
  return triton_mutant(
      "mutant.attn.logits_rounded",
      "scale * q.k rounded to the activation dtype before the softmax (scores kept in a bf16 tile)",
      "a reduction's result carried in bf16: the QK^T scores stored in the activation dtype; "
      "FlashAttention's "
      "2x-naive-baseline rule tolerates it, since the naive baseline rounds its logits too (issue #12)",
      AttnBug::kLogitsRounded);
}

std::unique_ptr<Backend> make_mutant_attn_extend_new_kv_from_cache() {
  return make_attention_backend(
      mutant_info(
          aiter_fa_info(), "mutant.attn.extend_new_kv_from_cache",
          "prefill/extend: the causal pass over the new tokens reads their K/V back from the paged cache "
          "slots (fp8: the stored codes times the scale, rounded to act) instead of the key/value inputs",
          "the cache write and the attention read disagree: a backend whose prefill/extend contract "
          "attends the layer's key/value inputs (ROCM_AITER_FA extend_forward) reading the new tokens "
          "through the block table after reshape_and_cache stored them, so with an fp8 cache they are "
          "quantised (up to half an fp8 ulp, 2^-4 relative for e4m3) where the inputs are exact"),
      aiter_fa_kernel(), AttnBug::kExtendNewKvFromCache);
}

}  // namespace driftcheck::twin
