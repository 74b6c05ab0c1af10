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
  auto known_path = std::make_shared<std::string>();
  auto known = std::make_shared<KnownFindings>();
  cmd->add_option("dirs", o->dirs, "shard directories, or directories holding shard-I-of-N directories")
      ->required();
  cmd->add_option("--out", o->out_dir, "new (or empty) directory for report.json, report.md and findings/")
      ->required();
  cmd->add_flag("-q,--quiet", *quiet, "no summary on stderr (errors still print)");
  cmd->add_option("--known-findings", *known_path,
                  "the known findings list the shards ran with (fuzz --known-findings; default: built in)");
  add_backend_options(*cmd, backends, false);
  return {cmd, [o, quiet, known_path, known, &ctx] {
            o->command_line = ctx.command_line, o->log = *quiet ? nullptr : &ctx.err;
            if (!known_path->empty())
              *known = known_findings_option(*known_path), o->known_findings = known.get();
            return merge_campaigns(*o).exit_code;
          }};
}

}  // namespace driftcheck::fuzz
