// `driftcheck merge DIR... --out OUT`: the shards of one campaign folded into one report (merge.hpp).
#include <memory>

#include "commands.hpp"
#include "driftcheck/fuzz/merge.hpp"

namespace driftcheck::fuzz {

Command add_merge_command(CLI::App& app, const CliContext& ctx, BackendArgs& backends) {
  auto* cmd = app.add_subcommand(
      "merge", "fold the shards of a campaign (fuzz --shard I/N) into the report of the unsharded campaign");
  auto o = std::make_shared<MergeOptions>();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("dirs", o->dirs, "shard directories, or directories holding shard-I-of-N directories")
      ->required();
  cmd->add_option("--out", o->out_dir, "new (or empty) directory for report.json, report.md and findings/")
      ->required();
  cmd->add_flag("-q,--quiet", *quiet, "no summary on stderr (errors still print)");
  add_backend_options(*cmd, backends, false);
  return {cmd, [o, quiet, &ctx] {
            o->command_line = ctx.command_line, o->log = *quiet ? nullptr : &ctx.err;
            return merge_campaigns(*o).exit_code;
          }};
}

}  // namespace driftcheck::fuzz
