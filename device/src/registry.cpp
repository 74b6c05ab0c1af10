// The registry and the list of built-in backends.
#include <fmt/format.h>

#include "builtin.hpp"
#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/gpu.hpp"

namespace driftcheck {
namespace {

thread_local CallPolicy this_thread_policy;

}  // namespace

const CallPolicy& call_policy() {
  return this_thread_policy;
}

CallPolicyScope::CallPolicyScope(CallPolicy p) : saved_(std::move(this_thread_policy)) {
  this_thread_policy = std::move(p);
}

CallPolicyScope::~CallPolicyScope() {
  this_thread_policy = std::move(saved_);
}

void Registry::add(std::unique_ptr<Backend> b) {
  if (!b) throw InvalidArgument("Registry::add: null backend");
  if (find(b->name()) != nullptr)
    throw InvalidArgument(fmt::format("duplicate backend name '{}'", b->name()));
  backends_.push_back(std::move(b));
}

std::unique_ptr<Backend> Registry::replace(std::unique_ptr<Backend> b) {
  if (!b) throw InvalidArgument("Registry::replace: null backend");
  for (auto& slot : backends_) {
    if (slot->name() != b->name()) continue;
    std::swap(slot, b);
    return b;
  }
  throw InvalidArgument(fmt::format("no backend named '{}' to replace", b->name()));
}

const Backend* Registry::find(std::string_view name) const {
  for (const auto& b : backends_)
    if (b->name() == name) return b.get();
  return nullptr;
}

std::vector<const Backend*> Registry::match(std::string_view globs, bool include_mutants) const {
  std::vector<std::string_view> patterns;
  for (std::size_t start = 0; start <= globs.size();) {
    const std::size_t comma = std::min(globs.find(',', start), globs.size());
    std::string_view p = globs.substr(start, comma - start);
    while (!p.empty() && p.front() == ' ') p.remove_prefix(1);
    while (!p.empty() && p.back() == ' ') p.remove_suffix(1);
    if (!p.empty()) patterns.push_back(p);
    start = comma + 1;
  }
  std::vector<const Backend*> out;
  for (const auto& b : backends_) {
    if (b->kind() == BackendKind::kMutant && !include_mutants) continue;
    for (std::string_view p : patterns) {
      if (glob_match(p, b->name())) {
        out.push_back(b.get());
        break;
      }
    }
  }
  return out;
}

// Iterative wildcard match with backtracking to the last `*`: linear in practice, no recursion.
bool glob_match(std::string_view pattern, std::string_view text) {
  std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string_view backend_kind_name(BackendKind k) {
  switch (k) {
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kGpu:
      return "gpu";
    case BackendKind::kMutant:
      return "mutant";
    case BackendKind::kExternal:
      return "ext";
  }
  return "unknown";
}

namespace {

// One line per backend. A new backend: its own file with a factory, declared in builtin.hpp, one line here.
Registry build_registry() {
  using namespace twin;
  Registry r;
  // CPU twins (docs/BACKENDS.md).
  r.add(make_cpu_rmsnorm_native());
  r.add(make_cpu_rmsnorm_cuda());
  r.add(make_cpu_rmsnorm_cuda_onecast());
  r.add(make_cpu_rmsnorm_fused_add());
  r.add(make_cpu_rmsnorm_fused_add_onecast());
  r.add(make_cpu_dual_fused());
  r.add(make_cpu_dual_unfused());
  r.add(make_cpu_concat_copy());
  r.add(make_cpu_attn_triton_unified());
  r.add(make_cpu_attn_aiter_unified_mi300x());
  r.add(make_cpu_attn_aiter_unified_mi355x());
  r.add(make_cpu_attn_rocm_custom());
  r.add(make_cpu_attn_aiter_fa());
  // GPU backends: HIP kernels, when the build found a GPU toolchain.
#if DRIFTCHECK_HAVE_GPU
  register_gpu_backends(r);
#endif
  // Mutants: one deliberate bug each, to prove the harness catches its class.
  r.add(make_mutant_rmsnorm_stride_ignored());
  r.add(make_mutant_rmsnorm_residual_reread());
  r.add(make_mutant_rmsnorm_eps_outside_rsqrt());
  r.add(make_mutant_rmsnorm_act_accumulation());
  r.add(make_mutant_rmsnorm_batch_variant_block());
  r.add(make_mutant_rmsnorm_oob_write());
  r.add(make_mutant_dual_weight_rounded_early());
  r.add(make_mutant_dual_halves_swapped());
  r.add(make_mutant_concat_halves_swapped());
  r.add(make_mutant_rmsnorm_squares_in_act());
  r.add(make_mutant_rmsnorm_output_toward_zero());
  r.add(make_mutant_rmsnorm_one_plus_weight_rounded());
  r.add(make_mutant_rmsnorm_fast_rsqrt());
  r.add(make_mutant_rmsnorm_mean_square_rounded());
  r.add(make_mutant_rmsnorm_eps_fixed());
  r.add(make_mutant_attn_masked_p_times_v());
  r.add(make_mutant_attn_page_conversion());
  r.add(make_mutant_attn_fp8_fn_fnuz_swapped());
  r.add(make_mutant_attn_no_max_subtraction());
  r.add(make_mutant_attn_unscaled_split_merge());
  r.add(make_mutant_attn_gqa_modulo());
  r.add(make_mutant_attn_causal_off_by_one());
  r.add(make_mutant_attn_window_off_by_one());
  r.add(make_mutant_attn_softcap_missing());
  r.add(make_mutant_attn_sink_dropped());
  r.add(make_mutant_attn_table_stride_ignored());
  r.add(make_mutant_attn_logits_rounded());
  r.add(make_mutant_attn_extend_new_kv_from_cache());
#if DRIFTCHECK_HAVE_GPU
  register_gpu_mutants(r);
#endif
  return r;
}

}  // namespace

Registry& extend_registry() {
  static Registry r = build_registry();
  return r;
}

const Registry& registry() {
  return extend_registry();
}

}  // namespace driftcheck
