// The error model's share of each numerics term that declares a rounding (device/src/numerics_terms.cpp
// holds every term; docs/ORACLE.md derives each share): one row per term, in the order the tolerance adds
// them, read by the worst-case tolerance (oracle.cpp), the statistical tier and the words that name a
// backend's rounding points (statistical.cpp). A new rounding term is a row here and a field of ErrorModel.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "driftcheck/fuzz/oracle.hpp"

namespace driftcheck::fuzz {

struct RoundingTerm {
  std::string_view key;  // the numerics term
  // How many times its rounding applies to element i; 0 where the backend does not declare it.
  int (*count)(const ErrorModel& m, const Numerics& n, std::size_t i);
  // output_roundings: the count multiplies the term, which the sum always has (k - 1 extra roundings);
  // a flag adds its term where it applies.
  bool per_rounding;
  std::vector<double> ErrorModel::*worst;     // the worst-case tier's term
  std::vector<double> ErrorModel::*typical;   // the statistical tier's systematic part (nullptr: worst)
  std::vector<double> ErrorModel::*variance;  // its random part (nullptr: none)
  // attention: in the statistical tier's element model and the words (the norm family has its own skeleton)
  bool attention;
  // The rounding in words, for a statistical verdict's detail ("" where it is not declared); act is the
  // activation dtype's name.
  std::string (*words)(const Numerics& n, std::string_view act);
};

inline constexpr RoundingTerm kRoundingTerms[] = {
    {"output_roundings",
     [](const ErrorModel&, const Numerics& n, std::size_t) { return std::max(n.output_roundings - 1, 0); },
     true, &ErrorModel::intermediate, nullptr, nullptr, false,
     [](const Numerics&, std::string_view) { return std::string(); }},
    {"p_rounded", [](const ErrorModel&, const Numerics& n, std::size_t) { return int{n.p_rounded}; }, false,
     &ErrorModel::p_rounding, &ErrorModel::typical_p, &ErrorModel::variance_p, true,
     [](const Numerics& n, std::string_view act) {
       return n.p_rounded ? fmt::format(", P rounded to {}", act) : std::string();
     }},
    {"kv_dequant_rounded",  // with kv_dequant_rounded_prefill: the same rounding in prefill rows only
     [](const ErrorModel& m, const Numerics& n, std::size_t i) { return int{kv_dequant_applies(m, n, i)}; },
     false, &ErrorModel::kv_dequant_rounding, &ErrorModel::typical_kv, &ErrorModel::variance_kv, true,
     [](const Numerics& n, std::string_view act) {
       return n.kv_dequant_rounded || n.kv_dequant_rounded_prefill
                  ? fmt::format(", fp8 K/V dequantised to {}{}", act,
                                n.kv_dequant_rounded ? "" : " in prefill rows")
                  : std::string();
     }},
    {"partials_rounded",
     [](const ErrorModel&, const Numerics& n, std::size_t) { return int{n.partials_rounded}; }, false,
     &ErrorModel::partials_rounding, nullptr, nullptr, true,
     [](const Numerics& n, std::string_view act) {
       return n.partials_rounded ? fmt::format(", split-KV partial outputs stored in {}", act)
                                 : std::string();
     }},
    // fp8 MFMAs: taken whole as systematic by the statistical tier (q's rounding moves every logit of a row
    // alike, P's is not split).
    {"fp8_mfma_decode",
     [](const ErrorModel&, const Numerics& n, std::size_t) { return int{n.fp8_mfma_decode}; }, false,
     &ErrorModel::fp8_mfma_rounding, nullptr, nullptr, true,
     [](const Numerics& n, std::string_view) {
       return n.fp8_mfma_decode ? std::string(", q and P in fp8 for decode MFMAs") : std::string();
     }},
};

}  // namespace driftcheck::fuzz
