#include "driftcheck/fuzz/campaign_findings.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "driftcheck/files/file_io.hpp"
#include "driftcheck/files/json_text.hpp"
#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/json_fields.hpp"

namespace driftcheck::fuzz {

using nlohmann::json;

std::string bundle_replay_command(const std::filesystem::path& bundle_dir) {
  return fmt::format("driftcheck replay {}", bundle_dir.string());
}

std::string signature_of(OpKind op, std::string_view backend, Verdict v, const std::string& shape) {
  return fmt::format("{}|{}|{}|{}", op_name(op), backend, verdict_name(v), shape);
}

std::string finding_id(std::string_view backend, Verdict v, const std::string& signature) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : signature) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{}-{}-{:08x}", backend, verdict_name(v), static_cast<std::uint32_t>(h ^ (h >> 32)));
}

namespace {

json metrics_json(const Evaluation& e) {
  const OutputMetrics* worst = worst_metrics(e);
  return {{"verdict", verdict_name(e.verdict)},
          {"detail", e.detail},
          {"worst_ratio", files::number_json(e.worst_ratio)},
          {"worst_output", worst ? worst->output : ""},
          {"worst_output_ratio", files::number_json(worst ? worst->worst_ratio : 0)},
          {"worst_value", files::number_json(worst ? worst->worst_value : 0)},
          {"worst_reference", files::number_json(worst ? worst->worst_reference : 0)},
          {"worst_tolerance", files::number_json(worst ? worst->worst_tolerance : 0)}};
}

// The representative's evaluation as the report needs it: detail, worst ratio and its worst element.
Evaluation evaluation_from(const json& j) {
  Evaluation e;
  e.detail = string_field(j, "detail"), e.worst_ratio = number_field(j, "worst_ratio");
  // No worst output: an evaluation without metrics (an error, a crash, a timeout).
  if (string_field(j, "worst_output").empty()) return e;
  OutputMetrics m;
  m.output = string_field(j, "worst_output");
  // Journals written before the worst output's own ratio was recorded: the evaluation's.
  m.worst_ratio = j.contains("worst_output_ratio") ? number_field(j, "worst_output_ratio") : e.worst_ratio;
  m.worst_value = number_field(j, "worst_value"), m.worst_reference = number_field(j, "worst_reference");
  m.worst_tolerance = number_field(j, "worst_tolerance");
  e.metrics.push_back(m);
  return e;
}

}  // namespace

std::string Findings::stream_replay(const reports::FindingReport& r) const {
  OpKind op;
  if (!parse_op(r.op, &op)) return r.replay;
  return stream_replay_command(op, r.seed, r.case_index, r.backend, stream_,
                               backends_ ? definition_args(r.backend, *backends_) : std::string());
}

DefinitionRecord Findings::definition_of(const std::string& backend) const {
  const Backend* b = backends_ ? backends_->find(backend) : nullptr;
  return b ? record_definition(*b) : DefinitionRecord{};
}

void Findings::load(const json& r) {
  std::lock_guard lock(mu_);
  const std::string type = string_field(r, "type");
  if (type == "finding") {
    const std::string sig = string_field(r, "signature");
    // A signature journaled again at a lower case replaces it (add()); never the other way round.
    if (const auto it = by_signature_.find(sig);
        it != by_signature_.end() && u64_field(r, "case_index") >= it->second.report.case_index)
      return;
    auto& f = by_signature_[sig];
    if (f.bundled) --drawn_bundles_[f.report.backend + "|" + f.report.verdict];
    f.bundled = false, f.report.bundle.clear(), f.report.shape.clear();
    auto& rep = f.report;
    rep.id = string_field(r, "id"), rep.op = string_field(r, "op"), rep.backend = string_field(r, "backend");
    rep.verdict = string_field(r, "verdict"), rep.shape_class = string_field(r, "shape_class");
    rep.detail = string_field(r, "detail"), rep.worst_ratio = number_field(r, "worst_ratio");
    rep.seed = u64_field(r, "seed"), rep.case_index = u64_field(r, "case_index");
    rep.found_after_s = number_field(r, "found_after_s"), rep.replay = string_field(r, "replay");
    // Journals written before grouping by cause lack the drawn case's features.
    rep.features = r.contains("features") ? strings_field(r, "features") : std::vector<std::string>{};
  } else if (type == "unbundle") {
    const std::string id = string_field(r, "id");
    for (auto& [sig, f] : by_signature_) {
      if (f.report.id != id || !f.bundled) continue;
      --drawn_bundles_[f.report.backend + "|" + f.report.verdict];
      f.bundled = false, f.report.bundle.clear(), f.report.shape.clear();
      f.report.replay = string_field(r, "replay");
    }
  } else if (type == "bundle") {
    const std::string id = string_field(r, "id");
    for (auto& [sig, f] : by_signature_) {
      if (f.report.id != id) continue;
      if (!f.bundled) ++drawn_bundles_[f.report.backend + "|" + f.report.verdict];
      f.bundled = true;
      f.report.bundle = string_field(r, "bundle"), f.report.replay = string_field(r, "replay");
      f.report.detail = string_field(r, "detail"), f.report.worst_ratio = number_field(r, "worst_ratio");
      f.report.shape = r.contains("shape") ? string_field(r, "shape") : "";  // older journals lack it
    }
  } else if (type == "group") {
    GroupDef g;
    g.id = string_field(r, "id"), g.op = string_field(r, "op"), g.backend = string_field(r, "backend");
    g.verdict = string_field(r, "verdict"), g.features = strings_field(r, "features");
    g.not_needed = strings_field(r, "not_needed"), g.confirmed = bool_field(r, "confirmed");
    g.representative = string_field(r, "representative"), g.bundle = string_field(r, "bundle");
    g.replay = string_field(r, "replay"), g.shape = string_field(r, "shape");
    g.shrink = {int_field(r, "shrink_steps", 0), int_field(r, "shrink_tries", 0),
                bool_field(r, "shrink_minimal")};
    g.evaluation = within_field("evaluation", [&] { return evaluation_from(object_field(r, "evaluation")); });
    if (r.contains("fault"))  // a worker fault's group; journals before them have none
      g.fault = string_field(r, "fault"), g.fault_reproduced = bool_field(r, "fault_reproduced");
    groups_.push_back(std::move(g));
  }
}

namespace {

// Whether DIR holds the bundle version the journal names (its finding.json's case and shrink steps).
bool bundle_matches(const std::filesystem::path& dir, std::uint64_t case_index, std::int64_t shrink_steps) {
  for (const char* file : {"case.json", "tensors.bin"})
    if (!std::filesystem::is_regular_file(dir / file)) return false;
  std::ifstream in(dir / "finding.json");
  const json f = json::parse(in, nullptr, /*allow_exceptions=*/false);
  try {
    return u64_field(f, "case_index") == case_index && int_field(f, "shrink_steps") == shrink_steps;
  } catch (const FieldError&) {
    return false;
  }
}

}  // namespace

std::vector<std::string> Findings::verify_bundles() {
  std::lock_guard lock(mu_);
  std::vector<std::string> redo;
  for (auto& [sig, f] : by_signature_) {
    if (!f.bundled || bundle_matches(out_dir_ / f.report.bundle, f.report.case_index, 0)) continue;
    f.bundled = false, --drawn_bundles_[f.report.backend + "|" + f.report.verdict];
    f.report.bundle.clear();
    // The replay command of the missing bundle would name a missing directory.
    f.report.replay = stream_replay(f.report);
    redo.push_back(f.report.id);
  }
  // A group without its representative's bundle is forgotten: its findings are unexplained again, and the
  // grouping phase shrinks one of them anew.
  std::erase_if(groups_, [&](const GroupDef& g) {
    const auto rep = by_signature_.find(g.representative);
    const bool ok = rep != by_signature_.end() &&
                    bundle_matches(out_dir_ / g.bundle, rep->second.report.case_index, g.shrink.accepted);
    if (!ok) redo.push_back(g.id);
    return !ok;
  });
  return redo;
}

std::vector<std::string> Findings::unbundled() {
  std::lock_guard lock(mu_);
  // Earliest in the stream first, up to each class's kDrawnBundlesPerClass: a finding past them never had a
  // bundle.
  std::vector<std::pair<std::uint64_t, std::string>> order;
  for (const auto& [sig, f] : by_signature_)
    if (!f.bundled) order.emplace_back(f.report.case_index, sig);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (const auto& [index, sig] : order) {
    const auto& r = by_signature_.at(sig).report;
    int& n = drawn_bundles_[r.backend + "|" + r.verdict];
    if (n < kDrawnBundlesPerClass) ++n, out.push_back(sig);
  }
  return out;
}

bool Findings::claim_drawn_bundle(const std::string& backend, const std::string& verdict) {
  std::lock_guard lock(mu_);
  int& n = drawn_bundles_[backend + "|" + verdict];
  return n < kDrawnBundlesPerClass ? (++n, true) : false;
}

void Findings::keep_lowest_drawn_bundles() {
  std::shared_lock writing(writes_);
  if (sealed_) return;
  std::lock_guard lock(mu_);
  std::map<std::string, std::vector<std::pair<std::uint64_t, FindingState*>>> by_class;
  for (auto& [sig, f] : by_signature_)
    by_class[f.report.backend + "|" + f.report.verdict].emplace_back(f.report.case_index, &f);
  for (auto& [c, list] : by_class) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    int kept = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      FindingState& f = *list[i].second;
      const auto dir = out_dir_ / "findings" / f.report.id;
      if (i < kDrawnBundlesPerClass) {
        kept += f.bundled;
        continue;
      }
      // A bundle a worker wrote for it first, or one left behind when a lower case replaced its case.
      if (!f.bundled && !std::filesystem::exists(dir)) continue;
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      if (ec) files::throw_io_error(ec.value(), "cannot remove", dir);
      f.bundled = false, f.report.bundle.clear(), f.report.shape.clear();
      f.report.replay = stream_replay(f.report);
      journal_->append({{"type", "unbundle"}, {"id", f.report.id}, {"replay", f.report.replay}});
    }
    drawn_bundles_[c] = kept;
  }
}

void Findings::seal() {
  std::unique_lock lock(writes_);
  sealed_ = true;
}

void Findings::add_group(GroupDef g, const CaseSpec& spec, const Case& pristine) {
  std::shared_lock writing(writes_);
  if (sealed_) return;
  g.bundle = "findings/" + g.id;
  const auto dir = out_dir_ / g.bundle;
  g.replay = fmt::format("driftcheck replay {}", dir.string());
  std::uint64_t seed = 0, index = 0;
  {
    std::lock_guard lock(mu_);
    const auto& r = by_signature_.at(g.representative).report;
    seed = r.seed, index = r.case_index;
  }
  FindingRecord rec{g.id,
                    g.backend,
                    shape_class(spec),
                    g.replay,
                    stream_replay_command(spec.op, seed, index, g.backend, stream_,
                                          backends_ ? definition_args(g.backend, *backends_) : std::string()),
                    seed,
                    index,
                    g.shrink.accepted,
                    g.shrink.tried,
                    shape_line(spec),
                    g.evaluation,
                    definition_of(g.backend)};
  g.shape = rec.shape;
  write_bundle(dir, spec, pristine, rec);
  std::lock_guard lock(mu_);
  json record = {{"type", "group"},
                 {"id", g.id},
                 {"op", g.op},
                 {"backend", g.backend},
                 {"verdict", g.verdict},
                 {"features", g.features},
                 {"not_needed", g.not_needed},
                 {"confirmed", g.confirmed},
                 {"representative", g.representative},
                 {"bundle", g.bundle},
                 {"replay", g.replay},
                 {"shrink_steps", g.shrink.accepted},
                 {"shrink_tries", g.shrink.tried},
                 {"shrink_minimal", g.shrink.minimal},
                 {"shape", g.shape},
                 {"evaluation", metrics_json(g.evaluation)}};
  if (!g.fault.empty()) record["fault"] = g.fault, record["fault_reproduced"] = g.fault_reproduced;
  journal_->append(record);
  g.evaluation.outputs.clear();
  groups_.push_back(std::move(g));
}

std::vector<GroupDef> Findings::groups() const {
  std::lock_guard lock(mu_);
  return groups_;
}

bool Findings::add(const std::string& signature, const reports::FindingReport& report) {
  std::shared_lock writing(writes_);
  if (sealed_) return false;
  std::lock_guard lock(mu_);
  const auto it = by_signature_.find(signature);
  if (it != by_signature_.end() && it->second.report.case_index <= report.case_index) return false;
  const bool fresh = it == by_signature_.end();
  FindingState& f = by_signature_[signature];
  // Its drawn bundle, if any, holds the other case: it no longer counts (keep_lowest_drawn_bundles bundles
  // this case once discovery ends, or removes it; a bundle being written now is not taken for this case's).
  if (f.bundled) --drawn_bundles_[f.report.backend + "|" + f.report.verdict];
  f = FindingState{report, false};
  journal_->append({{"type", "finding"},
                    {"signature", signature},
                    {"id", report.id},
                    {"op", report.op},
                    {"backend", report.backend},
                    {"verdict", report.verdict},
                    {"shape_class", report.shape_class},
                    {"detail", report.detail},
                    {"worst_ratio", files::number_json(report.worst_ratio)},
                    {"seed", report.seed},
                    {"case_index", report.case_index},
                    {"found_after_s", report.found_after_s},
                    {"replay", report.replay},
                    {"features", report.features}});
  return fresh;
}

void Findings::save_bundle(const std::string& signature, const Backend& b, const CaseSpec& spec,
                           const Case& pristine, const Evaluation& e) {
  std::shared_lock writing(writes_);
  if (sealed_) return;
  std::string id;
  std::uint64_t seed = 0, index = 0;
  {
    std::lock_guard lock(mu_);
    const auto& r = by_signature_.at(signature).report;
    id = r.id, seed = r.seed, index = r.case_index;
  }
  const std::string rel = "findings/" + id;
  const auto dir = out_dir_ / rel;
  FindingRecord rec{id,
                    std::string(b.name()),
                    shape_class(spec),
                    bundle_replay_command(dir),
                    stream_replay_command(spec.op, seed, index, b, stream_),
                    seed,
                    index,
                    0,
                    0,
                    shape_line(spec),
                    e,
                    record_definition(b)};
  write_bundle(dir, spec, pristine, rec);
  std::lock_guard lock(mu_);
  auto& f = by_signature_.at(signature);
  // A lower case of the signature came while this one was written: the bundle is not its (see add()).
  if (f.report.case_index != index) return;
  f.bundled = true;
  f.report.bundle = rel, f.report.replay = rec.replay, f.report.shape = rec.shape;
  f.report.detail = e.detail, f.report.worst_ratio = e.worst_ratio;
  journal_->append({{"type", "bundle"},
                    {"id", id},
                    {"bundle", rel},
                    {"replay", rec.replay},
                    {"detail", f.report.detail},
                    {"worst_ratio", files::number_json(f.report.worst_ratio)},
                    {"shape", rec.shape},
                    {"bundle_shape_class", rec.shape_class}});
}

std::optional<FindingState> Findings::find(const std::string& signature) const {
  std::lock_guard lock(mu_);
  const auto it = by_signature_.find(signature);
  if (it == by_signature_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, FindingState> Findings::snapshot() const {
  std::lock_guard lock(mu_);
  return by_signature_;
}

std::size_t Findings::size() const {
  std::lock_guard lock(mu_);
  return by_signature_.size();
}

std::string fault_label(std::string_view detail) {
  std::string d(detail);
  for (const char* tail : {"; last output: ", " (in the re-run: "})
    if (const auto at = d.find(tail); at != std::string::npos) d.erase(at);
  // "run request 17" -> "run request"
  for (std::size_t at = d.find(" request "); at != std::string::npos; at = d.find(" request ", at + 1)) {
    std::size_t end = at + 9;
    while (end < d.size() && d[end] >= '0' && d[end] <= '9') ++end;
    if (end > at + 9) d.erase(at + 8, end - (at + 8));
  }
  return d;
}

bool is_worker_fault(std::string_view verdict) {
  return verdict == verdict_name(Verdict::kCrash) || verdict == verdict_name(Verdict::kTimeout);
}

}  // namespace driftcheck::fuzz
