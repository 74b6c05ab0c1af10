// The synthetic drafter behind `driftcheck accept` (accept.hpp, docs/ACCEPT.md): seeded weights and inputs,
// and layer 0 run with the reference or with one backend substituted at every call of its op. Internal to
// dc_fuzz.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "driftcheck/fuzz/accept.hpp"

namespace driftcheck::fuzz {

// Row-major activations; every value is exact in the activation format (bf16 and fp16 fit in float exactly).
using Act = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Weight = Eigen::MatrixXf;  // [in, out]: y = x W

// Every intermediate of one run of layer 0, so a backend's run can reuse the reference's up to the first
// stage it changes.
struct Trace {
  Act x;    // [N, 2H]  cat(input_layernorm(embeds), hidden_norm(hidden))
  Act qkv;  // [N, (Hq + 2 Hkv) D]
  Act o;    // [N, Hq D] attention output
  Act res;  // [N, H] residual after the post-attention add (o Wo + hidden)
  Act x2;   // [N, H] post-attention norm output
  Act f;    // [N, H] final norm output (what the LM head reads)
};

struct DrafterRun {
  Trace trace;
  std::vector<std::string> substituted;     // call points where the backend ran
  std::vector<std::string> kept_reference;  // "final_norm: <why the backend declined>"
};

class Drafter {
 public:
  explicit Drafter(const DrafterConfig& cfg);

  // Layer 0 with `b` substituted wherever the chain calls its op (nullptr: the reference everywhere). Stages
  // before the first one the backend changes are taken from `reference` when given. Throws BackendError when
  // the backend fails.
  DrafterRun run(const Backend* b, const Trace* reference) const;

  // Logits of rows of a final hidden state, one column per row ([vocab, rows]): fp32 GEMM, as an LM head
  // computes them.
  Eigen::MatrixXf logits(const Act& rows) const;

  const DrafterConfig& config() const { return cfg_; }
  const std::vector<std::int64_t>& seq_lens() const { return seq_lens_; }
  std::vector<std::int64_t> sequence_starts() const;
  double k_scale() const { return k_scale_; }
  double v_scale() const { return v_scale_; }

 private:
  Act input_block(const Backend* b, DrafterRun& run) const;
  Act attention(const Backend* b, const Act& qkv, DrafterRun& run) const;
  Case attention_case(const Act& qkv, std::int64_t query_len) const;
  void fused_add_norm(const Backend* b, const std::string& point, const Act& x, const Act& residual,
                      const std::vector<double>& w, Act& y, Act& new_residual, DrafterRun& run) const;
  Act gemm(const Act& x, const Weight& w) const;
  Act mlp(const Act& x2) const;

  DrafterConfig cfg_;
  std::vector<std::int64_t> seq_lens_;
  Act embeds_, hidden_;
  std::vector<double> w_input_norm_, w_hidden_norm_, w_post_norm_, w_final_norm_;
  Weight w_qkv_, w_o_, w_gate_, w_up_, w_down_, w_lm_;
  double k_scale_ = 1, v_scale_ = 1;
};

}  // namespace driftcheck::fuzz
