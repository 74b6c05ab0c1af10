// The findings registry of a campaign: one finding per signature (op, backend, verdict, shape class), its
// "finding" and "bundle" journal records, and its repro bundle on disk (docs/CAMPAIGN.md). Thread-safe.
// Internal to the campaign runner.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/bundle.hpp"
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
  bool bundled = false;  // its drawn bundle is on disk
};

// The command that replays the bundle in `bundle_dir`.
std::string bundle_replay_command(const std::filesystem::path& bundle_dir);

// A cause found by the grouping phase (campaign_groups.hpp): one backend, one verdict and the features its
// shrunk, ablated representative still needs to fail. Findings are assigned to groups when the report is
// built, so a group is journaled as its definition only.
struct GroupDef {
  std::string id;
  std::string op;
  std::string backend;
  std::string verdict;
  std::vector<std::string> features;    // needed (ablation: removing any made the failure go away)
  std::vector<std::string> not_needed;  // present in the shrunk case but removed by ablation
  bool confirmed = false;               // every feature had a removing edit that was tested
  std::string representative;           // signature of the finding it was shrunk from
  std::string bundle;                   // the shrunk case's bundle, relative to the campaign directory
  std::string replay;
  ShrinkCounts shrink;    // of the representative's drawn case
  std::string shape;      // shape_line() of the shrunk case
  Evaluation evaluation;  // of the representative (metrics, worst element); outputs are not kept
  // A worker fault's group (crash, timeout): no features, the fault itself (fault_label()), and whether it
  // came back when the representative's case ran again alone. Such a group is not shrunk.
  std::string fault;
  bool fault_reproduced = false;
};

// A worker fault's verdict detail without what changes from one case to the next (request numbers, the
// worker's last output line, the re-run that met it): "worker killed by signal 6 (SIGABRT: Aborted) during
// run request", "no reply to run request within 30 s (worker killed)".
std::string fault_label(std::string_view detail);
// Crash and timeout: verdicts of a worker's process, not of its outputs (docs/CAMPAIGN.md "Worker faults").
bool is_worker_fault(std::string_view verdict);

// Bundles written at discovery per (backend, verdict): enough to replay a class before the grouping phase
// has run (and if it never does), without one bundle per signature (a 60 s mutant campaign found over a
// thousand signatures).
inline constexpr int kDrawnBundlesPerClass = 2;

std::string signature_of(OpKind op, std::string_view backend, Verdict v, const std::string& shape);
// A stable directory name for a signature: readable prefix plus FNV-1a of the whole signature.
std::string finding_id(std::string_view backend, Verdict v, const std::string& signature);

class Findings {
 public:
  // `stream`: the flags of the campaign's stream (stream_args(): model profile, compile set), in the stream
  // replay commands of its bundles; `backends`: the registry its backends come from (their definitions go
  // into replay commands and bundles).
  explicit Findings(std::filesystem::path out_dir, std::string stream = {},
                    const Registry* backends = nullptr)
      : out_dir_(std::move(out_dir)), stream_(std::move(stream)), backends_(backends) {}

  // The journal that "finding" and "bundle" records go to (set once it is open).
  void attach(Journal* journal) { journal_ = journal; }
  // Folds in a "finding" or "bundle" record of a resumed journal; throws FieldError (json_fields.hpp).
  void load(const nlohmann::json& record);
  // Resume: a finding whose journaled bundle is missing on disk (findings/ deleted), unreadable, or not the
  // version the journal names (a kill between replacing a bundle and journaling it) is marked unbundled, to
  // be redone; a group whose representative bundle is so is dropped, for the grouping phase to redo. Returns
  // the finding and group ids concerned.
  std::vector<std::string> verify_bundles();
  // Signatures of the findings that are owed a drawn bundle and have none on disk (the earliest of each
  // (backend, verdict) without one, up to kDrawnBundlesPerClass per class): claims those bundles.
  std::vector<std::string> unbundled();
  // The first failing case of a signature becomes a finding, journaled at once: a kill before its bundle is
  // written still leaves the finding, which resume bundles. A signature is represented by its lowest case
  // index whichever worker met which case first, so a later report of a lower case replaces it (journaled
  // again; its drawn bundle, of the other case, no longer counts, and keep_lowest_drawn_bundles settles it).
  // Returns true for a new signature only: the caller may bundle it at once.
  bool add(const std::string& signature, const reports::FindingReport& report);
  // Writes (or replaces) the finding's bundle of its drawn case and journals it.
  void save_bundle(const std::string& signature, const Backend& b, const CaseSpec& spec, const Case& pristine,
                   const Evaluation& e);

  // Whether a new finding of this (backend, verdict) gets its drawn bundle at once (the first
  // kDrawnBundlesPerClass of each do).
  bool claim_drawn_bundle(const std::string& backend, const std::string& verdict);
  // The drawn bundles of each (backend, verdict) become those of its kDrawnBundlesPerClass lowest case
  // indices, as a one-job run would have written them: any other bundle is removed (and journaled so), and
  // unbundled() then names the ones still owed. Run once discovery ends, so a campaign's bundles depend on
  // its seed and cases only, not on the order its workers met them.
  void keep_lowest_drawn_bundles();
  // Writes the group's representative bundle (findings/<group id>/) and journals the group.
  void add_group(GroupDef g, const CaseSpec& spec, const Case& pristine);
  std::vector<GroupDef> groups() const;

  // Ends every write: waits for a bundle or record being written to complete, then makes add() return false
  // and save_bundle() and add_group() do nothing. The campaign seals its findings before it finalises the
  // journal and the report, so threads it abandoned in a case can never write after them.
  void seal();

  std::optional<FindingState> find(const std::string& signature) const;
  std::map<std::string, FindingState> snapshot() const;  // by signature
  std::size_t size() const;

 private:
  // The stream command of a finding's case, with what it needs to find the backend.
  std::string stream_replay(const reports::FindingReport& r) const;
  // The record of a backend's definition, looked up by name.
  DefinitionRecord definition_of(const std::string& backend) const;

  std::filesystem::path out_dir_;
  std::string stream_;
  const Registry* backends_ = nullptr;
  Journal* journal_ = nullptr;
  mutable std::mutex mu_;
  // Held shared by every write (bundle files and journal record together), exclusively by seal().
  std::shared_mutex writes_;
  bool sealed_ = false;  // guarded by writes_
  std::map<std::string, FindingState> by_signature_;
  std::map<std::string, int> drawn_bundles_;  // by "backend|verdict"
  std::vector<GroupDef> groups_;
};

}  // namespace driftcheck::fuzz
