// The acceptance proxy (`driftcheck accept`, docs/ACCEPT.md): does a backend's drift change a drafter's
// tokens?
//
// A synthetic EAGLE3-style drafter layer 0 with seeded weights runs once with the fp64 reference of every op
// (each output correctly rounded to the activation format, as an ideal kernel would store it) and once per
// backend with that backend substituted wherever the chain calls its op:
//   x   = cat(input_layernorm(embeds), hidden_norm(hidden))       dual_rmsnorm_cat, or rmsnorm x2 + concat
//   q,k,v = x Wqkv  (from 2H)          k, v written into a paged KV cache (bf16 or fp8 with scales)
//   o   = attention(q, paged cache)                                 attention
//   a   = o Wo;  x2, res = fused_add_rmsnorm(a, hidden)             rmsnorm (residual, in place)
//   m   = down(silu(gate x2) * up x2);  f = fused_add_rmsnorm(m, res) rmsnorm (residual, in place)
//   logits = f Wlm  over the draft vocabulary
// The projections, SiLU and the LM head are common to every run (fp32 accumulation, outputs rounded to the
// activation format, as GEMM kernels do), so every difference in tokens comes from the substituted backend.
// Each position's logits are compared with the reference's: top-1 agreement, top-k overlap, KL divergence,
// and acceptance estimates for k speculative tokens from chains of consecutive positions (docs/ACCEPT.md
// derives them).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/progress.hpp"
#include "driftcheck/reports/accept_report.hpp"

namespace driftcheck::fuzz {

struct DrafterConfig {
  std::int64_t hidden = 256;
  std::int64_t num_q_heads = 4;
  std::int64_t num_kv_heads = 2;
  std::int64_t head_dim = 64;
  std::int64_t intermediate = 704;  // ~2.75 H, Llama's MLP ratio
  std::int64_t vocab = 32000;       // EAGLE3 drafters' draft vocabulary
  std::int64_t positions = 512;
  std::int64_t block_size = 16;
  DType act_dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  double eps = 1e-5;
  std::int64_t window = 0;
  double softcap = 0;
  bool sinks = false;
  // Attention queries per request: 4 (default) is a verification pass of 3 drafted tokens plus one, each
  // chunk of a sequence a request whose context ends with it; 1 is plain decode; 0 one prefill per sequence.
  // A backend that supports decode only runs the same queries as decodes (query length 1).
  std::int64_t query_len = 4;
  std::uint64_t seed = 1;
};

struct AcceptOptions {
  DrafterConfig model;
  std::string backend_globs;  // empty: every available non-mutant backend
  bool include_mutants = false;
  int top_k = 5;
  double base_acceptance = 1.0;  // per-token acceptance of the fp64 drafter by its target (1: relative)
  double max_drop = 5.0;  // percentage points of k=3 greedy acceptance a backend may lose (exit 1 beyond)
  int jobs = 0;           // 0: one per hardware thread
  std::string command_line;
  std::ostream* log = nullptr;
  ProgressStyle progress;
  const Registry* backends = nullptr;  // nullptr: the built-in registry()
};

// Throws UsageError for bad options (sizes that do not fit together, a glob matching nothing).
reports::AcceptReport run_accept(const AcceptOptions& options);

// The estimates of docs/ACCEPT.md, exposed for tests. `accept[t]` is the probability that the token drafted
// at position t is accepted given it is reached (1 or 0 for greedy verification: top-1 agreement; 1 - total
// variation for speculative sampling); `sequence_starts` the first position of each sequence (chains never
// cross a sequence). Returns the expected number of accepted draft tokens per step of k drafted tokens,
// averaged over every start position with k positions left in its sequence.
double expected_accepted(const std::vector<double>& accept, const std::vector<std::int64_t>& sequence_starts,
                         std::int64_t positions, int k, double base_acceptance);

}  // namespace driftcheck::fuzz
