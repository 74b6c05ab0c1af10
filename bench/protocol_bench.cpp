// Worker protocol overhead (docs/PROTOCOL.md): the same backend called in process and through a worker
// process (frames on pipes, storages through the shared-memory arena), on small cases, in one run. The no-op
// backend (writes nothing) isolates the protocol's own cost; a real backend shows it next to kernel time. The
// goal is at most 0.2 ms of overhead per small case.
//
//   protocol_bench [--reps N] [--backend NAME]...   # default: the no-op backends and cpu.rmsnorm.cuda
//
// `--backend gpu.rmsnorm` (a build with the GPU backends, on a GPU machine) measures --isolate: the built-in
// GPU backend in process against the same backend in a worker (this binary serving it, like `driftcheck
// worker`). Rows: per run request (one round trip) and per judged case (evaluate(): supports, the run, and
// the metamorphic re-runs the backend's numerics ask for).
#include <sys/resource.h>
#include <unistd.h>

#include <ctime>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/external/serve.hpp"
#include "driftcheck/external/worker.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace {

using namespace driftcheck;
using Clock = std::chrono::steady_clock;

// Writes nothing: what remains of a worker's time is the protocol's.
class NoopBackend final : public Backend {
 public:
  explicit NoopBackend(OpKind op) : op_(op), name_(fmt_name(op)) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return "does nothing (protocol overhead)"; }
  BackendKind kind() const override { return BackendKind::kCpu; }
  OpKind op() const override { return op_; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(Case&) const override {}

 private:
  static std::string fmt_name(OpKind op) { return "bench.noop." + std::string(op_name(op)); }
  OpKind op_;
  std::string name_;
};

const Registry& bench_registry() {
  static const Registry r = [] {
    Registry reg;
    for (OpKind op : kAllOps) reg.add(std::make_unique<NoopBackend>(op));
    return reg;
  }();
  return r;
}

// Counts what evaluate() asks of a backend: how many requests a judged case costs through a worker.
class Counting final : public Backend {
 public:
  explicit Counting(const Backend& b) : b_(b) {}
  std::string_view name() const override { return b_.name(); }
  std::string_view description() const override { return b_.description(); }
  BackendKind kind() const override { return b_.kind(); }
  OpKind op() const override { return b_.op(); }
  Numerics numerics() const override { return b_.numerics(); }
  Support supports(const Case& c) const override {
    ++supports_calls;
    return b_.supports(c);
  }
  void run(Case& c) const override {
    ++runs;
    b_.run(c);
  }
  mutable std::int64_t runs = 0, supports_calls = 0;

 private:
  const Backend& b_;
};

const Backend* find(const std::string& name) {
  if (const Backend* b = bench_registry().find(name)) return b;
  return registry().find(name);
}

// Small cases of the backend's op from the campaign stream: at most 64 KiB of storages each.
std::vector<fuzz::PreparedCase> small_cases(const Backend& b) {
  std::vector<fuzz::PreparedCase> out;
  for (std::uint64_t k = 0; k < 2000 && out.size() < 16; ++k) {
    Case c = fuzz::materialize(fuzz::draw_case(b.op(), 1, k).value());
    std::size_t bytes = 0;
    Case probe = c.clone();
    for (const Storage* s : external::arena_layout(probe).storages) bytes += s->bytes.size();
    if (bytes > 64 * 1024 || !b.supports(c).ok) continue;
    out.push_back(fuzz::prepare(std::move(c)));
  }
  return out;
}

double cpu_ms(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}
// CPU time of reaped children (the worker, after its pool shut it down).
double children_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

// Wall and this process's CPU time per call, in ms.
struct Timing {
  double wall = 0, cpu = 0;
};
template <class F>
Timing per_call(int reps, std::size_t n, F&& f) {
  const auto t0 = Clock::now();
  const double c0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
  for (int r = 0; r < reps; ++r)
    for (std::size_t i = 0; i < n; ++i) f(i);
  const double calls = reps * static_cast<double>(n);
  return {std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / calls,
          (cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - c0) / calls};
}

// A judged case as a campaign judges it (evaluate(): supports, the run, the metamorphic re-runs), in process
// and through an ext backend on the same worker, with the requests it took.
void judged(const Backend& b, const std::vector<fuzz::PreparedCase>& cases,
            const external::WorkerCommand& cmd, int reps) {
  external::BackendDecl d;
  d.name = "ext.bench", d.op = b.op(), d.numerics = b.numerics(), d.worker = cmd, d.max_workers = 1;
  const auto ext = external::make_external_backend(d);
  std::string why;
  ext->available(&why);
  const Counting counted(b);
  reps = std::max(1, reps / 10);
  const Timing local =
      per_call(reps, cases.size(), [&](std::size_t i) { fuzz::evaluate(counted, cases[i]); });
  const Timing remote = per_call(reps, cases.size(), [&](std::size_t i) { fuzz::evaluate(*ext, cases[i]); });
  const double n = reps * static_cast<double>(cases.size());
  std::printf("%-26s %3s  wall: %8.4f %8.4f %8.4f   per judged case (evaluate): %.1f runs, %.1f supports\n",
              "", "", local.wall, remote.wall, remote.wall - local.wall, counted.runs / n,
              counted.supports_calls / n);
}

void measure(const Backend& b, int reps) {
  std::string why;
  if (!b.available(&why)) {
    std::printf("%-28s unavailable: %s\n", std::string(b.name()).c_str(), why.c_str());
    return;
  }
  const auto cases = small_cases(b);
  if (cases.empty()) {
    std::printf("%-28s no small supported case\n", std::string(b.name()).c_str());
    return;
  }
  external::WorkerCommand cmd;
  cmd.exe = "/proc/self/exe";
  cmd.argv = {"protocol_bench", "--serve", std::string(b.name())};
  std::vector<Case> runs;
  for (const auto& p : cases) runs.push_back(p.input.clone());
  const Timing local = per_call(reps, runs.size(), [&](std::size_t i) { b.run(runs[i]); });
  Timing remote;
  const double child0 = children_cpu_ms();
  {
    external::WorkerPool pool(cmd, std::string(b.name()), b.op(), 1);
    pool.handshake();
    const auto worker = [&](std::size_t i) {
      pool.with_worker([&](external::Worker& w) { w.run(runs[i]); });
    };
    worker(0);  // warm-up: first touch of the arena, the worker's first mapping
    remote = per_call(reps, runs.size(), worker);
  }
  // The worker's whole life (start-up included) over the timed runs: start-up is a few ms over thousands of
  // runs.
  const double worker_cpu = (children_cpu_ms() - child0) / (reps * static_cast<double>(runs.size()) + 1);
  std::printf("%-26s %3zu  wall: %8.4f %8.4f %8.4f   cpu: %8.4f %8.4f %8.4f %8.4f\n",
              std::string(b.name()).c_str(), runs.size(), local.wall, remote.wall, remote.wall - local.wall,
              local.cpu, remote.cpu, worker_cpu, remote.cpu + worker_cpu - local.cpu);
  judged(b, cases, cmd, reps);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--serve") == 0) {
    const Backend* b = find(argv[2]);
    return b ? external::serve(*b) : 2;
  }
  int reps = 200;
  std::vector<std::string> names;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--backend") == 0) names.emplace_back(argv[i + 1]);
  }
  if (names.empty())
    names = {"bench.noop.rmsnorm", "bench.noop.concat", "bench.noop.attention", "cpu.rmsnorm.cuda",
             "cpu.attn.triton_unified"};
  std::printf(
      "protocol_bench: %d reps per case, small cases (<= 64 KiB of storages) of seed 1; ms per run request\n"
      "%-26s %3s  wall: %8s %8s %8s   cpu: %8s %8s %8s %8s\n",
      reps, "backend", "n", "in-proc", "worker", "overhead", "in-proc", "driftck", "worker", "overhead");
  for (const auto& n : names) {
    const Backend* b = find(n);
    if (b == nullptr) {
      std::fprintf(stderr, "protocol_bench: unknown backend %s\n", n.c_str());
      return 2;
    }
    measure(*b, reps);
  }
  return 0;
}
