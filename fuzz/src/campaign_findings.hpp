// The findings registry of a campaign: one finding per signature (op, backend, verdict, shape class), its
// "finding" and "bundle" journal records, and its repro bundle on disk (docs/CAMPAIGN.md). Thread-safe.
// Internal to the campaign runner.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/journal.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {

// What the shrink of a finding did: candidates accepted (each a smaller case that still fails) and tried, and
// whether it ended at a minimum (a whole pass of candidates accepted nothing) rather than on its budget.
struct ShrinkCounts {
  std::int64_t accepted = 0, tried = 0;
  bool minimal = false;
};

struct FindingState {
  reports::FindingReport report;
  bool bundled = false;  // a bundle (drawn or shrunk) is on disk
  bool shrunk = false;   // the shrink phase has handled it
};

// The command that replays the bundle in `bundle_dir`.
std::string bundle_replay_command(const std::filesystem::path& bundle_dir);
std::string signature_of(OpKind op, std::string_view backend, Verdict v, const std::string& shape);
// A stable directory name for a signature: readable prefix plus FNV-1a of the whole signature.
std::string finding_id(std::string_view backend, Verdict v, const std::string& signature);

class Findings {
 public:
  // `model`: the campaign's model profile, named in the stream replay commands of its bundles.
  explicit Findings(std::filesystem::path out_dir, std::string model = {})
      : out_dir_(std::move(out_dir)), model_(std::move(model)) {}

  // The journal that "finding" and "bundle" records go to (set once it is open).
  void attach(Journal* journal) { journal_ = journal; }
  // Folds in a "finding" or "bundle" record of a resumed journal; throws FieldError (json_fields.hpp).
  void load(const nlohmann::json& record);
  // Resume: a finding whose journaled bundle is missing on disk (findings/ deleted), unreadable, or not the
  // version the journal names (a kill between replacing a bundle and journaling it) is marked unbundled and
  // unshrunk, to be redone. Returns the ids concerned.
  std::vector<std::string> verify_bundles();
  // Signatures of the findings without a bundle on disk.
  std::vector<std::string> unbundled() const;
  // The first failing case of a signature becomes a finding, journaled at once: a kill before its bundle is
  // written still leaves the finding, which resume bundles. Returns false for a signature already known.
  bool add(const std::string& signature, const reports::FindingReport& report);
  // Writes (or replaces) the finding's bundle and journals it.
  void save_bundle(const std::string& signature, const Backend& b, const CaseSpec& spec, const Case& pristine,
                   const Evaluation& e, ShrinkCounts shrink, bool shrunk);

  std::optional<FindingState> find(const std::string& signature) const;
  std::map<std::string, FindingState> snapshot() const;  // by signature
  std::size_t size() const;

 private:
  std::filesystem::path out_dir_;
  std::string model_;
  Journal* journal_ = nullptr;
  mutable std::mutex mu_;
  std::map<std::string, FindingState> by_signature_;
};

}  // namespace driftcheck::fuzz
