#include "driftcheck/fuzz/campaign_journal.hpp"

#include <fmt/format.h>

#include "driftcheck/files/json_text.hpp"
#include "driftcheck/fuzz/json_fields.hpp"

namespace driftcheck::fuzz {

using nlohmann::json;

json journal_header(const CampaignOptions& opts, const Selection& selection) {
  json ops = json::array(), backends = json::array();
  for (OpKind op : selection.ops) ops.push_back(op_name(op));
  for (const Backend* b : selection.backends) backends.push_back(b->name());
  json formats = json::array();
  for (DType t : opts.formats) formats.push_back(dtype_name(t));
  json args = {{"ops", ops},
               {"backend_globs", opts.backend_globs},
               {"include_mutants", opts.include_mutants},
               {"seed", opts.seed},
               {"seconds", opts.seconds ? json(*opts.seconds) : json(nullptr)},
               {"cases", opts.cases ? json(*opts.cases) : json(nullptr)},
               {"large_shapes", opts.gen.large_shapes},
               {"formats", formats}};
  if (!opts.gen.model.empty()) args["model"] = opts.gen.model;
  if (opts.gen.compile_set > 0) args["compile_set"] = opts.gen.compile_set;
  if (opts.shard.sharded()) args["shard"] = {{"index", opts.shard.index}, {"count", opts.shard.count}};
  // What the selection left out here, for `driftcheck merge` on another machine (where other backends may be
  // available).
  return {{"args", args},
          {"backends", backends},
          {"unavailable", selection.unavailable},
          {"selection_errors", selection.errors},
          {"command", opts.command_line},
          {"tool_version", kToolVersion}};
}

void apply_journal_header(CampaignOptions& opts) {
  const auto path = opts.out_dir / "journal.jsonl";
  if (!std::filesystem::exists(path)) return;
  const JournalContents contents = read_journal(path);
  if (contents.records.empty()) return;  // nothing recorded: a new campaign starts
  apply_header(contents.records.front(), opts, path.string());
}

void apply_header(const json& header, CampaignOptions& opts, const std::string& name) {
  try {
    const json& a = object_field(header, "args");
    within_field("args", [&] {
      opts.ops.clear();
      for (const auto& op_json : array_field(a, "ops")) {
        OpKind op;
        if (!parse_op(string_value(op_json, "ops"), &op))
          throw FieldError("ops", fmt::format("unknown op {}", op_json.dump()));
        opts.ops.push_back(op);
      }
      opts.backend_globs = string_field(a, "backend_globs");
      opts.include_mutants = bool_field(a, "include_mutants");
      opts.seed = u64_field(a, "seed"), opts.gen.large_shapes = bool_field(a, "large_shapes");
      // Journals of unsharded campaigns without a profile have neither field.
      opts.gen.model = a.contains("model") ? string_field(a, "model") : "";
      // Nor has one without a compile set.
      opts.gen.compile_set = a.contains("compile_set") ? static_cast<int>(int_field(a, "compile_set", 0)) : 0;
      if (opts.gen.compile_set > kMaxCompileSet)
        throw FieldError("compile_set", fmt::format("{} is above {}", opts.gen.compile_set, kMaxCompileSet));
      opts.shard = {};
      if (a.contains("shard"))
        within_field("shard", [&] {
          const json& sh = object_field(a, "shard");
          opts.shard = {u64_field(sh, "index"), u64_field(sh, "count")};
        });
      // Journals written before --format existed have no "formats": every format.
      opts.formats.clear();
      if (a.contains("formats"))
        for (const auto& format_json : array_field(a, "formats")) {
          DType t;
          if (!parse_dtype(string_value(format_json, "formats"), &t))
            throw FieldError("formats", fmt::format("unknown format {}", format_json.dump()));
          opts.formats.push_back(t);
        }
      if (!opts.seconds && !opts.cases) {
        if (!json_field(a, "seconds").is_null()) opts.seconds = number_field(a, "seconds");
        if (!json_field(a, "cases").is_null()) opts.cases = u64_field(a, "cases");
      }
    });
    // What the campaign selected, for merge: lists of names, absent in journals older than merge.
    for (const char* key : {"backends", "unavailable", "selection_errors"})
      if (header.contains(key)) (void)strings_field(header, key);
  } catch (const FieldError& e) {
    throw JournalError(fmt::format("{}:1: header: {}", name, e.what()));
  }
}

json progress_record(const Checkpoint& c) {
  json r = {{"type", "progress"},
            {"completed", c.completed},
            {"elapsed_s", files::number_json(c.elapsed_s)},
            {"stats", c.stats.to_json()}};
  if (!c.deferred.empty()) r["deferred"] = c.deferred;  // absent: none (and in journals older than it)
  return r;
}

Checkpoint load_journal(const JournalContents& contents, const std::string& name, Findings& findings) {
  Checkpoint c;
  for (std::size_t i = 1; i < contents.records.size(); ++i) {
    const json& r = contents.records[i];
    const std::string type = r.at("type");  // parse_journal checked it is a string
    try {
      if (type == "progress") {
        c.completed = u64_field(r, "completed");
        c.deferred.clear();
        if (r.contains("deferred"))
          for (const json& d : array_field(r, "deferred")) {
            const auto local = static_cast<std::uint64_t>(int_value(d, "deferred", 0));
            if (local >= c.completed || (!c.deferred.empty() && local <= c.deferred.back()))
              throw FieldError("deferred", "expected ascending case indices below 'completed'");
            c.deferred.push_back(local);
          }
        c.elapsed_s = number_field(r, "elapsed_s");
        c.stats = within_field("stats", [&] { return Stats::from_json(object_field(r, "stats")); });
      } else if (type == "finding" || type == "bundle" || type == "unbundle" || type == "group") {
        findings.load(r);
      } else if (type == "end") {
        (void)u64_field(r, "completed");
        (void)exit_code_field(r, "exit_code");
      } else {
        throw FieldError("type", fmt::format("unknown record type '{}'", type));
      }
    } catch (const FieldError& e) {
      throw JournalError(fmt::format("{}:{}: {} record: {}", name, i + 1, type, e.what()));
    }
  }
  return c;
}

}  // namespace driftcheck::fuzz
