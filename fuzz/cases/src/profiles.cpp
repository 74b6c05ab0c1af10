#include "driftcheck/fuzz/profiles.hpp"

#include <algorithm>

namespace driftcheck::fuzz {

// Numbers from each model's published configuration (config.json of the checkpoint named).
const std::vector<ModelProfile>& model_profiles() {
  static const std::vector<ModelProfile> profiles = {
      {"minimax-m3",
       "MiniMax-M3 target: hidden 6144, 64 query / 4 KV heads of 128, KV blocks of 128 tokens in fp8 e4m3, "
       "contexts to 128k, 2-3 speculative tokens (issue #10)",
       6144, 1e-6, 64, 4, 128, 128, DType::kBF16, DType::kF8E4M3FN, 131072, 2, 3},
      {"llama-3.1-8b-eagle3",
       "EAGLE3 drafter of Llama-3.1-8B-Instruct (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): hidden 4096, 32 query "
       "/ 8 "
       "KV heads of 128, bf16 KV in vLLM's 16-token blocks, contexts to 128k, 3-7 speculative tokens",
       4096, 1e-5, 32, 8, 128, 16, DType::kBF16, DType::kBF16, 131072, 3, 7},
      {"llama-3.3-70b-eagle3",
       "EAGLE3 drafter of Llama-3.3-70B-Instruct (yuhuili/EAGLE3-LLaMA3.3-Instruct-70B): hidden 8192, 64 "
       "query / "
       "8 KV heads of 128, bf16 KV in 16-token blocks, contexts to 128k, 3-7 speculative tokens",
       8192, 1e-5, 64, 8, 128, 16, DType::kBF16, DType::kBF16, 131072, 3, 7},
      {"gpt-oss-120b",
       "gpt-oss-120b (openai/gpt-oss-120b): hidden 2880, 64 query / 8 KV heads of 64, attention sinks, a "
       "128-token sliding window on every other layer, bf16 KV in 16-token blocks, contexts to 128k, 1-3 "
       "speculative tokens",
       2880, 1e-5, 64, 8, 64, 16, DType::kBF16, DType::kBF16, 131072, 1, 3, 128, true},
  };
  return profiles;
}

const ModelProfile* find_model_profile(std::string_view name) {
  const auto& all = model_profiles();
  const auto it = std::find_if(all.begin(), all.end(), [&](const ModelProfile& p) { return p.name == name; });
  return it == all.end() ? nullptr : &*it;
}

std::string model_profile_names() {
  std::string names;
  for (const ModelProfile& p : model_profiles()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

}  // namespace driftcheck::fuzz
