// The report model of the acceptance proxy (`driftcheck accept`, docs/ACCEPT.md): per backend, how often the
// drafter's tokens with that backend substituted agree with the fp64 drafter's, and what that would cost in
// speculative-decoding acceptance. accept.json is versioned and written atomically; `driftcheck report` reads
// it back (accept_report_from_json) and shows the same table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace driftcheck::reports {

inline constexpr std::string_view kAcceptFormatName = "driftcheck.accept";
inline constexpr int kAcceptFormatVersion = 1;

// One backend substituted into the drafter chain.
struct AcceptRow {
  std::string backend;
  std::string op;
  std::string kind;                      // cpu, gpu, mutant, ext
  std::string error;                     // non-empty: the run failed (backend error) or substituted nowhere
  std::vector<std::string> substituted;  // call points where the backend ran ("post_attention_norm")
  std::vector<std::string> kept_reference;  // "final_norm: residual required" (the backend declined)
  std::int64_t positions = 0;
  std::int64_t nonfinite_positions = 0;  // logits with NaN/Inf: no token (counted as disagreement)
  double top1_agreement = 0;             // share of positions whose top-1 token equals the reference's
  double topk_overlap = 0;               // mean |top-k ∩ top-k_ref| / k
  double kl_mean = 0;                    // mean KL(p_ref || p) in nats (inf with non-finite logits)
  double kl_max = 0;
  double tv_mean = 0;  // mean total variation distance between the two next-token distributions
  // Acceptance rate (accepted / drafted) for k = 2 and 3 speculative tokens: greedy verification (top-1) and
  // speculative sampling (min(1, p/q) acceptance, 1 - TV per token); accepted length (bonus token included)
  // for k = 3 greedy.
  double greedy_k2 = 0, greedy_k3 = 0, sampling_k2 = 0, sampling_k3 = 0;
  double accepted_length_k3 = 0;
  double seconds = 0;
  bool beyond_budget = false;  // greedy k=3 acceptance dropped more than max_drop points
};

struct AcceptReport {
  std::string tool_version;
  std::string command;
  std::uint64_t seed = 0;
  // The drafter: sizes, formats, layout.
  std::int64_t hidden = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  std::int64_t positions = 0, sequences = 0, block_size = 0;
  std::string act_dtype, kv_dtype, attention_form;
  std::string features;  // window / softcap / sinks in use, "-" for none
  int top_k = 0;
  double base_acceptance = 1;
  double max_drop = 0;
  // How confident the fp64 drafter is: the context for how fragile its top-1 is.
  double reference_top1_prob_mean = 0;
  double reference_top1_margin_median = 0;  // logit(top-1) - logit(top-2), median over positions
  std::vector<AcceptRow> rows;
  std::vector<std::string> unavailable;  // backends a glob matched that cannot run here, with why
  std::vector<std::string> errors;
  double seconds = 0;
  int exit_code = 0;
};

nlohmann::json to_json(const AcceptReport& r);
// Throws std::runtime_error with a one-line reason for a malformed or foreign file.
AcceptReport accept_report_from_json(const nlohmann::json& j);
// The table with a header that says what each column means.
std::string to_markdown(const AcceptReport& r);

}  // namespace driftcheck::reports
