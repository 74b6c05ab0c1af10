// `driftcheck accept`: run the drafter (accept_model) with the reference and with each selected backend, then
// compare every position's next-token distribution with the reference's (docs/ACCEPT.md).
#include "driftcheck/fuzz/accept.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <ostream>
#include <thread>

#include <fmt/format.h>

#include "accept_model.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace driftcheck::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Positions whose logits go through the LM head together: big enough for an efficient GEMM, small enough that
// a worker's logits stay a few tens of MB at a 128k vocabulary.
constexpr std::int64_t kChunk = 32;

// What one position's next-token distribution looks like next to the reference's.
struct PositionMetrics {
  bool agree = false;  // same top-1 token
  double overlap = 0;  // |top-k ∩ top-k_ref| / k
  double kl = 0;       // KL(p_ref || p), nats
  double tv = 0;       // total variation distance
  bool nonfinite = false;
};

// The reference's view of one position: log-probabilities and top-k (shared by every backend's comparison).
struct RefPosition {
  std::vector<double> logp;
  std::vector<std::int32_t> topk;  // indices, largest logit first
  double top1_prob = 0;
  double margin = 0;  // logit(top-1) - logit(top-2)
};

std::vector<std::int32_t> top_indices(const float* logits, std::int64_t vocab, int k) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  // Ties go to the lower token id, as argmax does.
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [logits](std::int32_t a, std::int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

std::vector<double> log_softmax(const float* logits, std::int64_t vocab) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double sum = 0;
  for (std::int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[i] - m);
  const double lse = m + std::log(sum);
  std::vector<double> out(static_cast<std::size_t>(vocab));
  for (std::int64_t i = 0; i < vocab; ++i) out[static_cast<std::size_t>(i)] = logits[i] - lse;
  return out;
}

RefPosition reference_position(const float* logits, std::int64_t vocab, int k) {
  RefPosition r;
  r.logp = log_softmax(logits, vocab);
  r.topk = top_indices(logits, vocab, std::max(k, 2));
  r.margin = logits[r.topk[0]] - logits[r.topk[1]];
  r.topk.resize(static_cast<std::size_t>(k));
  r.top1_prob = std::exp(r.logp[static_cast<std::size_t>(r.topk[0])]);
  return r;
}

PositionMetrics compare(const RefPosition& ref, const float* logits, std::int64_t vocab, int k) {
  PositionMetrics m;
  if (!std::all_of(logits, logits + vocab, [](float x) { return std::isfinite(x); })) {
    // No distribution at all: no token, infinitely far, nothing in common.
    m.nonfinite = true, m.kl = std::numeric_limits<double>::infinity(), m.tv = 1;
    return m;
  }
  const auto top = top_indices(logits, vocab, k);
  m.agree = top[0] == ref.topk[0];
  int common = 0;
  for (auto i : top) common += std::find(ref.topk.begin(), ref.topk.end(), i) != ref.topk.end();
  m.overlap = static_cast<double>(common) / k;
  const auto logq = log_softmax(logits, vocab);
  for (std::size_t i = 0; i < logq.size(); ++i) {
    const double p = std::exp(ref.logp[i]), q = std::exp(logq[i]);
    if (p > 0) m.kl += p * (ref.logp[i] - logq[i]);
    m.tv += 0.5 * std::abs(p - q);
  }
  m.kl = std::max(0.0, m.kl);  // rounding can leave -1e-17 for identical distributions
  return m;
}

void validate(const DrafterConfig& c, int top_k) {
  const auto need = [](bool ok, std::string_view what) {
    if (!ok) throw UsageError(std::string(what));
  };
  need(c.hidden >= 1 && c.head_dim >= 1 && c.intermediate >= 1,
       "--hidden, --head-dim and --intermediate must be >= 1");
  need(c.num_kv_heads >= 1 && c.num_q_heads >= c.num_kv_heads && c.num_q_heads % c.num_kv_heads == 0,
       "--heads must be a positive multiple of --kv-heads");
  need(c.positions >= 8, "--positions must be >= 8 (chains of speculative tokens need a few positions)");
  need(c.block_size >= 1, "--block-size must be >= 1");
  need(top_k >= 1 && top_k <= c.vocab && c.vocab >= 2, "--top-k must be in [1, --vocab] and --vocab >= 2");
  need(c.act_dtype == DType::kBF16 || c.act_dtype == DType::kF16, "--dtype must be bf16 or fp16");
  need(c.kv_dtype == c.act_dtype || is_fp8(c.kv_dtype),
       "--kv-dtype must be the activation format or an fp8 format");
  need(c.window >= 0 && c.softcap >= 0, "--window and --softcap must be >= 0");
  need(c.query_len >= 0, "--query-len must be >= 0");
}

std::string attention_form_name(std::int64_t query_len) {
  if (query_len == 0) return "one prefill per sequence";
  if (query_len == 1) return "decode (query length 1)";
  return fmt::format("verification chunks of {} queries (decode for decode-only backends)", query_len);
}

std::string features_text(const DrafterConfig& c) {
  std::string s;
  const auto add = [&s](const std::string& f) { s += (s.empty() ? "" : ", ") + f; };
  if (c.window > 0) add(fmt::format("sliding window {}", c.window));
  if (c.softcap > 0) add(fmt::format("softcap {}", c.softcap));
  if (c.sinks) add("attention sinks");
  add("GQA " + std::to_string(c.num_q_heads / c.num_kv_heads));
  add("hidden state row stride 3H");
  return s;
}

class AcceptRunner {
 public:
  AcceptRunner(const AcceptOptions& o, std::vector<const Backend*> backends)
      : opts_(o), model_(o.model), backends_(std::move(backends)) {}
  reports::AcceptReport run();

 private:
  int jobs() const {
    return opts_.jobs > 0 ? opts_.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  template <class F>
  void parallel(std::size_t n, F f) const;
  void run_backends();
  void score();
  reports::AcceptRow row(std::size_t i) const;

  const AcceptOptions& opts_;
  Drafter model_;
  std::vector<const Backend*> backends_;
  DrafterRun reference_;
  std::vector<DrafterRun> runs_;
  std::vector<std::string> run_errors_;
  std::vector<double> run_seconds_;
  std::vector<std::vector<PositionMetrics>> metrics_;  // [backend][position]
  std::vector<double> ref_top1_prob_, ref_margin_;
};

template <class F>
void AcceptRunner::parallel(std::size_t n, F f) const {
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < n; i = next++) f(i);
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min<int>(jobs(), static_cast<int>(n)); ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
}

void AcceptRunner::run_backends() {
  reference_ = model_.run(nullptr, nullptr);
  runs_.resize(backends_.size());
  run_errors_.resize(backends_.size());
  run_seconds_.resize(backends_.size());
  Progress progress(opts_.log, opts_.progress, "accept: layer 0", "runs",
                    {static_cast<double>(backends_.size()), std::nullopt});
  std::atomic<int> done{0};
  parallel(backends_.size(), [&](std::size_t i) {
    const auto t0 = Clock::now();
    std::string why;
    try {
      // A backend named exactly but unavailable here (no GPU) is selected so that it fails, as in a campaign.
      if (!backends_[i]->available(&why)) throw BackendError("unavailable here: " + why);
      runs_[i] = model_.run(backends_[i], &reference_.trace);
      if (runs_[i].substituted.empty())
        run_errors_[i] = "substituted nowhere: " + (runs_[i].kept_reference.empty()
                                                        ? std::string("its op is not in the chain")
                                                        : runs_[i].kept_reference.front());
    } catch (const std::exception& e) {
      run_errors_[i] = fmt::format("error: {}", e.what());
    }
    run_seconds_[i] = seconds_since(t0);
    progress.update(++done, backends_[i]->name());
  });
  progress.finish(done);
}

// The LM head and the comparison, chunk by chunk of positions: each chunk's reference logits are computed
// once and compared with every backend's; rows of a backend's final hidden state that equal the reference's
// bit for bit have the reference's logits, so they cost nothing.
void AcceptRunner::score() {
  const std::int64_t n = model_.config().positions, vocab = model_.config().vocab;
  const int k = opts_.top_k;
  metrics_.assign(backends_.size(), std::vector<PositionMetrics>(static_cast<std::size_t>(n)));
  ref_top1_prob_.assign(static_cast<std::size_t>(n), 0);
  ref_margin_.assign(static_cast<std::size_t>(n), 0);
  const auto chunks = static_cast<std::size_t>((n + kChunk - 1) / kChunk);
  Progress progress(opts_.log, opts_.progress, "accept: LM head", "positions",
                    {static_cast<double>(n), std::nullopt});
  std::atomic<std::int64_t> done{0};
  parallel(chunks, [&](std::size_t c) {
    const std::int64_t first = static_cast<std::int64_t>(c) * kChunk, count = std::min(kChunk, n - first);
    const Eigen::MatrixXf ref_logits = model_.logits(reference_.trace.f.middleRows(first, count));
    std::vector<RefPosition> ref(static_cast<std::size_t>(count));
    for (std::int64_t r = 0; r < count; ++r) {
      ref[static_cast<std::size_t>(r)] = reference_position(ref_logits.col(r).data(), vocab, k);
      ref_top1_prob_[static_cast<std::size_t>(first + r)] = ref[static_cast<std::size_t>(r)].top1_prob;
      ref_margin_[static_cast<std::size_t>(first + r)] = ref[static_cast<std::size_t>(r)].margin;
    }
    for (std::size_t b = 0; b < backends_.size(); ++b) {
      if (!run_errors_[b].empty()) continue;
      const Act& f = runs_[b].trace.f;
      std::vector<std::int64_t> differ;
      for (std::int64_t r = 0; r < count; ++r) {
        if ((f.row(first + r).array() == reference_.trace.f.row(first + r).array()).all())
          metrics_[b][static_cast<std::size_t>(first + r)] = {true, 1.0, 0.0, 0.0, false};
        else
          differ.push_back(r);
      }
      if (differ.empty()) continue;
      Act rows(static_cast<std::int64_t>(differ.size()), f.cols());
      for (std::size_t i = 0; i < differ.size(); ++i)
        rows.row(static_cast<std::int64_t>(i)) = f.row(first + differ[i]);
      const Eigen::MatrixXf logits = model_.logits(rows);
      for (std::size_t i = 0; i < differ.size(); ++i)
        metrics_[b][static_cast<std::size_t>(first + differ[i])] =
            compare(ref[static_cast<std::size_t>(differ[i])], logits.col(static_cast<std::int64_t>(i)).data(),
                    vocab, k);
    }
    progress.update(static_cast<double>(done += count));
  });
  progress.finish(static_cast<double>(done));
}

reports::AcceptRow AcceptRunner::row(std::size_t i) const {
  const Backend& b = *backends_[i];
  reports::AcceptRow r;
  r.backend = std::string(b.name()), r.op = std::string(op_name(b.op()));
  r.kind = std::string(backend_kind_name(b.kind()));
  r.substituted = runs_[i].substituted, r.kept_reference = runs_[i].kept_reference;
  r.seconds = run_seconds_[i];
  r.error = run_errors_[i];
  if (!r.error.empty()) {
    r.beyond_budget = true;
    return r;
  }
  const auto& m = metrics_[i];
  const std::int64_t n = model_.config().positions;
  const auto starts = model_.sequence_starts();
  std::vector<double> greedy, sampling, ones(static_cast<std::size_t>(n), 1.0);
  for (const auto& p : m) {
    r.nonfinite_positions += p.nonfinite;
    r.top1_agreement += p.agree, r.topk_overlap += p.overlap, r.kl_mean += p.kl, r.tv_mean += p.tv;
    r.kl_max = std::max(r.kl_max, p.kl);
    greedy.push_back(p.agree ? 1.0 : 0.0);
    sampling.push_back(1.0 - p.tv);
  }
  r.positions = n;
  const double dn = static_cast<double>(n);
  r.top1_agreement /= dn, r.topk_overlap /= dn, r.kl_mean /= dn, r.tv_mean /= dn;
  const double a0 = opts_.base_acceptance;
  const auto rate = [&](const std::vector<double>& acc, int k) {
    return expected_accepted(acc, starts, n, k, a0) / k;
  };
  r.greedy_k2 = rate(greedy, 2), r.greedy_k3 = rate(greedy, 3);
  r.sampling_k2 = rate(sampling, 2), r.sampling_k3 = rate(sampling, 3);
  r.accepted_length_k3 = 1 + expected_accepted(greedy, starts, n, 3, a0);
  r.beyond_budget = 100 * (rate(ones, 3) - r.greedy_k3) > opts_.max_drop;
  return r;
}

reports::AcceptReport AcceptRunner::run() {
  const auto t0 = Clock::now();
  run_backends();
  score();
  const DrafterConfig& c = model_.config();
  reports::AcceptReport rep;
  rep.tool_version = std::string(kToolVersion), rep.command = opts_.command_line, rep.seed = c.seed;
  rep.hidden = c.hidden, rep.num_q_heads = c.num_q_heads, rep.num_kv_heads = c.num_kv_heads;
  rep.head_dim = c.head_dim, rep.intermediate = c.intermediate, rep.vocab = c.vocab;
  rep.positions = c.positions, rep.sequences = static_cast<std::int64_t>(model_.seq_lens().size());
  rep.block_size = c.block_size;
  rep.act_dtype = std::string(dtype_name(c.act_dtype)), rep.kv_dtype = std::string(dtype_name(c.kv_dtype));
  rep.attention_form = attention_form_name(c.query_len), rep.features = features_text(c);
  rep.top_k = opts_.top_k, rep.base_acceptance = opts_.base_acceptance, rep.max_drop = opts_.max_drop;
  rep.reference_top1_prob_mean =
      std::accumulate(ref_top1_prob_.begin(), ref_top1_prob_.end(), 0.0) / static_cast<double>(c.positions);
  std::vector<double> margins = ref_margin_;
  std::nth_element(margins.begin(), margins.begin() + static_cast<std::ptrdiff_t>(margins.size() / 2),
                   margins.end());
  rep.reference_top1_margin_median = margins[margins.size() / 2];
  for (std::size_t i = 0; i < backends_.size(); ++i) {
    rep.rows.push_back(row(i));
    if (rep.rows.back().beyond_budget) rep.exit_code = 1;
  }
  rep.seconds = seconds_since(t0);
  return rep;
}

}  // namespace

double expected_accepted(const std::vector<double>& accept, const std::vector<std::int64_t>& sequence_starts,
                         std::int64_t positions, int k, double base_acceptance) {
  double sum = 0;
  std::int64_t chains = 0;
  for (std::size_t s = 0; s < sequence_starts.size(); ++s) {
    const std::int64_t end = s + 1 < sequence_starts.size() ? sequence_starts[s + 1] : positions;
    for (std::int64_t t = sequence_starts[s]; t + k <= end; ++t) {
      // Draft token i is accepted only if tokens 1..i all are: E = sum_i prod_{j<=i} (a0 * accept_{t+j-1}).
      double reach = 1;
      for (int i = 0; i < k; ++i) {
        reach *= base_acceptance * accept[static_cast<std::size_t>(t + i)];
        sum += reach;
      }
      ++chains;
    }
  }
  return chains > 0 ? sum / static_cast<double>(chains) : 0.0;
}

reports::AcceptReport run_accept(const AcceptOptions& options) {
  validate(options.model, options.top_k);
  if (!(options.base_acceptance > 0 && options.base_acceptance <= 1))
    throw UsageError("--base-acceptance must be in (0, 1]");
  const Registry& reg = options.backends != nullptr ? *options.backends : registry();
  const Selection sel = select_backends(reg, {}, options.backend_globs, options.include_mutants);
  if (sel.backends.empty()) throw UsageError("no backend selected (driftcheck list shows them)");
  AcceptRunner runner(options, sel.backends);
  reports::AcceptReport r = runner.run();
  r.unavailable = sel.unavailable;
  return r;
}

}  // namespace driftcheck::fuzz
