// ext.<name>: a backend declared in a backends file and run by worker processes (docs/PROTOCOL.md). Static
// supports are checked here first; the worker's own `supports` answer is asked once per case.
#include <exception>

#include <fmt/format.h>

#include "driftcheck/external/backends_file.hpp"
#include "worker_backend.hpp"

namespace driftcheck::external {
namespace {

// The tensor whose dtype is the case's activation dtype, and the row count / width the limits apply to.
const Tensor& activation(const Case& c) {
  switch (c.op) {
    case OpKind::kRmsNorm:
      return c.tensor("x");
    case OpKind::kConcat:
      return c.tensor("a");
    case OpKind::kDualRmsNormCat:
      return c.tensor("e");
    case OpKind::kAttention:
      return c.tensor("q");
  }
  return c.tensor("x");
}
std::int64_t width(const Case& c) {
  return c.op == OpKind::kConcat ? c.tensor("a").size(1) + c.tensor("b").size(1) : activation(c).size(1);
}

template <class T, class Name>
std::string listed(const std::vector<T>& v, Name name) {
  std::vector<std::string> out;
  for (const T& x : v) out.push_back(std::string(name(x)));
  return fmt::format("{}", fmt::join(out, "/"));
}
std::string weight_mode_text(WeightMode m) {
  return m == WeightMode::kPlain ? "plain" : "one_plus";
}
std::string number_text(std::int64_t n) {
  return std::to_string(n);
}

}  // namespace

Support StaticSupports::check(const Case& c, std::string_view who) const {
  const auto no = [&](std::string what) {
    return Support::no(fmt::format("{}: {} declares otherwise", what, who));
  };
  const auto outside = [](const auto& allowed, const auto& v) {
    return !allowed.empty() && std::find(allowed.begin(), allowed.end(), v) == allowed.end();
  };
  const DType act = activation(c).dtype();
  if (outside(dtypes, act)) return no(fmt::format("dtype {}", dtype_name(act)));
  if (max_tokens && activation(c).size(0) > *max_tokens)
    return no(fmt::format("more than {} tokens", *max_tokens));
  if (c.op == OpKind::kAttention) {
    const auto& p = c.get<AttentionParams>();
    const DType kv = c.tensor("k_cache").dtype();
    if (outside(kv_dtypes, kv)) return no(fmt::format("kv dtype {}", dtype_name(kv)));
    if (outside(block_sizes, p.block_size)) return no(fmt::format("block_size {}", p.block_size));
    if (const std::string shape = query.outside(c); !shape.empty()) return no(shape);
    if (!gqa && p.num_q_heads != p.num_kv_heads) return no("grouped-query attention");
    if (!non_causal && !p.causal) return no("non-causal attention");
    if (!sliding_window && p.window > 0) return no("sliding window");
    if (!softcap && p.softcap > 0) return no("softcap");
    if (!sinks && p.has_sinks) return no("attention sinks");
    return Support::yes();
  }
  if (max_hidden && width(c) > *max_hidden) return no(fmt::format("rows wider than {}", *max_hidden));
  if (c.op == OpKind::kRmsNorm) {
    const auto& p = c.get<RmsNormParams>();
    if (outside(weight_modes, p.weight_mode))
      return no(fmt::format("weight mode {}", weight_mode_text(p.weight_mode)));
    if (!residual && p.residual) return no("fused residual add");
  } else if (c.op == OpKind::kDualRmsNormCat) {
    const auto& p = c.get<DualRmsNormCatParams>();
    if (outside(weight_modes, p.weight_mode))
      return no(fmt::format("weight mode {}", weight_mode_text(p.weight_mode)));
  }
  return Support::yes();
}

std::vector<std::string> StaticSupports::parts() const {
  std::vector<std::string> parts;
  if (!dtypes.empty()) parts.push_back(listed(dtypes, dtype_name));
  if (!kv_dtypes.empty()) parts.push_back("kv " + listed(kv_dtypes, dtype_name));
  if (!block_sizes.empty()) parts.push_back("block_size " + listed(block_sizes, number_text));
  for (auto& part : query.summary()) parts.push_back(std::move(part));
  if (!weight_modes.empty()) parts.push_back("weight " + listed(weight_modes, weight_mode_text));
  if (max_hidden) parts.push_back(fmt::format("width <= {}", *max_hidden));
  if (max_tokens) parts.push_back(fmt::format("tokens <= {}", *max_tokens));
  const std::pair<bool, const char*> flags[] = {{residual, "residual"},     {gqa, "gqa"},
                                                {non_causal, "non-causal"}, {sliding_window, "window"},
                                                {softcap, "softcap"},       {sinks, "sinks"}};
  for (const auto& [ok, what] : flags)
    if (!ok) parts.push_back(fmt::format("no {}", what));
  return parts;
}

std::string StaticSupports::summary() const {
  const std::vector<std::string> p = parts();
  return p.empty() ? "every case (statically); the worker may decline more"
                   : fmt::format("{}", fmt::join(p, "; "));
}

namespace {

// The last supports answer of this thread: the campaign asks supports() and then evaluate() asks again and
// runs, so one round trip serves both; a fault in the round trip (or a round trip that did not happen:
// BackendNotRun) is kept and becomes what the run throws.
struct SupportsMemo {
  const void* backend = nullptr;
  std::string key;
  Support answer;
  std::exception_ptr fault;
};
thread_local SupportsMemo memo;

class ExternalBackend final : public Backend {
 public:
  explicit ExternalBackend(BackendDecl d)
      : d_(std::move(d)),
        who_(fmt::format("{} ({})", d_.name, d_.origin())),
        description_(d_.description.empty()
                         ? fmt::format("external worker: {}", fmt::join(d_.worker->argv, " "))
                         : d_.description),
        link_(*d_.worker, d_.name, d_.origin(), d_.op, d_.max_workers) {}

  std::string_view name() const override { return d_.name; }
  std::string_view description() const override { return description_; }
  BackendKind kind() const override { return BackendKind::kExternal; }
  bool in_process() const override { return false; }
  OpKind op() const override { return d_.op; }
  Numerics numerics() const override { return d_.numerics; }
  // "like:<backend>" alone: the per-case declarations of that backend (ROCM_AITER_FA's fp8 MFMAs only in the
  // batches whose decode rows reach them, and so on).
  Numerics numerics_for(const Case& c) const override {
    return d_.numerics_like != nullptr ? d_.numerics_like->numerics_for(c) : d_.numerics;
  }
  std::string_view twin() const override { return d_.twin; }
  int compile_set() const override { return d_.compile_set; }
  std::string_view provenance() const override { return d_.provenance; }
  std::string supports_summary() const override { return d_.supports.summary(); }

  bool available(std::string* why) const override {
    const HelloReply& h = link_.hello();
    if (!h.available && why) *why = h.reason.empty() ? "the worker says it cannot run here" : h.reason;
    return h.available;
  }

  BackendDefinition definition() const override {
    return {BackendDefinition::Kind::kBackendsFile, std::filesystem::absolute(d_.file)};
  }
  WorkerRestarts worker_restarts() const override { return link_.pool().restarts(); }

  std::string origin() const override {
    std::string s = fmt::format("{}; numerics {}", d_.origin(), d_.numerics_source);
    if (!d_.twin.empty()) s += "; twin " + d_.twin;
    if (link_.handshaken() && !link_.hello().info.empty()) s += "; worker: " + link_.hello().info;
    return s;
  }

  Support supports(const Case& full) const override {
    if (Support s = d_.supports.check(full, who_); !s.ok) return s;
    const Case c = sent(full);
    if (!link_.hello().supports_round_trip) return Support::yes();
    std::string key = case_text(c, nullptr);
    if (memo.backend == this && memo.key == key) return memo.fault ? Support::yes() : memo.answer;
    memo = {this, std::move(key), Support::yes(), nullptr};
    try {
      memo.answer = link_.pool().with_worker([&](Worker& w) { return w.supports(memo.key); });
    } catch (const BackendFault&) {
      memo.fault = std::current_exception();  // run() turns it into this case's verdict
    } catch (const BackendNotRun&) {
      memo.fault = std::current_exception();  // run() says the case was not run
    }
    return memo.answer;
  }

  void run(Case& full) const override {
    Case c = sent(full);  // views of full's storages: the worker's outputs land in full
    if (memo.backend == this && memo.fault && memo.key == case_text(c, nullptr)) {
      const std::exception_ptr f = memo.fault;
      memo = {};
      std::rethrow_exception(f);
    }
    link_.pool().with_worker([&](Worker& w) { w.run(c); });
  }

 private:
  // The case as the worker gets it: a worker that reads the new tokens' K/V from the cache (numerics new_kv
  // "cache", the default) is not sent the k_new / v_new inputs, so workers written before those inputs
  // existed (python/driftcheck rejects tensors it does not know) keep working.
  Case sent(const Case& c) const {
    Case out;
    out.op = c.op, out.params = c.params, out.seed = c.seed, out.index = c.index;
    out.tensors = c.tensors;
    if (d_.numerics.new_kv == NewKv::kCache) out.tensors.erase("k_new"), out.tensors.erase("v_new");
    return out;
  }

  BackendDecl d_;
  std::string who_, description_;
  mutable WorkerLink link_;
};

}  // namespace

std::unique_ptr<Backend> make_external_backend(BackendDecl decl) {
  if (decl.plugin) return make_plugin_backend(decl);
  return std::make_unique<ExternalBackend>(std::move(decl));
}

}  // namespace driftcheck::external
