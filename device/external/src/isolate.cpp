#include "driftcheck/external/isolate.hpp"

#include <fmt/format.h>

#include "worker_backend.hpp"

namespace driftcheck::external {
namespace {

// A built-in backend whose runs happen in `driftcheck worker --backend NAME` children; everything else is the
// built-in's own answer, in process (supports needs no round trip: the same code is here).
class IsolatedBackend final : public Backend {
 public:
  IsolatedBackend(const Backend& inner, WorkerCommand cmd)
      : inner_(&inner), link_(std::move(cmd), std::string(inner.name()), "--isolate", inner.op(), 0) {}
  // The registry hands the built-in over when this backend takes its place.
  void adopt(std::unique_ptr<Backend> inner) { owned_ = std::move(inner); }

  std::string_view name() const override { return inner_->name(); }
  std::string_view description() const override { return inner_->description(); }
  BackendKind kind() const override { return inner_->kind(); }
  bool in_process() const override { return false; }
  OpKind op() const override { return inner_->op(); }
  Numerics numerics() const override { return inner_->numerics(); }
  Numerics numerics_for(const Case& c) const override { return inner_->numerics_for(c); }
  std::string supports_summary() const override { return inner_->supports_summary(); }
  std::string_view mutates() const override { return inner_->mutates(); }
  std::string_view bug_class() const override { return inner_->bug_class(); }
  std::string_view twin() const override { return inner_->twin(); }
  int compile_set() const override { return inner_->compile_set(); }
  BackendDefinition definition() const override { return inner_->definition(); }
  std::string origin() const override {
    return fmt::format("out of process (--isolate): {} worker --backend {}",
                       link_.pool().command().exe.string(), inner_->name());
  }
  bool available(std::string* why) const override {
    if (!inner_->available(why)) return false;
    const HelloReply& h = link_.hello();
    if (!h.available && why) *why = h.reason;
    return h.available;
  }
  Support supports(const Case& c) const override { return inner_->supports(c); }
  WorkerRestarts worker_restarts() const override { return link_.pool().restarts(); }
  void run(Case& c) const override {
    link_.pool().with_worker([&](Worker& w) { w.run(c); });
  }

 private:
  const Backend* inner_;
  std::unique_ptr<Backend> owned_;
  mutable WorkerLink link_;
};

}  // namespace

int isolate_backends(Registry& registry, std::string_view globs, const std::filesystem::path& driftcheck_exe,
                     double timeout_s, const std::vector<std::string>& worker_args) {
  int n = 0;
  for (const Backend* b : registry.match(globs, true)) {
    if (!b->in_process()) continue;
    WorkerCommand cmd;
    cmd.exe = driftcheck_exe;
    cmd.argv = {driftcheck_exe.string(), "worker"};
    cmd.argv.insert(cmd.argv.end(), worker_args.begin(), worker_args.end());
    cmd.argv.insert(cmd.argv.end(), {"--backend", std::string(b->name())});
    cmd.timeout_s = timeout_s;
    cmd.startup_timeout_s = std::max(timeout_s, 30.0);
    auto isolated = std::make_unique<IsolatedBackend>(*b, std::move(cmd));
    IsolatedBackend* raw = isolated.get();
    raw->adopt(registry.replace(std::move(isolated)));
    ++n;
  }
  if (n == 0) throw InvalidArgument(fmt::format("--isolate '{}' matches no built-in backend", globs));
  return n;
}

}  // namespace driftcheck::external
