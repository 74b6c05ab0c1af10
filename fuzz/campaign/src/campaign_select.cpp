// Selection of what a campaign runs: the op list and the backend globs (docs/CAMPAIGN.md "Selection rules").
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "driftcheck/fuzz/campaign.hpp"

namespace driftcheck::fuzz {
namespace {

bool has_wildcard(std::string_view s) {
  return s.find_first_of("*?,") != std::string_view::npos;
}

std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto end = std::min(list.find(',', start), list.size());
    if (end > start) out.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string unknown_backend(std::string_view name) {
  return fmt::format("unknown backend '{}' ({})", name,
                     name.starts_with("ext.")
                         ? "an external backend needs its backends file: --backends FILE or "
                           "DRIFTCHECK_BACKENDS"
                         : "driftcheck list shows them");
}

std::vector<OpKind> parse_op_list(std::string_view list) {
  std::vector<OpKind> ops;
  for (const std::string& name : split_list(list)) {
    OpKind op;
    if (!parse_op(name, &op))
      throw UsageError(
          fmt::format("unknown op '{}' (ops: rmsnorm, concat, dual_rmsnorm_cat, attention)", name));
    ops.push_back(op);
  }
  return ops;
}

Selection select_backends(const Registry& reg, const std::vector<OpKind>& ops, const std::string& globs,
                          bool include_mutants) {
  Selection sel;
  std::vector<const Backend*> matched;
  std::set<const Backend*> named_exactly;
  if (globs.empty()) {
    for (const auto& b : reg.all())
      if (b->kind() != BackendKind::kMutant || include_mutants) matched.push_back(b.get());
  }
  for (const std::string& g : split_list(globs)) {
    const auto m = reg.match(g, include_mutants || g.starts_with("mutant"));
    if (m.empty()) throw UsageError(unknown_backend(g));
    for (const Backend* b : m) {
      if (std::find(matched.begin(), matched.end(), b) == matched.end()) matched.push_back(b);
      if (!has_wildcard(g)) named_exactly.insert(b);
    }
  }
  for (const Backend* b : matched) {
    if (!ops.empty() && std::find(ops.begin(), ops.end(), b->op()) == ops.end()) continue;
    std::string why;
    // A glob skips backends that cannot run here; a backend asked for by name stays, and fails as zero-case.
    if (!b->available(&why) && !named_exactly.count(b)) {
      sel.unavailable.push_back(fmt::format("{}: {}", b->name(), why));
      continue;
    }
    sel.backends.push_back(b);
  }
  for (OpKind op : kAllOps) {
    const bool asked = ops.empty() ? globs.empty() : std::find(ops.begin(), ops.end(), op) != ops.end();
    const bool has_backend = std::any_of(sel.backends.begin(), sel.backends.end(),
                                         [op](const Backend* b) { return b->op() == op; });
    if (has_backend)
      sel.ops.push_back(op);
    else if (asked)
      sel.errors.push_back(fmt::format("op {}: no selected backend can run it", op_name(op)));
  }
  return sel;
}

std::string drift_format(const CaseSpec& spec) {
  std::string f(dtype_name(spec.act_dtype));
  if (spec.op == OpKind::kAttention && spec.kv_dtype != spec.act_dtype)
    f += fmt::format("+{}", dtype_name(spec.kv_dtype));
  return f;
}

bool formats_selected(const CaseSpec& spec, const std::vector<DType>& formats) {
  const auto listed = [&](DType t) {
    return formats.empty() || std::find(formats.begin(), formats.end(), t) != formats.end();
  };
  return listed(spec.act_dtype) && (spec.op != OpKind::kAttention || listed(spec.kv_dtype));
}

}  // namespace driftcheck::fuzz
