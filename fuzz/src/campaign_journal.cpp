#include "campaign_journal.hpp"

#include <fmt/format.h>

namespace driftcheck::fuzz {

using nlohmann::json;

json journal_header(const CampaignOptions& opts, const Selection& selection) {
  json ops = json::array(), backends = json::array();
  for (OpKind op : selection.ops) ops.push_back(op_name(op));
  for (const Backend* b : selection.backends) backends.push_back(b->name());
  json formats = json::array();
  for (DType t : opts.formats) formats.push_back(dtype_name(t));
  return {{"args",
           {{"ops", ops},
            {"backend_globs", opts.backend_globs},
            {"include_mutants", opts.include_mutants},
            {"seed", opts.seed},
            {"seconds", opts.seconds ? json(*opts.seconds) : json(nullptr)},
            {"cases", opts.cases ? json(*opts.cases) : json(nullptr)},
            {"large_shapes", opts.gen.large_shapes},
            {"formats", formats}}},
          {"backends", backends},
          {"command", opts.command_line},
          {"tool_version", kToolVersion}};
}

void apply_journal_header(CampaignOptions& opts) {
  const auto path = opts.out_dir / "journal.jsonl";
  if (!std::filesystem::exists(path)) return;
  const json header = read_journal(path).records.front();
  try {
    const json& a = header.at("args");
    opts.ops.clear();
    for (const auto& name : a.at("ops")) {
      OpKind op;
      if (!parse_op(name.get<std::string>(), &op))
        throw UsageError(fmt::format("unknown op {}", name.dump()));
      opts.ops.push_back(op);
    }
    opts.backend_globs = a.at("backend_globs"), opts.include_mutants = a.at("include_mutants");
    opts.seed = a.at("seed"), opts.gen.large_shapes = a.at("large_shapes");
    opts.formats.clear();
    for (const auto& name : a.value("formats", json::array())) {
      DType t;
      if (!parse_dtype(name.get<std::string>(), &t))
        throw UsageError(fmt::format("unknown format {}", name.dump()));
      opts.formats.push_back(t);
    }
    if (!opts.seconds && !opts.cases) {
      if (!a.at("seconds").is_null()) opts.seconds = a.at("seconds").get<double>();
      if (!a.at("cases").is_null()) opts.cases = a.at("cases").get<std::uint64_t>();
    }
  } catch (const json::exception& e) {
    throw JournalError(fmt::format("{}: bad header: {}", path.string(), e.what()));
  }
}

json progress_record(const Checkpoint& c) {
  return {{"type", "progress"},
          {"completed", c.completed},
          {"elapsed_s", c.elapsed_s},
          {"stats", c.stats.to_json()}};
}

Checkpoint load_journal(const JournalContents& contents, Findings& findings) {
  Checkpoint c;
  for (const auto& r : contents.records) {
    if (r.value("type", "") == "progress") {
      c.completed = r.at("completed");
      c.elapsed_s = r.at("elapsed_s");
      c.stats = Stats::from_json(r.at("stats"));
    } else {
      findings.load(r);
    }
  }
  return c;
}

}  // namespace driftcheck::fuzz
