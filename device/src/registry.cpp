// Registry: a set of backends by name, glob matching; the per-thread call policy.
#include <fmt/format.h>

#include "driftcheck/device/backend.hpp"

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

}  // namespace driftcheck
