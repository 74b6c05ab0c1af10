// Every numerics term a backend can declare (Numerics, backend.hpp), defined once. One row per term: the
// name it has everywhere (the Numerics field, the backends-file key, the C ABI field), which ops it concerns,
// where the C ABI carries it (driftcheck/plugin.h) and what it means. The backends-file loader, the plugin
// loader and `driftcheck list` read this table; the error model's share of each rounding term is the
// oracle's own table (fuzz/oracle/src/rounding_terms.hpp), keyed by the same names. A new term: a Numerics
// field, a row here, its C ABI field (in a new ABI version), its row in the oracle's table where it is a
// rounding, and its lines in docs/PROTOCOL.md and docs/PLUGIN.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/plugin.h"

namespace driftcheck {

enum class TermType {
  kFlag,       // bool, "true" / "false"; in the C ABI 0 or 1
  kCount,      // output_roundings: an integer in [min, max]
  kNewKv,      // new_kv: "cache" or "inputs" (DC_NEW_KV_CACHE / DC_NEW_KV_INPUTS)
  kReduction,  // reduction: threads, vec, warp
};

struct NumericsTerm {
  std::string_view key;
  TermType type;
  bool attention;                  // concerns the attention op
  bool norm;                       // concerns the rmsnorm family (rmsnorm, dual_rmsnorm_cat)
  bool Numerics::*flag = nullptr;  // kFlag: the field
  // Where the C ABI carries it: the field's name in dc_plugin, the ABI version that added it, and the field
  // itself when it is one int32 of dc_numerics (version 1) or dc_numerics2 (version 2); reduction is the
  // three reduction_* fields of dc_numerics3 (version 3).
  std::string_view abi_field;
  int abi_version = 1;
  std::int32_t dc_numerics::*abi1 = nullptr;
  std::int32_t dc_numerics2::*abi2 = nullptr;
  std::string_view meaning;
};

// In Numerics' order.
std::span<const NumericsTerm> numerics_terms();

// output_roundings: at least 1 from anyone; a backends file declares at most 2 (the statistical tier models
// one or two roundings; the worst-case tolerance adds a term per extra one, as a built-in twin with three
// declares).
inline constexpr int kMinOutputRoundings = 1, kMaxFileOutputRoundings = 2;

// The term's value in `n` as a backends file writes it: "true", "2", "inputs", "threads 256 vec 4 warp 32".
std::string term_text(const NumericsTerm& t, const Numerics& n);
// Whether the term concerns `op`.
bool term_concerns(const NumericsTerm& t, OpKind op);

}  // namespace driftcheck
