#include "campaign_findings.hpp"

#include <fmt/format.h>

#include "campaign_stats.hpp"
#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace driftcheck::fuzz {

using nlohmann::json;

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
  const std::string type = r.value("type", "");
  if (type == "finding") {
    auto& f = by_signature_[r.at("signature").get<std::string>()];
    f.report = {r.at("id"),
                r.at("op"),
                r.at("backend"),
                r.at("verdict"),
                r.at("shape_class"),
                r.at("detail"),
                number_from_json(r.at("worst_ratio")),
                r.at("seed"),
                r.at("case_index"),
                r.at("found_after_s"),
                0,
                "",
                r.at("replay"),
                false};
  } else if (type == "bundle") {
    for (auto& [sig, f] : by_signature_) {
      if (f.report.id != r.at("id")) continue;
      f.bundled = true;
      f.report.bundle = r.at("bundle"), f.report.replay = r.at("replay");
      f.report.detail = r.at("detail"), f.report.worst_ratio = number_from_json(r.at("worst_ratio"));
      f.report.shrink_steps = r.at("shrink_steps");
      f.report.shrink_tries = r.value("shrink_tries", 0), f.report.shape = r.value("shape", "");
      f.report.shrink_minimal = r.value("shrink_minimal", false);
      f.shrunk = f.report.shrunk = r.value("shrunk", false);
    }
  }
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
                    {"worst_ratio", number_json(report.worst_ratio)},
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
                    fmt::format("driftcheck replay {}", dir.string()),
                    stream_replay_command(spec.op, seed, index, b.name()),
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
                    {"worst_ratio", number_json(f.report.worst_ratio)},
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
