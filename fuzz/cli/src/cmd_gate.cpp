// `driftcheck gate` and `driftcheck baseline update` (docs/GATE.md).
#include <memory>
#include <ostream>

#include "commands.hpp"
#include "driftcheck/fuzz/gate.hpp"
#include "driftcheck/reports/gate_report.hpp"

namespace driftcheck::fuzz {

Command add_gate_command(CLI::App& app, const CliContext& ctx, BackendArgs& backends) {
  auto* cmd =
      app.add_subcommand("gate",
                         "the CI gate: golden cases, regression corpus, fixed-seed campaign, budgets, "
                         "baseline");
  auto o = std::make_shared<GateOptions>();
  cmd->add_option("--config", o->config, "gate configuration (TOML)")->required();
  cmd->add_option("--junit", o->junit, "also write the JUnit XML here");
  cmd->add_option("--summary", o->summary, "also write the Markdown summary here");
  cmd->add_option("--out", o->out_dir, "output directory (default ./driftcheck-gate)");
  cmd->add_option("--jobs", o->jobs, "campaign threads (default: one per core)")->check(at_least(0, false));
  cmd->add_flag(
      "--mutants", o->mutants,
      "hold every selected backend's mutants to its budget and baseline: the gate's detection power");
  auto progress = std::make_shared<ProgressArgs>();
  add_progress_options(*cmd, *progress);
  add_grace_option(*cmd, o->grace_seconds);
  add_backend_options(*cmd, backends, true);
  return {cmd, [o, progress, &ctx] {
            o->command_line = ctx.command_line, o->interrupt = ctx.interrupt;
            o->log = progress->quiet ? nullptr : &ctx.err, o->progress = progress->style(ctx.err_is_tty);
            ctx.catch_interrupts();
            const GateResult r = run_gate(*o);
            ctx.out << reports::to_markdown(r.report);
            if (r.abandoned > 0) exit_leaving_threads(r.exit_code, ctx.err);
            return r.exit_code;
          }};
}

Command add_baseline_command(CLI::App& app, const CliContext& ctx) {
  auto* cmd = app.add_subcommand("baseline", "the gate's baseline");
  cmd->require_subcommand(1);
  auto* update =
      cmd->add_subcommand("update", "ratchet the baseline to the last gate run: tightening is automatic");
  auto o = std::make_shared<BaselineUpdateOptions>();
  update->add_option("--config", o->config, "gate configuration (TOML)")->required();
  update->add_option("--out", o->out_dir, "the gate run's output directory (default ./driftcheck-gate)");
  update->add_flag("--allow-loosen", o->allow_loosen, "also take statistics that got worse (needs --reason)");
  update->add_option("--reason", o->reason, "why loosening is right; kept in the baseline with the date");
  return {cmd, [o, &ctx] {
            o->log = &ctx.err;
            return update_baseline(*o);
          }};
}

}  // namespace driftcheck::fuzz
