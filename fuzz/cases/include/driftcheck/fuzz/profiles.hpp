// Model profiles (`driftcheck fuzz --model NAME`, listed by `driftcheck list`): the shapes one model's
// kernels really see, so that a campaign draws them at their real sizes (hidden size, heads, head size, KV
// block size and format, batches, contexts up to 128k, speculative verification lengths) in most cases and
// the usual small edge cases in the rest. Without --model the generator's stream is unchanged (tests rely on
// its draw order).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/reference/case.hpp"

namespace driftcheck::fuzz {

struct ModelProfile {
  std::string_view name;
  std::string_view description;  // where the numbers come from
  std::int64_t hidden;           // H: the norms' width (the EAGLE3 drafter's layer 0 concatenates two: 2H)
  double rms_eps;
  std::int64_t q_heads, kv_heads, head_dim;
  std::int64_t block_size;  // the serving engine's KV block (page) size
  DType act_dtype;
  DType kv_dtype;
  std::int64_t max_context;         // tokens
  std::int64_t spec_min, spec_max;  // speculative tokens per verification step (query length k + 1)
  std::int64_t window = 0;          // sliding window of the windowed layers (0: none)
  bool sinks = false;               // attention sinks
};

const std::vector<ModelProfile>& model_profiles();
// nullptr for an unknown name.
const ModelProfile* find_model_profile(std::string_view name);
// "minimax-m3, llama-3.1-8b-eagle3, ...", for messages.
std::string model_profile_names();

}  // namespace driftcheck::fuzz
