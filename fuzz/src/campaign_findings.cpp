#include "campaign_findings.hpp"

#include <fstream>

#include <fmt/format.h>

#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/reports/json_text.hpp"

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

void Findings::load(const json& r) {
  std::lock_guard lock(mu_);
  const std::string type = string_field(r, "type");
  if (type == "finding") {
    auto& f = by_signature_[string_field(r, "signature")];
    f.report = {string_field(r, "id"),
                string_field(r, "op"),
                string_field(r, "backend"),
                string_field(r, "verdict"),
                string_field(r, "shape_class"),
                string_field(r, "detail"),
                number_field(r, "worst_ratio"),
                u64_field(r, "seed"),
                u64_field(r, "case_index"),
                number_field(r, "found_after_s"),
                0,
                "",
                string_field(r, "replay"),
                false};
  } else if (type == "bundle") {
    const std::string id = string_field(r, "id");
    for (auto& [sig, f] : by_signature_) {
      if (f.report.id != id) continue;
      f.bundled = true;
      f.report.bundle = string_field(r, "bundle"), f.report.replay = string_field(r, "replay");
      f.report.detail = string_field(r, "detail"), f.report.worst_ratio = number_field(r, "worst_ratio");
      f.report.shrink_steps = int_field(r, "shrink_steps", 0);
      // Journals written before shrinking to a minimum lack these three.
      f.report.shrink_tries = r.contains("shrink_tries") ? int_field(r, "shrink_tries", 0) : 0;
      f.report.shape = r.contains("shape") ? string_field(r, "shape") : "";
      f.report.shrink_minimal = r.contains("shrink_minimal") && bool_field(r, "shrink_minimal");
      f.shrunk = f.report.shrunk = bool_field(r, "shrunk");
    }
  }
}

namespace {

// Whether DIR/<bundle> holds the bundle version the journal names (its finding.json's shrink steps and case).
bool bundle_matches(const std::filesystem::path& dir, const reports::FindingReport& r) {
  for (const char* file : {"case.json", "tensors.bin"})
    if (!std::filesystem::is_regular_file(dir / file)) return false;
  std::ifstream in(dir / "finding.json");
  const json f = json::parse(in, nullptr, /*allow_exceptions=*/false);
  try {
    return u64_field(f, "case_index") == r.case_index && int_field(f, "shrink_steps") == r.shrink_steps;
  } catch (const FieldError&) {
    return false;
  }
}

}  // namespace

std::vector<std::string> Findings::verify_bundles() {
  std::lock_guard lock(mu_);
  std::vector<std::string> redo;
  for (auto& [sig, f] : by_signature_) {
    if (!f.bundled || bundle_matches(out_dir_ / f.report.bundle, f.report)) continue;
    f.bundled = false, f.shrunk = false;
    f.report.bundle.clear(), f.report.shrink_steps = 0;
    OpKind op;
    if (parse_op(f.report.op,
                 &op))  // the replay command of the missing bundle would name a missing directory
      f.report.replay = stream_replay_command(op, f.report.seed, f.report.case_index, f.report.backend);
    redo.push_back(f.report.id);
  }
  return redo;
}

std::vector<std::string> Findings::unbundled() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [sig, f] : by_signature_)
    if (!f.bundled) out.push_back(sig);
  return out;
}

bool Findings::add(const std::string& signature, const reports::FindingReport& report) {
  std::lock_guard lock(mu_);
  if (by_signature_.count(signature)) return false;
  by_signature_[signature].report = report;
  journal_->append({{"type", "finding"},
                    {"signature", signature},
                    {"id", report.id},
                    {"op", report.op},
                    {"backend", report.backend},
                    {"verdict", report.verdict},
                    {"shape_class", report.shape_class},
                    {"detail", report.detail},
                    {"worst_ratio", reports::number_json(report.worst_ratio)},
                    {"seed", report.seed},
                    {"case_index", report.case_index},
                    {"found_after_s", report.found_after_s},
                    {"replay", report.replay}});
  return true;
}

void Findings::save_bundle(const std::string& signature, const Backend& b, const CaseSpec& spec,
                           const Case& pristine, const Evaluation& e, ShrinkCounts shrink, bool shrunk) {
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
                    stream_replay_command(spec.op, seed, index, b.name(), model_),
                    seed,
                    index,
                    shrink.accepted,
                    shrink.tried,
                    shape_line(spec),
                    e};
  write_bundle(dir, spec, pristine, rec);
  std::lock_guard lock(mu_);
  auto& f = by_signature_.at(signature);
  f.bundled = true, f.shrunk = f.report.shrunk = shrunk;
  f.report.bundle = rel, f.report.replay = rec.replay, f.report.shrink_steps = shrink.accepted;
  f.report.shrink_tries = shrink.tried, f.report.shrink_minimal = shrink.minimal, f.report.shape = rec.shape;
  f.report.detail = e.detail, f.report.worst_ratio = e.worst_ratio;
  journal_->append({{"type", "bundle"},
                    {"id", id},
                    {"bundle", rel},
                    {"replay", rec.replay},
                    {"detail", f.report.detail},
                    {"worst_ratio", reports::number_json(f.report.worst_ratio)},
                    {"shrunk", shrunk},
                    {"shrink_steps", shrink.accepted},
                    {"shrink_tries", shrink.tried},
                    {"shrink_minimal", shrink.minimal},
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

}  // namespace driftcheck::fuzz
