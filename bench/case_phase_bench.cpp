// Where a campaign case of one op spends its CPU, phase by phase, and a bit fingerprint of everything the
// phases produce: run it before and after a speed change, the fingerprints must be equal (same seed, same
// cases).
//
//   case_phase_bench [--op OP] [--cases N] [--seed S] [--backend GLOBS] [--mutants] [--stand-in]
//
// Cases are the campaign stream's (case k of --seed, drawn as `driftcheck fuzz` draws it). Phases, in thread
// CPU ms per case: materialize, the fp64 reference, the naive baseline, the error model, and evaluate() per
// backend (its runs, the oracle, the metamorphic re-runs). --stand-in (attention) adds a backend that
// declares every invariance the oracle checks, as gpu.attn.paged_online does (so 3 + sequences runs per
// case), and whose run writes the fp64 reference rounded to the outputs: the oracle's work on a GPU backend's
// case, with CPU runs in place of device ones. Fingerprints (FNV-1a 64): every materialised storage;
// reference, baseline and every error-model vector; every evaluation's verdict, detail, metrics, outputs and
// per-element tolerances.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/device_reference.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/allocator.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/reference/reference.hpp"

namespace {

using namespace driftcheck;
using namespace driftcheck::fuzz;

struct Args {
  std::string op = "attention";
  int cases = 400;
  std::uint64_t seed = 1;
  std::string backends;
  bool mutants = false;
  bool stand_in = false;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"case_phase_bench: CPU per phase of a campaign case, and bit fingerprints of the results"};
  app.add_option("--op", a.op, "op of the case stream (default attention)");
  app.add_option("--cases", a.cases, "cases of the stream, from case 0")->check(CLI::Range(1, 10000000));
  app.add_option("--seed", a.seed, "campaign seed");
  app.add_option("--backend", a.backends, "backend globs to evaluate (default: none)");
  app.add_flag("--mutants", a.mutants, "let the globs match mutants");
  app.add_flag("--stand-in", a.stand_in, "also evaluate the GPU stand-in (attention)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);  // --help is 0; bad usage is 2, as for every driftcheck program
  }
  return a;
}

// CPU time of the calling thread: the phases are measured on a machine other builds share.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Fingerprint {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 0x100000001b3ull;
  }
  void number(double x) { bytes(&x, sizeof x); }
  void text(std::string_view s) {
    bytes(s.data(), s.size());
    number(0);  // a separator: "ab" + "c" differs from "a" + "bc"
  }
  void values(const std::vector<double>& v) {
    number(static_cast<double>(v.size()));
    bytes(v.data(), v.size() * sizeof(double));
  }
  void outputs(const Outputs& o) {
    for (const auto& [name, t] : o) text(name), values(t.to_f64());
  }
};

void add_prepared(Fingerprint& f, const PreparedCase& pc) {
  f.outputs(pc.reference);
  f.outputs(pc.baseline);
  for (const auto& [name, m] : pc.model) {
    f.text(name);
    f.number(m.exact ? 1 : 0), f.number(static_cast<double>(m.row_length));
    for (const auto* v :
         {&m.base, &m.intermediate, &m.p_rounding, &m.kv_dequant_rounding, &m.partials_rounding, &m.baseline,
          &m.inf_log_weight, &m.scaled, &m.weight, &m.scaled_rounded_z, &m.ref_rounded_z, &m.typical_p,
          &m.typical_kv, &m.variance_p, &m.variance_kv})
      f.values(*v);
  }
}

void add_evaluation(Fingerprint& f, const PreparedCase& pc, const Backend& b, const Evaluation& e) {
  f.text(verdict_name(e.verdict)), f.text(e.detail), f.number(e.worst_ratio), f.number(e.stat_p_value);
  for (const auto& m : e.metrics) {
    f.text(m.output);
    for (const double x : {m.max_abs, m.max_rel, m.max_ulps, m.normwise, m.mean_signed_ulps, m.share_beyond,
                           m.worst_ratio, m.worst_value, m.worst_reference, m.worst_tolerance})
      f.number(x);
    for (const auto i : m.worst_index) f.number(static_cast<double>(i));
  }
  f.outputs(e.outputs);
  if (e.outputs.empty()) return;
  for (const auto& [name, tol] : tolerances(pc, b.numerics())) f.text(name), f.values(tol);
}

// Every invariance declared, outputs = the fp64 reference rounded to them (correctly rounded: it passes).
class GpuStandIn final : public Backend {
 public:
  std::string_view name() const override { return "stand-in.attn"; }
  std::string_view description() const override { return "CPU stand-in with a GPU backend's numerics"; }
  BackendKind kind() const override { return BackendKind::kCpu; }
  OpKind op() const override { return OpKind::kAttention; }
  Support supports(const Case&) const override { return Support::yes(); }
  std::string supports_summary() const override { return "any attention case"; }
  void run(Case& c) const override {
    const Outputs r = reference_attention(c);
    for (const auto& [name, t] : r) c.tensor(name).copy_from(t.to_f64());
  }
};

std::vector<const Backend*> selected(const Args& a, OpKind op, const Backend& stand_in) {
  std::vector<const Backend*> out;
  if (!a.backends.empty())
    for (const Backend* b : registry().match(a.backends, a.mutants))
      if (b->op() == op) out.push_back(b);
  if (a.stand_in && op == OpKind::kAttention) out.push_back(&stand_in);
  return out;
}

struct Totals {
  double draw = 0, materialize = 0, reference = 0, baseline = 0, model = 0;
  std::vector<double> evaluate;
  Fingerprint inputs, prepared, evaluations;
};

void run_case(const Args& a, OpKind op, std::uint64_t k, const std::vector<const Backend*>& backends,
              Totals& t) {
  double at = thread_seconds();
  const auto lap = [&](double& into) {
    const double now = thread_seconds();
    into += now - at;
    at = now;
  };
  CaseSpec spec;
  {
    const std::lock_guard lock(generation_mutex());
    spec = draw_case(op, a.seed, k).value();
  }
  lap(t.draw);
  PreparedCase pc;
  pc.input = materialize(spec);
  pc.input.seed = a.seed, pc.input.index = k;
  lap(t.materialize);
  pc.reference = device_reference(pc.input);
  lap(t.reference);
  pc.baseline = naive_baseline(pc.input);
  lap(t.baseline);
  pc.model = error_model(pc.input, pc.reference, pc.baseline);
  lap(t.model);
  for (const auto& [name, tensor] : pc.input.tensors)
    t.inputs.text(name), t.inputs.bytes(tensor.storage()->bytes.data(), tensor.storage()->bytes.size());
  add_prepared(t.prepared, pc);
  for (std::size_t i = 0; i < backends.size(); ++i) {
    at = thread_seconds();
    const Evaluation e = evaluate(*backends[i], pc);
    lap(t.evaluate[i]);
    add_evaluation(t.evaluations, pc, *backends[i], e);
  }
}

}  // namespace

int main(int argc, char** argv) {
  driftcheck::fuzz::tune_allocator();  // as the driftcheck binary does
  const Args a = parse(argc, argv);
  OpKind op{};
  if (!parse_op(a.op, &op)) {
    std::fprintf(stderr, "case_phase_bench: unknown op '%s'\n", a.op.c_str());
    return 2;
  }
  const GpuStandIn stand_in;
  const std::vector<const Backend*> backends = selected(a, op, stand_in);
  Totals t;
  t.evaluate.assign(backends.size(), 0.0);
  for (int k = 0; k < a.cases; ++k) run_case(a, op, static_cast<std::uint64_t>(k), backends, t);
  const double per = 1e3 / a.cases;
  std::printf("%s, seed %llu, %d cases; thread CPU ms per case:\n", a.op.c_str(),
              static_cast<unsigned long long>(a.seed), a.cases);
  std::printf("  draw (campaign workers take turns: one process-wide lock) %.3f\n", t.draw * per);
  std::printf("  materialize %.3f  reference %.3f  naive baseline %.3f  error model %.3f\n",
              t.materialize * per, t.reference * per, t.baseline * per, t.model * per);
  for (std::size_t i = 0; i < backends.size(); ++i)
    std::printf("  evaluate %-40s %.3f\n", std::string(backends[i]->name()).c_str(), t.evaluate[i] * per);
  std::printf("fingerprints: inputs %016llx prepared %016llx evaluations %016llx\n",
              static_cast<unsigned long long>(t.inputs.h), static_cast<unsigned long long>(t.prepared.h),
              static_cast<unsigned long long>(t.evaluations.h));
  return 0;
}
