// `driftcheck export`: cases of the campaign stream as exchange files (docs/EXCHANGE.md).
#include <ostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/cli.hpp"
#include "driftcheck/fuzz/exchange.hpp"
#include "driftcheck/reports/json_text.hpp"
#include "exchange_files.hpp"

namespace driftcheck::fuzz {

void export_cases(const ExportOptions& o) {
  const std::filesystem::path manifest = o.out_dir / kManifestName;
  if (std::filesystem::exists(manifest))
    throw UsageError(fmt::format("{} already holds an export ({}): choose another --out", o.out_dir.string(),
                                 kManifestName));
  std::vector<OpKind> ops = o.ops;
  if (ops.empty()) ops.assign(std::begin(kAllOps), std::end(kAllOps));
  std::filesystem::create_directories(o.out_dir / "cases");
  nlohmann::json entries = nlohmann::json::array();
  for (std::uint64_t k = 0; k < o.cases; ++k) {
    // Case k of seed s is the campaign's case k (same op interleaving, same generator options), so the replay
    // command of an entry runs exactly this case on any built-in backend.
    const OpKind op = stream_op(ops, k);
    const CaseSpec spec = draw_case(op, o.seed, k).value();
    Case c = materialize(spec);
    c.seed = o.seed, c.index = k;
    const Outputs ref = reference(c);
    const std::string id = fmt::format("{:06}", k);
    io::write_safetensors(o.out_dir / "cases" / (id + ".safetensors"), case_file(id, c, ref));
    entries.push_back(manifest_entry(id, spec, c));
    if (o.log) *o.log << fmt::format("exported {} {} ({})\n", id, op_name(op), shape_class(spec));
  }
  std::vector<std::string> op_names;
  for (OpKind op : ops) op_names.emplace_back(op_name(op));
  const nlohmann::json j = {{"format", kExchangeFormat},
                            {"format_version", kExchangeFormatVersion},
                            {"tool_version", kToolVersion},
                            {"command", o.command_line},
                            {"seed", o.seed},
                            {"ops", op_names},
                            {"cases", entries}};
  // Written last: a directory without a manifest is an export that did not finish.
  reports::write_file_atomic(manifest, reports::json_text(j, 1) + "\n");
  if (o.log) *o.log << fmt::format("{} cases in {}\n", o.cases, o.out_dir.string());
}

Command add_export_command(CLI::App& app, const CliContext& ctx) {
  auto* cmd =
      app.add_subcommand("export", "write cases as safetensors + manifest for a kernel that runs elsewhere");
  auto o = std::make_shared<ExportOptions>();
  auto ops = std::make_shared<std::string>();
  cmd->add_option("--out", o->out_dir, "directory to write the manifest and case files into")->required();
  cmd->add_option("--op", *ops, "ops to export, comma-separated (default: all)");
  cmd->add_option("--cases", o->cases, "number of cases: stream indices 0..N-1 (default 16)")
      ->check(at_least(0, true));
  cmd->add_option("--seed", o->seed, "campaign seed (default 1)");
  return {cmd, [o, ops, &ctx] {
            o->ops = parse_op_list(*ops), o->command_line = ctx.command_line, o->log = &ctx.err;
            export_cases(*o);
            return kExitClean;
          }};
}

}  // namespace driftcheck::fuzz
