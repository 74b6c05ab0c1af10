// Static limits on the query shapes of attention cases, for a kernel that runs only some of them (a
// decode-only kernel, one instantiated for a few head sizes): a backends file's [backend.supports] keys
// decode_only, max_query_len, head_dims and max_head_dim (docs/PROTOCOL.md section 6), and a C plugin's
// dc_static_supports (docs/PLUGIN.md). driftcheck checks them itself, so a case outside them is declined
// (`unsupported`, with the key in the reason) without a round trip to a worker or a call into a plugin.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "driftcheck/reference/case.hpp"

namespace driftcheck {

struct QueryShapes {
  bool decode_only = false;                   // every sequence has query length 1
  std::optional<std::int64_t> max_query_len;  // the longest query of a sequence it runs
  std::vector<std::int64_t> head_dims;        // the head sizes it runs; empty: any
  std::optional<std::int64_t> max_head_dim;   // the largest head size it runs

  bool restricts() const { return decode_only || max_query_len || !head_dims.empty() || max_head_dim; }
  // Empty when the attention case c is within the limits (and for other ops); else what is outside, naming
  // the key: "a prefill/extend sequence (query length > 1; decode_only)".
  std::string outside(const Case& c) const;
  // One part per limit, for `driftcheck list`: "decode only", "query_len <= 16", "head_dim 64/128",
  // "head_dim <= 256".
  std::vector<std::string> summary() const;
};

// The longest query of an attention case's sequences (from query_start_loc), 0 for a case without sequences.
std::int64_t longest_query(const Case& c);

}  // namespace driftcheck
