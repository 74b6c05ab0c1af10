#include "driftcheck/device/query_shapes.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace driftcheck {

std::int64_t longest_query(const Case& c) {
  const std::vector<double> starts = c.tensor("query_start_loc").to_f64();
  std::int64_t longest = 0;
  for (std::size_t s = 1; s < starts.size(); ++s)
    longest = std::max(longest, static_cast<std::int64_t>(starts[s] - starts[s - 1]));
  return longest;
}

std::string QueryShapes::outside(const Case& c) const {
  if (c.op != OpKind::kAttention || !restricts()) return {};
  const auto& p = c.get<AttentionParams>();
  if (!head_dims.empty() && std::find(head_dims.begin(), head_dims.end(), p.head_dim) == head_dims.end())
    return fmt::format("head_dim {} (head_dims {})", p.head_dim, fmt::join(head_dims, "/"));
  if (max_head_dim && p.head_dim > *max_head_dim)
    return fmt::format("head_dim {} (max_head_dim {})", p.head_dim, *max_head_dim);
  if (!decode_only && !max_query_len) return {};
  const std::int64_t longest = longest_query(c);
  if (decode_only && longest > 1) return "a prefill/extend sequence (query length > 1; decode_only)";
  if (max_query_len && longest > *max_query_len)
    return fmt::format("a sequence with query length > {} (max_query_len {})", *max_query_len,
                       *max_query_len);
  return {};
}

std::vector<std::string> QueryShapes::summary() const {
  std::vector<std::string> parts;
  if (decode_only) parts.emplace_back("decode only");
  if (max_query_len) parts.push_back(fmt::format("query_len <= {}", *max_query_len));
  if (!head_dims.empty()) parts.push_back(fmt::format("head_dim {}", fmt::join(head_dims, "/")));
  if (max_head_dim) parts.push_back(fmt::format("head_dim <= {}", *max_head_dim));
  return parts;
}

}  // namespace driftcheck
