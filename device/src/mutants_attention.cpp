// Mutants of attention: each is the Triton unified twin (the twin that supports every case shape, so
// campaigns reach every mutant) with one AttnBug switched on, except the prefill/extend mutant: a path only
// the ROCM_AITER_FA twin has, so it breaks that twin.
#include "driftcheck/device/builtin.hpp"
#include "twin_attention.hpp"

namespace driftcheck::twin {

namespace {

// One row per mutant, in the order `list` shows them: the twin it breaks (its identity and kernel), its
// name, what it does, the bug class it models, and the AttnBug it switches on.
struct AttnMutant {
  TwinInfo (*twin)();
  AttnKernel (*kernel)();
  const char* name;
  const char* description;
  const char* bug_class;
  AttnBug bug;
};

const AttnMutant kAttnMutants[] = {
    {triton_unified_info, triton_unified_kernel, "mutant.attn.masked_p_times_v",
     "masked P (0) multiplied with V of the whole last tile: NaN/Inf in unused slots leak",
     "vllm#30887 masked P times NaN/garbage V past the last valid token", AttnBug::kMaskedPTimesV},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.page_conversion",
     "block_size >= 64: page id used as a 16-token kernel block id (no page/kernel block conversion)",
     "vllm#24486 page size vs kernel block size conversion (also #47287, #42766)", AttnBug::kPageConversion},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.fp8_fn_fnuz_swapped",
     "e4m3fn KV bytes decoded as e4m3fnuz (values halved, -0 becomes NaN) and vice versa",
     "vllm#45562 fp8 fnuz vs fn bytes reinterpreted (GSM8K 0.97 -> 0.01)", AttnBug::kFp8FnFnuzSwapped},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.no_max_subtraction",
     "online softmax with the running max fixed at 0: exp(s)",
     "missing max subtraction: exp overflows (inf/inf = NaN) for logits above ~88",
     AttnBug::kNoMaxSubtraction},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.unscaled_split_merge",
     "split-KV reduce adding segment sums and outputs without the exp(m_i - m) rescale",
     "wrong split-KV merge (reduce_segments of the 3D decode path)", AttnBug::kUnscaledSplitMerge},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.gqa_modulo",
     "query head h reads kv head h % Hkv instead of h / (Hq / Hkv)",
     "GQA head mapping off (h % Hkv for h / (Hq / Hkv))", AttnBug::kGqaModulo},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.causal_off_by_one",
     "causal mask t <= p + 1: each prefill row sees one future key",
     "causal mask off by one (mask alignment with query_start_loc / seq_lens)", AttnBug::kCausalOffByOne},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.window_off_by_one",
     "sliding window p - t <= window: one key too many",
     "sliding window off by one (window bound conventions differ across backends)", AttnBug::kWindowOffByOne},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.softcap_missing",
     "logit softcap c*tanh(s/c) not applied after the scale",
     "softcap dropped on one path (feature silently ignored, class of #57614)", AttnBug::kSoftcapMissing},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.sink_dropped",
     "attention sinks never enter the softmax denominator",
     "sink ignored in the denominator (unsupported feature silently accepted, class of #57614)",
     AttnBug::kSinkDropped},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.table_stride_ignored",
     "block table row s read at s * max_blocks instead of s * row stride (wrong from the second sequence on "
     "when the table is a column slice of a wider one)",
     "ignores block_table.stride(0): vLLM passes slices of its persistent [max_reqs, max_blocks_per_req] "
     "block table; kernels take the row stride as an argument (issue #12)",
     AttnBug::kTableStrideIgnored},
    {triton_unified_info, triton_unified_kernel, "mutant.attn.logits_rounded",
     "scale * q.k rounded to the activation dtype before the softmax (scores kept in a bf16 tile)",
     "a reduction's result carried in bf16: the QK^T scores stored in the activation dtype; "
     "FlashAttention's "
     "2x-naive-baseline rule tolerates it, since the naive baseline rounds its logits too (issue #12)",
     AttnBug::kLogitsRounded},
    {aiter_fa_info, aiter_fa_kernel, "mutant.attn.extend_new_kv_from_cache",
     "prefill/extend: the causal pass over the new tokens reads their K/V back from the paged cache "
     "slots (fp8: the stored codes times the scale, rounded to act) instead of the key/value inputs",
     "the cache write and the attention read disagree: a backend whose prefill/extend contract "
     "attends the layer's key/value inputs (ROCM_AITER_FA extend_forward) reading the new tokens "
     "through the block table after reshape_and_cache stored them, so with an fp8 cache they are "
     "quantised (up to half an fp8 ulp, 2^-4 relative for e4m3) where the inputs are exact",
     AttnBug::kExtendNewKvFromCache},
};

}  // namespace

void register_attention_mutants(Registry& r) {
  for (const AttnMutant& m : kAttnMutants)
    r.add(
        make_attention_backend(mutant_info(m.twin(), m.name, m.description, m.bug_class), m.kernel(), m.bug));
}

}  // namespace driftcheck::twin
