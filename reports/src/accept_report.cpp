#include "driftcheck/reports/accept_report.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/reports/json_text.hpp"

namespace driftcheck::reports {
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
  r.backend = j.at("backend"), r.op = j.at("op"), r.kind = j.at("kind"), r.error = j.at("error");
  r.substituted = j.at("substituted").get<std::vector<std::string>>();
  r.kept_reference = j.at("kept_reference").get<std::vector<std::string>>();
  r.positions = j.at("positions"), r.nonfinite_positions = j.at("nonfinite_positions");
  r.top1_agreement = j.at("top1_agreement"), r.topk_overlap = j.at("topk_overlap");
  r.kl_mean = number_from_json(j.at("kl_mean")), r.kl_max = number_from_json(j.at("kl_max")),
  r.tv_mean = j.at("tv_mean");
  r.greedy_k2 = j.at("greedy_k2"), r.greedy_k3 = j.at("greedy_k3");
  r.sampling_k2 = j.at("sampling_k2"), r.sampling_k3 = j.at("sampling_k3");
  r.accepted_length_k3 = j.at("accepted_length_k3"), r.seconds = j.at("seconds");
  r.beyond_budget = j.at("beyond_budget");
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
  try {
    if (j.at("format") != kAcceptFormatName)
      throw std::runtime_error(fmt::format("not a {} file", kAcceptFormatName));
    if (j.at("format_version") != kAcceptFormatVersion)
      throw std::runtime_error(fmt::format("{} version {} (this driftcheck reads version {})",
                                           kAcceptFormatName, j.at("format_version").dump(),
                                           kAcceptFormatVersion));
    AcceptReport r;
    r.tool_version = j.at("tool_version"), r.command = j.at("command"), r.seed = j.at("seed");
    const json& m = j.at("model");
    r.hidden = m.at("hidden"), r.num_q_heads = m.at("num_q_heads"), r.num_kv_heads = m.at("num_kv_heads");
    r.head_dim = m.at("head_dim"), r.intermediate = m.at("intermediate"), r.vocab = m.at("vocab");
    r.positions = m.at("positions"), r.sequences = m.at("sequences"), r.block_size = m.at("block_size");
    r.act_dtype = m.at("act_dtype"), r.kv_dtype = m.at("kv_dtype"), r.attention_form = m.at("attention_form");
    r.features = m.at("features");
    r.top_k = j.at("top_k"), r.base_acceptance = j.at("base_acceptance"), r.max_drop = j.at("max_drop");
    r.reference_top1_prob_mean = j.at("reference_top1_prob_mean");
    r.reference_top1_margin_median = j.at("reference_top1_margin_median");
    for (const auto& row : j.at("rows")) r.rows.push_back(row_from(row));
    r.unavailable = j.at("unavailable").get<std::vector<std::string>>();
    r.errors = j.at("errors").get<std::vector<std::string>>();
    r.seconds = j.at("seconds"), r.exit_code = j.at("exit_code");
    return r;
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("malformed {}: {}", kAcceptFormatName, e.what()));
  } catch (const std::invalid_argument& e) {  // a number string that is not inf/nan (json_text.hpp)
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
