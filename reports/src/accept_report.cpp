#include "driftcheck/reports/accept_report.hpp"
#include "driftcheck/files/json_fields.hpp"

#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/files/json_text.hpp"

namespace driftcheck::reports {

using files::bool_field;
using files::exit_code_field;
using files::FieldError;
using files::format_problem;
using files::int_field;
using files::json_text;
using files::list_field;
using files::number_field;
using files::number_json;
using files::object_field;
using files::string_field;
using files::strings_field;
using files::u64_field;
using files::within_field;
namespace {

using nlohmann::json;

// KL is infinite when a backend's logits are NaN/Inf: written as every driftcheck JSON file writes non-finite
// numbers (json_text.hpp).
json row_json(const AcceptRow& r) {
  return {{"backend", r.backend},
          {"op", r.op},
          {"kind", r.kind},
          {"error", r.error},
          {"substituted", r.substituted},
          {"kept_reference", r.kept_reference},
          {"positions", r.positions},
          {"nonfinite_positions", r.nonfinite_positions},
          {"top1_agreement", r.top1_agreement},
          {"topk_overlap", r.topk_overlap},
          {"kl_mean", number_json(r.kl_mean)},
          {"kl_max", number_json(r.kl_max)},
          {"tv_mean", r.tv_mean},
          {"greedy_k2", r.greedy_k2},
          {"greedy_k3", r.greedy_k3},
          {"sampling_k2", r.sampling_k2},
          {"sampling_k3", r.sampling_k3},
          {"accepted_length_k3", r.accepted_length_k3},
          {"seconds", r.seconds},
          {"beyond_budget", r.beyond_budget}};
}

AcceptRow row_from(const json& j) {
  AcceptRow r;
  r.backend = string_field(j, "backend"), r.op = string_field(j, "op"), r.kind = string_field(j, "kind");
  r.error = string_field(j, "error");
  r.substituted = strings_field(j, "substituted"), r.kept_reference = strings_field(j, "kept_reference");
  r.positions = int_field(j, "positions", 0), r.nonfinite_positions = int_field(j, "nonfinite_positions", 0);
  r.top1_agreement = number_field(j, "top1_agreement"), r.topk_overlap = number_field(j, "topk_overlap");
  r.kl_mean = number_field(j, "kl_mean"), r.kl_max = number_field(j, "kl_max");
  r.tv_mean = number_field(j, "tv_mean");
  r.greedy_k2 = number_field(j, "greedy_k2"), r.greedy_k3 = number_field(j, "greedy_k3");
  r.sampling_k2 = number_field(j, "sampling_k2"), r.sampling_k3 = number_field(j, "sampling_k3");
  r.accepted_length_k3 = number_field(j, "accepted_length_k3"), r.seconds = number_field(j, "seconds");
  r.beyond_budget = bool_field(j, "beyond_budget");
  return r;
}

std::string pct(double share) {
  return fmt::format("{:.1f}%", 100 * share);
}

// KL of a run whose logits went NaN/Inf is infinite: say why instead of printing "inf".
std::string kl_text(double kl, std::int64_t nonfinite) {
  if (nonfinite > 0) return fmt::format("∞ (NaN/Inf logits at {} positions)", nonfinite);
  return kl < 1e-4 ? fmt::format("{:.1e}", kl) : fmt::format("{:.4f}", kl);
}

}  // namespace

json to_json(const AcceptReport& r) {
  json rows = json::array();
  for (const auto& row : r.rows) rows.push_back(row_json(row));
  return {{"format", kAcceptFormatName},
          {"format_version", kAcceptFormatVersion},
          {"tool_version", r.tool_version},
          {"command", r.command},
          {"seed", r.seed},
          {"model",
           {{"hidden", r.hidden},
            {"num_q_heads", r.num_q_heads},
            {"num_kv_heads", r.num_kv_heads},
            {"head_dim", r.head_dim},
            {"intermediate", r.intermediate},
            {"vocab", r.vocab},
            {"positions", r.positions},
            {"sequences", r.sequences},
            {"block_size", r.block_size},
            {"act_dtype", r.act_dtype},
            {"kv_dtype", r.kv_dtype},
            {"attention_form", r.attention_form},
            {"features", r.features}}},
          {"top_k", r.top_k},
          {"base_acceptance", r.base_acceptance},
          {"max_drop", r.max_drop},
          {"reference_top1_prob_mean", r.reference_top1_prob_mean},
          {"reference_top1_margin_median", r.reference_top1_margin_median},
          {"rows", rows},
          {"unavailable", r.unavailable},
          {"errors", r.errors},
          {"seconds", r.seconds},
          {"exit_code", r.exit_code}};
}

AcceptReport accept_report_from_json(const json& j) {
  if (!j.is_object() || !j.contains("format") || j["format"] != kAcceptFormatName)
    throw std::runtime_error(fmt::format("not a {} file", kAcceptFormatName));
  if (const std::string problem = format_problem(j, kAcceptFormatName, kAcceptFormatVersion);
      !problem.empty())
    throw std::runtime_error(fmt::format("{} {}", kAcceptFormatName, problem));
  try {
    AcceptReport r;
    r.tool_version = string_field(j, "tool_version"), r.command = string_field(j, "command");
    r.seed = u64_field(j, "seed");
    within_field("model", [&] {
      const json& m = object_field(j, "model");
      r.hidden = int_field(m, "hidden", 0), r.num_q_heads = int_field(m, "num_q_heads", 0);
      r.num_kv_heads = int_field(m, "num_kv_heads", 0), r.head_dim = int_field(m, "head_dim", 0);
      r.intermediate = int_field(m, "intermediate", 0), r.vocab = int_field(m, "vocab", 0);
      r.positions = int_field(m, "positions", 0), r.sequences = int_field(m, "sequences", 0);
      r.block_size = int_field(m, "block_size", 0);
      r.act_dtype = string_field(m, "act_dtype"), r.kv_dtype = string_field(m, "kv_dtype");
      r.attention_form = string_field(m, "attention_form"), r.features = string_field(m, "features");
    });
    const auto top_k = int_field(j, "top_k", 0);
    if (top_k > std::numeric_limits<int>::max())
      throw FieldError("top_k", fmt::format("{} is too large", top_k));
    r.top_k = static_cast<int>(top_k);
    r.base_acceptance = number_field(j, "base_acceptance"), r.max_drop = number_field(j, "max_drop");
    r.reference_top1_prob_mean = number_field(j, "reference_top1_prob_mean");
    r.reference_top1_margin_median = number_field(j, "reference_top1_margin_median");
    r.rows = list_field(j, "rows", row_from);
    r.unavailable = strings_field(j, "unavailable"), r.errors = strings_field(j, "errors");
    r.seconds = number_field(j, "seconds"), r.exit_code = exit_code_field(j, "exit_code");
    return r;
  } catch (const FieldError& e) {
    throw std::runtime_error(fmt::format("malformed {}: {}", kAcceptFormatName, e.what()));
  }
}

std::string to_markdown(const AcceptReport& r) {
  std::string md = fmt::format(
      "## Acceptance proxy\n\n"
      "Synthetic EAGLE3-style drafter layer 0 (seed {}): H {}, {} query / {} KV heads of {}, MLP {}, "
      "vocabulary "
      "{}; {} positions in {} sequences; {} activations, {} KV cache, block size {}, attention as {}; "
      "features: "
      "{}. The fp64 drafter's mean top-1 probability is {:.2f}, its median top-1 margin {:.3f} logits.\n\n"
      "Each row runs the same drafter with one backend substituted wherever the chain calls its op, and "
      "compares "
      "every position's next-token distribution with the fp64 drafter's. *top-1*: share of positions with "
      "the "
      "same top token. *top-{}*: mean overlap of the top-{} sets. *KL*: mean KL(p_ref || p) in nats. "
      "*greedy k=2/3*: estimated acceptance rate (accepted / drafted tokens) with 2 or 3 speculative tokens "
      "under greedy verification, from chains of consecutive positions{}; *sampling*: the same under "
      "speculative sampling (a token is accepted with probability 1 - TV). *length*: mean accepted length "
      "for "
      "k=3 (bonus token included, as vLLM reports it). A correct backend stays within a rounding of 100%; "
      "structural bugs collapse (the incident: 58% vs 2.8%). Rows beyond the budget (more than {:.1f} points "
      "lost at greedy k=3) are marked ✗.\n\n",
      r.seed, r.hidden, r.num_q_heads, r.num_kv_heads, r.head_dim, r.intermediate, r.vocab, r.positions,
      r.sequences, r.act_dtype, r.kv_dtype, r.block_size, r.attention_form, r.features,
      r.reference_top1_prob_mean, r.reference_top1_margin_median, r.top_k, r.top_k,
      r.base_acceptance < 1
          ? fmt::format(", times a per-token acceptance of {:.2f} of the fp64 drafter itself",
                        r.base_acceptance)
          : " (relative to the fp64 drafter: 100% means no token changed)",
      r.max_drop);
  md += fmt::format(
      "| backend | top-1 | top-{} | KL | greedy k=2 | greedy k=3 | sampling k=2 | sampling k=3 | length k=3 "
      "| "
      "substituted at | |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
      r.top_k);
  for (const auto& row : r.rows) {
    if (!row.error.empty()) {
      md += fmt::format("| {} | | | | | | | | | {} | ✗ |\n", row.backend, row.error);
      continue;
    }
    std::string where;
    for (const auto& s : row.substituted) where += (where.empty() ? "" : ", ") + s;
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} | {} |\n", row.backend,
                      pct(row.top1_agreement), pct(row.topk_overlap),
                      kl_text(row.kl_mean, row.nonfinite_positions), pct(row.greedy_k2), pct(row.greedy_k3),
                      pct(row.sampling_k2), pct(row.sampling_k3), row.accepted_length_k3, where,
                      row.beyond_budget ? "✗" : "✓");
  }
  md += "\n";
  for (const auto& row : r.rows)
    for (const auto& k : row.kept_reference)
      md += fmt::format("- {}: reference kept at {}\n", row.backend, k);
  for (const auto& u : r.unavailable) md += fmt::format("- unavailable here: {}\n", u);
  for (const auto& e : r.errors) md += fmt::format("- error: {}\n", e);
  return md;
}

}  // namespace driftcheck::reports
