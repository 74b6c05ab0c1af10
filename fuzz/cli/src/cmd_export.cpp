// `driftcheck export`: cases of the campaign stream as exchange files (docs/EXCHANGE.md).
#include <optional>
#include <ostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/files/json_text.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/cli.hpp"
#include "driftcheck/fuzz/exchange.hpp"
#include "driftcheck/fuzz/exchange_files.hpp"
#include "driftcheck/fuzz/oracle.hpp"

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
  std::uint64_t differing = 0;
  for (std::uint64_t k = 0; k < o.cases; ++k) {
    // Case k of seed s is the campaign's case k (same op interleaving, same generator options), so the replay
    // command of an entry runs exactly this case on any built-in backend.
    const OpKind op = stream_op(ops, k);
    const CaseSpec spec = draw_case(op, o.seed, k).value();
    Case c = materialize(spec);
    c.seed = o.seed, c.index = k;
    const std::string id = fmt::format("{:06}", k);
    const Outputs ref = reference(c);  // NewKv::kCache
    nlohmann::json references;         // attention: new-token source -> prefix of its reference tensors
    std::optional<Outputs> from_inputs;
    if (op == OpKind::kAttention) {
      const std::string same(kReferencePrefix);
      references = {{"cache", same}};
      if (c.has("k_new")) references["inputs"] = same;
      if (new_kv_differs(c)) {
        ++differing;
        from_inputs = reference_attention(c, NewKv::kInputs);
        if (o.new_kv == ExportNewKv::kCache) references.erase("inputs");
        if (o.new_kv == ExportNewKv::kInputs) references.erase("cache");
        if (o.new_kv == ExportNewKv::kBoth) references["inputs"] = std::string(kFromInputsPrefix);
      }
    }
    const bool inputs_as_reference = from_inputs && o.new_kv == ExportNewKv::kInputs;
    const bool both = from_inputs && o.new_kv == ExportNewKv::kBoth;
    io::write_safetensors(
        o.out_dir / "cases" / (id + ".safetensors"),
        case_file(id, c, inputs_as_reference ? *from_inputs : ref, both ? &*from_inputs : nullptr));
    entries.push_back(manifest_entry(id, spec, c, references));
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
                            {"new_kv", export_new_kv_name(o.new_kv)},
                            {"cases", entries}};
  // Written last: a directory without a manifest is an export that did not finish.
  files::write_file_atomic(manifest, files::json_text(j, 1) + "\n");
  if (o.log) {
    *o.log << fmt::format("{} cases in {}\n", o.cases, o.out_dir.string());
    if (differing > 0)
      *o.log << fmt::format(
          "{} attention cases have k_new/v_new other than their dequantised cache, so their reference with "
          "the "
          "new tokens from k_new/v_new may differ: {} (--new-kv {})\n",
          differing,
          o.new_kv == ExportNewKv::kBoth     ? "reference_from_inputs.* holds it"
          : o.new_kv == ExportNewKv::kInputs ? "reference.* holds it, the cache's is not exported"
                                             : "not exported, --new-kv both adds it",
          export_new_kv_name(o.new_kv));
  }
}

Command add_export_command(CLI::App& app, const CliContext& ctx) {
  auto* cmd =
      app.add_subcommand("export", "write cases as safetensors + manifest for a kernel that runs elsewhere");
  auto o = std::make_shared<ExportOptions>();
  auto ops = std::make_shared<std::string>();
  auto new_kv = std::make_shared<std::string>("cache");
  cmd->add_option("--out", o->out_dir, "directory to write the manifest and case files into")->required();
  cmd->add_option("--op", *ops, "ops to export, comma-separated (default: all)");
  cmd->add_option("--cases", o->cases, "number of cases: stream indices 0..N-1 (default 16)")
      ->check(at_least(0, true));
  cmd->add_option("--seed", o->seed, "campaign seed (default 1)");
  cmd->add_option(
         "--new-kv", *new_kv,
         "where the references' new tokens (attention) come from: cache (default; reference.* as for "
         "decode kernels), inputs (reference.* from k_new/v_new), both (reference.* from the cache, "
         "plus reference_from_inputs.* where that differs)")
      ->check(CLI::IsMember({"cache", "inputs", "both"}));
  return {cmd, [o, ops, new_kv, &ctx] {
            o->ops = parse_op_list(*ops), o->command_line = ctx.command_line, o->log = &ctx.err;
            parse_export_new_kv(*new_kv, &o->new_kv);  // IsMember admitted only the three names
            export_cases(*o);
            return kExitClean;
          }};
}

}  // namespace driftcheck::fuzz
