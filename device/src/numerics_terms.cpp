#include "driftcheck/device/numerics_terms.hpp"

#include <array>

#include <fmt/format.h>

namespace driftcheck {
namespace {

constexpr std::array kTerms{
    NumericsTerm{.key = "output_roundings",
                 .type = TermType::kCount,
                 .attention = false,
                 .norm = true,
                 .abi_field = "numerics.output_roundings",
                 .abi_version = 1,
                 .abi1 = &dc_numerics::output_roundings,
                 .meaning =
                     "roundings to the output format on the way to each output element (1: fp32 math and "
                     "one final rounding; 2: x * s rounded, then times the weight and rounded again)"},
    NumericsTerm{.key = "p_rounded",
                 .type = TermType::kFlag,
                 .attention = true,
                 .norm = false,
                 .flag = &Numerics::p_rounded,
                 .abi_field = "numerics.p_rounded",
                 .abi_version = 1,
                 .abi1 = &dc_numerics::p_rounded,
                 .meaning = "softmax weights P rounded to the activation dtype before P.V"},
    NumericsTerm{.key = "partials_rounded",
                 .type = TermType::kFlag,
                 .attention = true,
                 .norm = false,
                 .flag = &Numerics::partials_rounded,
                 .abi_field = "numerics.partials_rounded",
                 .abi_version = 1,
                 .abi1 = &dc_numerics::partials_rounded,
                 .meaning = "split-KV partial outputs stored in the activation dtype before the merge"},
    NumericsTerm{.key = "kv_dequant_rounded",
                 .type = TermType::kFlag,
                 .attention = true,
                 .norm = false,
                 .flag = &Numerics::kv_dequant_rounded,
                 .abi_field = "numerics.kv_dequant_rounded",
                 .abi_version = 1,
                 .abi1 = &dc_numerics::kv_dequant_rounded,
                 .meaning = "dequantised fp8 K/V rounded to the activation dtype before the dot products"},
    NumericsTerm{
        .key = "kv_dequant_rounded_prefill",
        .type = TermType::kFlag,
        .attention = true,
        .norm = false,
        .flag = &Numerics::kv_dequant_rounded_prefill,
        .abi_field = "numerics2.kv_dequant_rounded_prefill",
        .abi_version = 2,
        .abi2 = &dc_numerics2::kv_dequant_rounded_prefill,
        .meaning = "the same rounding in the rows of prefill/extend sequences (query length > 1) only"},
    NumericsTerm{.key = "fp8_mfma_decode",
                 .type = TermType::kFlag,
                 .attention = true,
                 .norm = false,
                 .flag = &Numerics::fp8_mfma_decode,
                 .abi_field = "numerics2.fp8_mfma_decode",
                 .abi_version = 2,
                 .abi2 = &dc_numerics2::fp8_mfma_decode,
                 .meaning =
                     "decode rows of an fp8 cache: q and P converted to the cache's fp8 format for fp8 "
                     "MFMAs"},
    NumericsTerm{.key = "new_kv",
                 .type = TermType::kNewKv,
                 .attention = true,
                 .norm = false,
                 .abi_field = "numerics2.new_kv",
                 .abi_version = 2,
                 .abi2 = &dc_numerics2::new_kv,
                 .meaning = "where the new tokens' K/V are read: \"cache\" (the paged cache) or \"inputs\" "
                            "(k_new / v_new, prefill/extend sequences)"},
    NumericsTerm{
        .key = "lse_undefined_inf",
        .type = TermType::kFlag,
        .attention = true,
        .norm = false,
        .flag = &Numerics::lse_undefined_inf,
        .abi_field = "numerics2.lse_undefined_inf",
        .abi_version = 2,
        .abi2 = &dc_numerics2::lse_undefined_inf,
        .meaning = "lse is +inf in a row whose softmax sum is NaN or 0 (FlashAttention-2's convention)"},
    NumericsTerm{.key = "reduction",
                 .type = TermType::kReduction,
                 .attention = false,
                 .norm = true,
                 .abi_field = "numerics3.reduction_threads, reduction_vec, reduction_warp",
                 .abi_version = 3,
                 .meaning =
                     "the sum of squares' reduction: threads partial sums over chunks of vec elements, "
                     "then a shuffle tree in warps of warp lanes (statistical tier)"},
    NumericsTerm{.key = "deterministic",
                 .type = TermType::kFlag,
                 .attention = true,
                 .norm = true,
                 .flag = &Numerics::deterministic,
                 .abi_field = "numerics.deterministic",
                 .abi_version = 1,
                 .abi1 = &dc_numerics::deterministic,
                 .meaning = "the same case gives the same bits"},
    NumericsTerm{.key = "batch_invariant",
                 .type = TermType::kFlag,
                 .attention = true,
                 .norm = true,
                 .flag = &Numerics::batch_invariant,
                 .abi_field = "numerics.batch_invariant",
                 .abi_version = 1,
                 .abi1 = &dc_numerics::batch_invariant,
                 .meaning = "a row's bits do not depend on the other rows or sequences of the batch"},
    NumericsTerm{.key = "block_permutation_invariant",
                 .type = TermType::kFlag,
                 .attention = true,
                 .norm = false,
                 .flag = &Numerics::block_permutation_invariant,
                 .abi_field = "numerics.block_permutation_invariant",
                 .abi_version = 1,
                 .abi1 = &dc_numerics::block_permutation_invariant,
                 .meaning = "where the KV blocks are placed in the cache changes no bit"},
};

}  // namespace

std::span<const NumericsTerm> numerics_terms() {
  return kTerms;
}

std::string term_text(const NumericsTerm& t, const Numerics& n) {
  switch (t.type) {
    case TermType::kFlag:
      return n.*t.flag ? "true" : "false";
    case TermType::kCount:
      return std::to_string(n.output_roundings);
    case TermType::kNewKv:
      return n.new_kv == NewKv::kInputs ? "inputs" : "cache";
    case TermType::kReduction:
      return fmt::format("threads {} vec {} warp {}", n.reduction.threads, n.reduction.vec, n.reduction.warp);
  }
  return {};
}

bool term_concerns(const NumericsTerm& t, OpKind op) {
  return op == OpKind::kAttention ? t.attention : t.norm;
}

}  // namespace driftcheck
