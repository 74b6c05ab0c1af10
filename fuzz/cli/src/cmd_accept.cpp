// `driftcheck accept`: the acceptance proxy (docs/ACCEPT.md). Flags map onto AcceptOptions; the table goes to
// stdout (Markdown), and --out/--json/--markdown write it to files that `driftcheck report` reads.
#include <filesystem>
#include <memory>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "driftcheck/files/json_text.hpp"
#include "driftcheck/fuzz/accept.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {
namespace {

struct AcceptArgs {
  AcceptOptions opts;
  std::string act_dtype = "bf16";
  std::string kv_dtype;  // empty: the activation format
  std::string out_dir, json_file, markdown_file;
  ProgressArgs progress;
};

DType dtype_arg(const std::string& name, const char* flag) {
  DType t;
  if (!parse_dtype(name, &t)) throw UsageError(fmt::format("{}: unknown format '{}'", flag, name));
  return t;
}

int accept_command(const AcceptArgs& a, const CliContext& ctx) {
  AcceptOptions o = a.opts;
  o.model.act_dtype = dtype_arg(a.act_dtype, "--dtype");
  o.model.kv_dtype = a.kv_dtype.empty() ? o.model.act_dtype : dtype_arg(a.kv_dtype, "--kv-dtype");
  o.command_line = ctx.command_line;
  o.log = a.progress.quiet ? nullptr : &ctx.err;
  o.progress = a.progress.style(ctx.err_is_tty);
  const reports::AcceptReport r = run_accept(o);
  const std::string md = reports::to_markdown(r);
  const std::string json = files::json_text(reports::to_json(r), 2) + "\n";
  if (!a.out_dir.empty()) {
    std::filesystem::create_directories(a.out_dir);
    files::write_file_atomic(std::filesystem::path(a.out_dir) / "accept.json", json);
    files::write_file_atomic(std::filesystem::path(a.out_dir) / "accept.md", md);
  }
  if (!a.json_file.empty()) files::write_file_atomic(a.json_file, json);
  if (!a.markdown_file.empty()) files::write_file_atomic(a.markdown_file, md);
  ctx.out << md;
  if (!a.progress.quiet) ctx.err << fmt::format("accept: {:.1f} s\n", r.seconds);
  return r.exit_code;
}

void add_options(CLI::App& cmd, AcceptArgs& a) {
  auto& m = a.opts.model;
  cmd.add_option("--backend", a.opts.backend_globs,
                 "backend globs, comma-separated (default: all available)");
  cmd.add_flag("--mutants", a.opts.include_mutants, "also run the mutant.* backends");
  cmd.add_option("--positions", m.positions, "positions (tokens) to compare (default 512)")
      ->check(at_least(8, false));
  cmd.add_option("--seed", m.seed, "seed of the drafter's weights and inputs (default 1)");
  cmd.add_option("--hidden", m.hidden, "hidden size H (default 256)")->check(at_least(1, false));
  cmd.add_option("--heads", m.num_q_heads, "query heads (default 4)")->check(at_least(1, false));
  cmd.add_option("--kv-heads", m.num_kv_heads, "KV heads (default 2)")->check(at_least(1, false));
  cmd.add_option("--head-dim", m.head_dim, "head size (default 64)")->check(at_least(1, false));
  cmd.add_option("--intermediate", m.intermediate, "MLP size (default 704)")->check(at_least(1, false));
  cmd.add_option("--vocab", m.vocab, "vocabulary (default 32000)")->check(at_least(2, false));
  cmd.add_option("--block-size", m.block_size, "KV cache block size (default 16)")->check(at_least(1, false));
  cmd.add_option("--dtype", a.act_dtype, "activation format: bf16 or fp16 (default bf16)");
  cmd.add_option("--kv-dtype", a.kv_dtype,
                 "KV cache format (default: the activation format; fp8_e4m3fn, ...)");
  cmd.add_option("--window", m.window, "sliding window in keys (default 0: none)")->check(at_least(0, false));
  cmd.add_option("--softcap", m.softcap, "logit softcap (default 0: none)")->check(at_least(0, false));
  cmd.add_flag("--sinks", m.sinks, "attention sinks");
  cmd.add_option(
         "--query-len", m.query_len,
         "attention queries per request: 4 = verification of 3 drafted tokens (default), 1 = decode, 0 = "
         "one prefill per sequence")
      ->check(at_least(0, false));
  cmd.add_option("--top-k", a.opts.top_k, "k of the top-k overlap (default 5)")->check(at_least(1, false));
  cmd.add_option("--base-acceptance", a.opts.base_acceptance,
                 "per-token acceptance of the fp64 drafter by its target (default 1: rates relative to it)");
  cmd.add_option("--max-drop", a.opts.max_drop,
                 "points of greedy k=3 acceptance a backend may lose before exit 1 (default 5)")
      ->check(at_least(0, false));
  cmd.add_option("--jobs", a.opts.jobs, "worker threads (default: one per core)")->check(at_least(0, false));
  cmd.add_option("--out", a.out_dir,
                 "write DIR/accept.json and DIR/accept.md (driftcheck report reads them)");
  cmd.add_option("--json", a.json_file, "write the JSON report to FILE");
  cmd.add_option("--markdown", a.markdown_file, "write the Markdown table to FILE");
  add_progress_options(cmd, a.progress);
}

}  // namespace

Command add_accept_command(CLI::App& app, const CliContext& ctx) {
  auto args = std::make_shared<AcceptArgs>();
  CLI::App* cmd = app.add_subcommand(
      "accept", "acceptance proxy: would a backend's drift change a drafter's tokens? (docs/ACCEPT.md)");
  add_options(*cmd, *args);
  return {cmd, [args, &ctx] { return accept_command(*args, ctx); }};
}

}  // namespace driftcheck::fuzz
