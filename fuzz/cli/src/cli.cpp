#include "driftcheck/fuzz/cli.hpp"

#include <csignal>
#include <ostream>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "driftcheck/device/device_reference.hpp"
#include "driftcheck/device/numerics_terms.hpp"
#include "driftcheck/device/plugin_backend.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/corpus.hpp"
#include "driftcheck/fuzz/errors.hpp"
#include "driftcheck/fuzz/exchange.hpp"
#include "driftcheck/fuzz/input_error.hpp"
#include "driftcheck/fuzz/journal.hpp"
#include "driftcheck/fuzz/profiles.hpp"
#include "driftcheck/fuzz/replay.hpp"

namespace driftcheck::fuzz {
namespace {

struct FuzzArgs {
  std::string ops;
  std::string backends;
  std::optional<double> seconds;
  std::optional<std::uint64_t> cases;
  std::optional<double> shrink_seconds;
  double shrink_seconds_per_finding = CampaignOptions{}.shrink_seconds_per_finding;
  double grace_seconds = kDefaultGraceSeconds;
  int quarantine_faults = kDefaultQuarantineFaults;
  std::uint64_t seed = 1;
  int jobs = 0;
  std::string out = "driftcheck-out";
  bool mutants = false;
  bool resume = false;
  std::string known_findings;  // empty: the list built into the binary
  std::string model;
  std::optional<int> compile_set;  // unset: the selected backends' declared one
  ShardArgs shard;
  ProgressArgs progress;
  std::string corpus;
};

struct ReplayArgs {
  std::string bundle;
  std::string backend;
  std::optional<std::uint64_t> seed;
  std::optional<std::uint64_t> index;
  std::string op;
  std::string model;
  int compile_set = 0;
};

// The declared numerics that concern the backend's op (numerics_terms.hpp), as one line of key=value.
std::string numerics_summary(const Backend& b) {
  const Numerics n = b.numerics();
  std::vector<std::string> terms;
  for (const NumericsTerm& t : numerics_terms())
    if (term_concerns(t, b.op())) terms.push_back(fmt::format("{}={}", t.key, term_text(t, n)));
  return fmt::format("{}", fmt::join(terms, " "));
}

// A backend whose worker fails its handshake is listed with the reason, and makes `list` exit 2.
std::string availability(const Backend& b, bool& bad) {
  std::string why;
  try {
    return b.available(&why) ? "available" : "unavailable: " + why;
  } catch (const external::BadBackend& e) {
    bad = true;
    return fmt::format("BAD BACKEND: {}", e.what());
  }
}

int list_command(std::ostream& out) {
  out << "ops:";
  for (OpKind op : kAllOps) out << " " << op_name(op);
  out << "\n\nbackends:\n";
  bool bad = false;
  for (const auto& b : registry().all()) {
    if (b->kind() == BackendKind::kMutant) continue;
    // Availability first: an external backend's origin names its worker, known after the handshake.
    const std::string available = availability(*b, bad);
    const std::string supports = b->supports_summary(), origin = b->origin();
    out << fmt::format(
        "  {}  [{} {}] {}\n      {}\n      upstream: {}\n      numerics: {}\n      supports: {}\n", b->name(),
        backend_kind_name(b->kind()), op_name(b->op()), available, b->description(),
        b->provenance().empty() ? "(none named)" : b->provenance(), numerics_summary(*b),
        supports.empty() ? "(not summarised)" : supports);
    if (!origin.empty()) out << fmt::format("      from: {}\n", origin);
    if (b->compile_set() > 0)
      out << fmt::format("      compile set: {} (docs/CAMPAIGN.md \"Compile sets\")\n", b->compile_set());
  }
  out << "\nmodels (driftcheck fuzz --model NAME: their real shapes in 4 cases of 5):\n";
  for (const ModelProfile& m : model_profiles())
    out << fmt::format("  {}\n      {}\n", m.name, m.description);
  out << "\nmutants (driftcheck fuzz --mutants):\n";
  for (const auto& b : registry().all()) {
    if (b->kind() != BackendKind::kMutant) continue;
    out << fmt::format("  {}  [{}] breaks {}\n      bug class: {}\n", b->name(), op_name(b->op()),
                       b->mutates(), b->bug_class());
  }
  return bad ? kExitUsage : kExitClean;
}

std::string joined(int argc, const char* const* argv) {
  std::string s = "driftcheck";
  for (int i = 1; i < argc; ++i) s += fmt::format(" {}", argv[i]);
  return s;
}

// Ctrl-C or SIGTERM ends a campaign cleanly (report written): the first gives the cases in flight a grace
// period, the second ends them at once (CampaignOptions::interrupt). A third kills the process by the
// signal's default action, which the journal survives as it survives kill -9: the way out should finishing
// itself hang (a report written to a hung file system).
std::atomic<int> interrupted{0};
static_assert(std::atomic<int>::is_always_lock_free, "counted in a signal handler");

extern "C" void on_interrupt(int sig) {
  if (interrupted.fetch_add(1) + 1 >= 2) std::signal(sig, SIG_DFL);
}

void catch_interrupts() {
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

}  // namespace

KnownFindings known_findings_option(const std::string& path) {
  try {
    return read_known_findings(path);
  } catch (const InvalidArgument& e) {
    throw UsageError(e.what());  // a malformed list: bad input, exit 2
  }
}

namespace {

// `named`: the backends the command line's --backends files and --plugin libraries declared. Without
// --backend they are what the campaign judges, each as if named exactly (one that cannot run here fails the
// run as a zero-case backend), rather than every built-in backend besides.
int fuzz_command(const FuzzArgs& a, const std::vector<std::string>& named, const std::string& command,
                 std::ostream& err, bool tty) {
  CampaignOptions o;
  o.ops = parse_op_list(a.ops);
  o.backend_globs = a.backends, o.include_mutants = a.mutants;
  if (a.backends.empty() && !a.resume && !named.empty())
    o.backend_globs = fmt::format("{}", fmt::join(named, ","));
  o.seconds = a.seconds, o.cases = a.cases, o.seed = a.seed, o.jobs = a.jobs, o.gen.model = a.model;
  o.compile_set = a.compile_set;
  o.shrink_seconds = a.shrink_seconds, o.grace_seconds = a.grace_seconds;
  o.shrink_seconds_per_finding = a.shrink_seconds_per_finding;
  o.quarantine_faults = a.quarantine_faults;
  o.log = a.progress.quiet ? nullptr : &err, o.progress = a.progress.style(tty);
  KnownFindings known;
  if (!a.known_findings.empty()) known = known_findings_option(a.known_findings), o.known_findings = &known;
  o.shard = apply_shard_options(a.shard, o.log);
  o.out_dir = shard_dir(a.out, o.shard), o.resume = a.resume, o.command_line = command;
  o.interrupt = &interrupted;
  catch_interrupts();
  const CampaignResult r = run_campaign(o);
  if (!a.corpus.empty()) {
    const CorpusTally added = add_findings_to_corpus(r.report, o.out_dir, a.corpus);
    err << fmt::format("corpus {}: {} finding groups added, {} already there\n", a.corpus, added.added,
                       added.present);
  }
  if (r.abandoned > 0) exit_leaving_threads(r.exit_code, err);
  return r.exit_code;
}

const Backend& find_backend(const std::string& name) {
  const Backend* b = registry().find(name);
  if (b == nullptr) throw UsageError(unknown_backend(name));
  return *b;
}

int report_check(const Backend& b, const CheckResult& r, std::ostream& out) {
  out << replay_report(b, r);
  return r.support.ok && !is_failure(r.evaluation.verdict) ? kExitClean : kExitDrift;
}

int replay_command(const ReplayArgs& a, std::ostream& out) {
  if (!a.bundle.empty()) {
    if (a.seed || a.index || !a.op.empty())
      throw UsageError("replay takes either a BUNDLE or --seed/--case/--op, not both");
    Bundle bundle = read_bundle(a.bundle);
    const std::string name = a.backend.empty() ? bundle.finding.value("backend", "") : a.backend;
    if (a.backend.empty()) load_bundle_backend(bundle.finding, name, a.bundle);
    const Backend& b = find_backend(name);
    if (b.op() != bundle.spec.op)
      throw UsageError(fmt::format("backend {} runs {}, the bundle holds a {} case", name, op_name(b.op()),
                                   op_name(bundle.spec.op)));
    out << fmt::format("replaying {} ({}) on {}\n", a.bundle, shape_class(bundle.spec), name);
    return report_check(b, check_case(b, std::move(bundle.pristine)), out);
  }
  if (!a.seed || !a.index || a.op.empty() || a.backend.empty())
    throw UsageError("replay needs a BUNDLE directory, or all of --seed, --case, --op and --backend");
  OpKind op;
  if (!parse_op(a.op, &op)) throw UsageError(fmt::format("unknown op '{}'", a.op));
  const Backend& b = find_backend(a.backend);
  if (b.op() != op)
    throw UsageError(fmt::format("backend {} runs {}, not {}", a.backend, op_name(b.op()), a.op));
  GenOptions gen;
  gen.model = a.model;
  if (!gen.model.empty() && find_model_profile(gen.model) == nullptr)
    throw UsageError(fmt::format("unknown model '{}' (models: {})", gen.model, model_profile_names()));
  gen.compile_set = a.compile_set;
  const CaseSpec spec = draw_case(op, *a.seed, *a.index, gen).value();
  Case c = materialize(spec);
  c.seed = *a.seed, c.index = *a.index;
  out << fmt::format("replaying seed {} case {} ({}) on {}\n", *a.seed, *a.index, shape_class(spec),
                     a.backend);
  return report_check(b, check_case(b, std::move(c)), out);
}

void add_fuzz_options(CLI::App& cmd, FuzzArgs& a) {
  auto* op = cmd.add_option("--op", a.ops, "ops to fuzz, comma-separated (default: all)");
  auto* be =
      cmd.add_option("--backend", a.backends, "backend globs, comma-separated (default: all available)");
  auto* secs = cmd.add_option("--seconds", a.seconds,
                              "time budget of the whole run: discovery, grouping, heatmaps (default 20 s)")
                   ->check(at_least(0, true));
  cmd.add_option("--cases", a.cases, "case budget (total, resumed cases included)")
      ->check(uint64_text() & at_least(0, true))
      ->excludes(secs);
  cmd.add_option(
         "--shrink-seconds", a.shrink_seconds,
         "grouping phase (shrinking findings by cause), part of --seconds (default 25% of it, at least "
         "5 s, at most half; 0: no grouping)")
      ->check(at_least(0, false));
  cmd.add_option(
         "--shrink-seconds-per-finding", a.shrink_seconds_per_finding,
         "the most the grouping phase spends on one finding (default 10 s); a run that must not depend "
         "on the machine's speed sets it beyond what shrinking can take")
      ->check(at_least(0, true));
  add_grace_option(cmd, a.grace_seconds);
  cmd.add_option("--quarantine-after", a.quarantine_faults,
                 "stop running a backend after N worker crashes/timeouts that are at least 1 in 10 of its "
                 "cases, or N in a row (default 5; 0: never; docs/CAMPAIGN.md \"Worker faults\")")
      ->check(at_least(0, false));
  auto* seed = cmd.add_option("--seed", a.seed, "campaign seed (default 1)")->check(uint64_text());
  cmd.add_option("--jobs", a.jobs, "worker threads (default: one per core)")->check(at_least(0, false));
  cmd.add_option("--out", a.out, "campaign directory (default ./driftcheck-out)")->check(non_empty());
  auto* mut = cmd.add_flag("--mutants", a.mutants, "also run the mutant.* backends");
  cmd.add_option(
      "--known-findings", a.known_findings,
      "known upstream findings to report apart (TOML, docs/FINDINGS.md; default: the built-in list)");
  auto* model = cmd.add_option(
      "--model", a.model, "draw a model's real shapes in most cases (driftcheck list shows the profiles)");
  auto* compile = cmd.add_option("--compile-set", a.compile_set,
                                 "draw the compile-relevant parameters (dtypes, widths, heads, block sizes, "
                                 "flags, layouts) from K combinations, for JIT-compiled kernels (0: off; "
                                 "default: what the backends declare; docs/CAMPAIGN.md \"Compile sets\")")
                      ->check(CLI::Range(0, kMaxCompileSet));
  // A resumed campaign keeps the stream it was started with; only budgets may change.
  cmd.add_flag("--resume", a.resume, "continue the campaign journaled in --out")
      ->excludes(op, be, seed, mut, model, compile);
  add_shard_options(cmd, a.shard);
  add_progress_options(cmd, a.progress);
  cmd.add_option(
      "--corpus", a.corpus,
      "add the shrunk representative of every finding group to this regression corpus (docs/GATE.md)");
}

void add_replay_options(CLI::App& cmd, ReplayArgs& a) {
  cmd.add_option("bundle", a.bundle, "repro bundle directory (DIR/findings/<id>)");
  cmd.add_option("--backend", a.backend, "backend to run (default: the bundle's)");
  cmd.add_option("--seed", a.seed, "stream replay: campaign seed")->check(uint64_text());
  cmd.add_option("--case", a.index, "stream replay: case index")->check(uint64_text());
  cmd.add_option("--op", a.op, "stream replay: op of the case");
  cmd.add_option("--model", a.model, "stream replay: the campaign's model profile");
  cmd.add_option("--compile-set", a.compile_set, "stream replay: the campaign's compile set")
      ->check(CLI::Range(0, kMaxCompileSet));
}

// Every option takes one value per occurrence, so that none swallows the positional arguments after it:
// CLI11 lets a repeatable option (a vector: --backends FILE, --plugin PATH, --case ID) take every following
// word, and `replay --backends FILE BUNDLE` read the bundle as a second backends file. Repeat the option
// instead (`--backends a.toml --backends b.toml`).
void one_value_per_occurrence(CLI::App& app) {
  for (CLI::Option* o : app.get_options())
    if (!o->get_positional()) o->allow_extra_args(false);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) one_value_per_occurrence(*sub);
}

int dispatch(int argc, const char* const* argv, std::ostream& out, std::ostream& err, bool tty) {
  CLI::App app{"driftcheck: differential numerical testing of GPU kernels against an fp64 reference"};
  app.require_subcommand(1);
  BackendArgs backend_args;
  auto* list = app.add_subcommand("list", "ops, backends (availability, numerics, support) and mutants");
  add_backend_options(*list, backend_args, false);
  FuzzArgs fuzz_args;
  auto* fuzz = app.add_subcommand("fuzz", "run a fuzz campaign");
  add_fuzz_options(*fuzz, fuzz_args);
  add_backend_options(*fuzz, backend_args, true);
  ReplayArgs replay_args;
  auto* replay = app.add_subcommand("replay", "re-run one finding alone (bundle or stream case)");
  add_replay_options(*replay, replay_args);
  add_backend_options(*replay, backend_args, true);
  const CliContext ctx{out, err, tty, joined(argc, argv), &interrupted, catch_interrupts};
  const Command worker = add_worker_command(app, ctx);
  const Command commands[] = {add_accept_command(app, ctx),
                              add_export_command(app, ctx),
                              add_check_command(app, ctx),
                              add_gate_command(app, ctx, backend_args),
                              add_baseline_command(app, ctx),
                              add_corpus_command(app, ctx),
                              add_golden_command(app, ctx, backend_args),
                              add_compare_command(app, ctx),
                              add_merge_command(app, ctx, backend_args),
                              add_report_command(app, ctx)};
  add_backend_options(*commands[7].app, backend_args, true);  // compare: a real kernel is often external
  one_value_per_occurrence(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitClean;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // CLI11 reports a missing subcommand before an unknown word, so name the word when there is one.
    if (what.empty() || what == "A subcommand is required") {
      const auto names = [](CLI::App& a) {
        std::string s;
        for (const auto* sub : a.get_subcommands([](CLI::App*) { return true; }))
          s += fmt::format("{}{}", s.empty() ? "" : ", ", sub->get_name());
        return s;
      };
      // A command that needs one of its own (corpus init|add, baseline update, golden verify|update).
      CLI::App* command = nullptr;
      for (auto* sub : app.get_subcommands([](CLI::App*) { return true; }))
        if (sub->parsed() && !sub->get_subcommands([](CLI::App*) { return true; }).empty()) command = sub;
      what = command != nullptr
                 ? fmt::format("{} needs a subcommand: {}", command->get_name(), names(*command))
             : argc > 1 ? fmt::format("unknown command '{}' (commands: {})", argv[1], names(app))
                        : fmt::format("a command is required: {}", names(app));
    }
    err << fmt::format("driftcheck: error: {} (driftcheck --help)\n", what);
    return kExitUsage;
  }
  if (const std::string problem = reference_environment_problem(); !problem.empty())
    throw UsageError(problem);
  // A worker serves built-ins only: it must not load (or fail on) the backends files its parent names.
  if (worker.app->parsed()) return worker.run();
  const std::vector<std::string> named = extend_backends(backend_args);
  if (list->parsed()) return list_command(out);
  if (fuzz->parsed()) return fuzz_command(fuzz_args, named, joined(argc, argv), err, tty);
  for (const Command& c : commands)
    if (c.app->parsed()) return c.run();
  return replay_command(replay_args, out);
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err, bool err_is_tty) {
  // The one map from errors to exit codes and their one line (errors.hpp).
  try {
    return dispatch(argc, argv, out, err, err_is_tty);
  } catch (const UsageError& e) {
    err << "driftcheck: error: " << e.what() << "\n";
  } catch (const BundleError& e) {
    err << "driftcheck: bad bundle: " << e.what() << "\n";
  } catch (const JournalError& e) {
    err << "driftcheck: bad journal: " << e.what() << "\n";
  } catch (const external::BackendFileError& e) {
    err << "driftcheck: bad backends file: " << e.what() << "\n";
  } catch (const external::BadBackend& e) {
    err << "driftcheck: bad backend: " << e.what() << "\n";
  } catch (const PluginError& e) {
    err << "driftcheck: bad plugin: " << e.what() << "\n";
  } catch (const ExchangeError& e) {
    err << "driftcheck: bad input: " << e.what() << "\n";
  } catch (const InputError& e) {
    err << "driftcheck: bad " << e.kind() << ": " << e.what() << "\n";
  } catch (const std::system_error& e) {
    err << "driftcheck: I/O error: " << e.what() << "\n";
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    err << "driftcheck: out of memory\n";
    return kExitInternal;
  } catch (const std::exception& e) {
    err << "driftcheck: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
  return kExitUsage;
}

}  // namespace driftcheck::fuzz
