// `driftcheck check`: judges output storages another program wrote for an export (docs/EXCHANGE.md) with the
// campaign's oracle, statistics, findings, bundles and reports. Each case's outputs enter the oracle through
// a backend whose run() copies the returned storages over the case's, so the storage checks (guard bands,
// unchanged inputs), the NaN/Inf policy and the tolerances are exactly the campaign's.
#include <chrono>
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/campaign_findings.hpp"
#include "driftcheck/fuzz/campaign_report.hpp"
#include "driftcheck/fuzz/campaign_stats.hpp"
#include "driftcheck/fuzz/cli.hpp"
#include "driftcheck/fuzz/exchange.hpp"
#include "driftcheck/fuzz/exchange_files.hpp"
#include "driftcheck/fuzz/features.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Metadata an outputs file may carry instead of storages: the program declined the case, or its kernel
// failed.
constexpr std::string_view kUnsupportedKey = "driftcheck.unsupported";
constexpr std::string_view kErrorKey = "driftcheck.error";

// The declared backend: name, op and numerics from the backends file. Without outputs it only describes
// (the report's backend list); with a case's outputs it "runs" by copying them in.
class ReturnedBackend final : public Backend {
 public:
  explicit ReturnedBackend(const external::BackendDecl& d) : d_(d) {}
  ReturnedBackend(const external::BackendDecl& d, const ManifestCase* mc, const io::Safetensors* returned)
      : d_(d), mc_(mc), returned_(returned) {}
  std::string_view name() const override { return d_.name; }
  std::string_view description() const override { return d_.description; }
  BackendKind kind() const override { return BackendKind::kExternal; }
  OpKind op() const override { return d_.op; }
  Numerics numerics() const override { return d_.numerics; }
  std::string origin() const override { return d_.origin() + "; outputs from files (driftcheck check)"; }
  Support supports(const Case& c) const override {
    if (Support s = d_.supports.check(c, who()); !s.ok) return s;
    if (returned_ == nullptr) return Support::yes();
    const auto it = returned_->metadata.find(kUnsupportedKey);
    return it == returned_->metadata.end() ? Support::yes() : Support::no(it->second);
  }
  void run(Case& c) const override {
    if (const auto it = returned_->metadata.find(kErrorKey); it != returned_->metadata.end())
      throw BackendError(it->second);
    std::vector<std::shared_ptr<Storage>> storages;
    for (const std::string& view : mc_->storage_views) storages.push_back(c.tensor(view).storage());
    // Storages the program did not return keep their pristine bytes: an input it never handed back cannot
    // show a modification, and docs/EXCHANGE.md says so.
    fill_storages(*returned_, *mc_, storages, "outputs", /*require_all=*/false);
  }

 private:
  std::string who() const { return fmt::format("{} ({})", d_.name, d_.origin()); }
  const external::BackendDecl& d_;
  const ManifestCase* mc_ = nullptr;
  const io::Safetensors* returned_ = nullptr;
};

external::BackendDecl pick_backend(const CheckOptions& o) {
  auto decls = external::load_backends_file(o.backend_config, registry(), /*require_runner=*/false);
  if (o.backend.empty()) {
    if (decls.size() != 1)
      throw UsageError(fmt::format("{} declares {} backends: name one with --backend",
                                   o.backend_config.string(), decls.size()));
    return decls.front();
  }
  for (auto& d : decls)
    if (d.name == o.backend || d.name == "ext." + o.backend) return d;
  throw UsageError(fmt::format("{} declares no backend {}", o.backend_config.string(), o.backend));
}

// The outputs file of a case, read and checked against the manifest: every storage an output is written into
// is there (whole, with the manifest's dtype and size), nothing else but other storages of the case. Throws
// ExchangeError naming the file.
io::Safetensors read_outputs(const CheckOptions& o, const ManifestCase& mc, const Case& c) {
  const fs::path path = o.outputs_dir / (mc.id + ".safetensors");
  if (!fs::exists(path))
    throw ExchangeError(fmt::format("{}: missing: no outputs for case {} (seed {}, index {})", path.string(),
                                    mc.id, mc.seed, mc.index));
  io::Safetensors out;
  try {
    out = io::read_safetensors(path);
  } catch (const io::SafetensorsError& e) {
    throw ExchangeError(e.what());
  }
  if (out.metadata.count(std::string(kUnsupportedKey)) || out.metadata.count(std::string(kErrorKey)))
    return out;
  std::vector<std::shared_ptr<Storage>> scratch;  // checks dtype and size only: run() copies the bytes
  for (const std::string& view : mc.storage_views)
    scratch.push_back(std::make_shared<Storage>(c.tensor(view).dtype(), c.tensor(view).storage()->numel()));
  fill_storages(out, mc, scratch, path, /*require_all=*/false);
  for (const std::string& output : op_signature(c).outputs) {
    const Storage* written = c.tensor(output).storage().get();
    for (std::size_t i = 0; i < mc.storage_views.size(); ++i)
      if (c.tensor(mc.storage_views[i]).storage().get() == written && !out.tensors.count(mc.storage_names[i]))
        throw ExchangeError(fmt::format("{}: has no tensor \"{}\", the storage output {} is written into",
                                        path.string(), mc.storage_names[i], output));
  }
  for (const auto& [name, t] : out.tensors)
    if (std::find(mc.storage_names.begin(), mc.storage_names.end(), name) == mc.storage_names.end())
      throw ExchangeError(
          fmt::format("{}: holds tensor \"{}\", which is no storage of case {}", path.string(), name, mc.id));
  return out;
}

class Checker {
 public:
  explicit Checker(const CheckOptions& o)
      : o_(o), decl_(pick_backend(o)), described_(decl_), manifest_(read_manifest(o.cases_dir)) {}
  CheckResultSet run();

 private:
  void judge(const ManifestCase& mc);
  std::string on_failure(const ManifestCase& mc, const PreparedCase& p, const Evaluation& e);
  void input_error(const std::string& line) {
    if (o_.log) *o_.log << "driftcheck: bad input: " << line << "\n";
    input_errors_.push_back(line);
  }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  std::string replay(const ManifestCase& mc) const {
    return fmt::format("driftcheck check --cases {} --outputs {} --backend-config {} --backend {} --case {}",
                       o_.cases_dir.string(), o_.outputs_dir.string(), o_.backend_config.string(), decl_.name,
                       mc.id);
  }

  const CheckOptions& o_;
  const external::BackendDecl decl_;
  const ReturnedBackend described_;
  const Manifest manifest_;
  Stats stats_;
  std::map<std::string, FindingState> findings_;
  std::vector<std::string> input_errors_, internal_errors_;
  std::uint64_t cases_ = 0;
  Clock::time_point start_ = Clock::now();
};

void Checker::judge(const ManifestCase& mc) {
  ++cases_;
  Case c;
  io::Safetensors returned;
  BackendStats& s = stats_.backends[decl_.name];
  OpStats& op = stats_.ops[std::string(op_name(mc.op))];
  try {
    c = load_case(manifest_, mc);
    ++op.cases;
    if (const Support sup = described_.supports(c); !sup.ok) {  // static supports: no outputs needed
      ++s.unsupported, ++s.reasons[sup.reason];
      return;
    }
    returned = read_outputs(o_, mc, c);
  } catch (const ExchangeError& e) {
    input_error(e.what());
    return;
  }
  const auto t0 = Clock::now();
  const PreparedCase p = prepare(std::move(c));
  op.reference_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  const ReturnedBackend b(decl_, &mc, &returned);
  EvalOptions eval;
  eval.metamorphic = false;  // one output per case: determinism and invariances need re-runs
  const Evaluation e = evaluate(b, p, eval);
  if (e.verdict == Verdict::kUnsupported) {
    ++s.unsupported, ++s.reasons[e.detail];
    return;
  }
  ++stats_.checks;
  s.record(e, mc.index, mc.shape_class);
  s.record_shape(mc.spec, e);
  if (is_failure(e.verdict)) ++stats_.failing[on_failure(mc, p, e)];
}

// The first case of a signature is a finding with a repro bundle, as in a campaign. Returns its id.
std::string Checker::on_failure(const ManifestCase& mc, const PreparedCase& p, const Evaluation& e) {
  const std::string sig = signature_of(mc.op, decl_.name, e.verdict, mc.shape_class);
  if (const auto it = findings_.find(sig); it != findings_.end()) return it->second.report.id;
  const std::string id = finding_id(decl_.name, e.verdict, sig);
  FindingRecord rec;
  rec.id = id, rec.backend = decl_.name, rec.shape_class = mc.shape_class, rec.replay = replay(mc);
  rec.replay_stream = stream_replay_command(mc.op, mc.seed, mc.index, "<backend>");
  rec.seed = mc.seed, rec.case_index = mc.index, rec.evaluation = e;
  write_bundle(o_.out_dir / "findings" / id, mc.spec, p.input, rec);
  reports::FindingReport& f = findings_[sig].report;
  f.id = id, f.op = std::string(op_name(mc.op)), f.backend = decl_.name;
  f.verdict = std::string(verdict_name(e.verdict)), f.shape_class = mc.shape_class, f.detail = e.detail;
  f.worst_ratio = e.worst_ratio, f.seed = mc.seed, f.case_index = mc.index, f.found_after_s = elapsed();
  f.bundle = fmt::format("findings/{}", id), f.replay = replay(mc), f.features = case_features(mc.spec);
  findings_[sig].bundled = true;
  return id;
}

CheckResultSet Checker::run() {
  for (const std::string& line : manifest_.errors) input_error(line);
  for (const std::string& id : o_.only_ids)
    if (std::none_of(manifest_.cases.begin(), manifest_.cases.end(),
                     [&](const auto& mc) { return mc.id == id; }))
      input_error(fmt::format("--case {}: no such case in {}", id, (o_.cases_dir / kManifestName).string()));
  std::uint64_t other_ops = 0;
  for (const ManifestCase& mc : manifest_.cases) {
    if (!o_.only_ids.empty() && std::find(o_.only_ids.begin(), o_.only_ids.end(), mc.id) == o_.only_ids.end())
      continue;
    if (mc.op != decl_.op) {
      ++other_ops;
      continue;
    }
    try {
      judge(mc);
    } catch (const std::exception& e) {
      internal_errors_.push_back(fmt::format("case {}: {}", mc.id, e.what()));
    }
  }
  if (o_.log && other_ops > 0)
    *o_.log << fmt::format("{} cases of other ops than {}'s {} were not judged\n", other_ops, decl_.name,
                           op_name(decl_.op));
  CampaignOptions opts;
  opts.seed = manifest_.seed, opts.out_dir = o_.out_dir, opts.command_line = o_.command_line,
  opts.log = o_.log;
  opts.backends = &registry();
  Selection sel;
  sel.ops = {decl_.op}, sel.backends = {&described_};
  // Outputs made elsewhere cannot be re-run here: no known findings (explaining a failure re-runs the backend
  // with its defects repaired), no grouping by shrinking, no heatmaps; findings group by the features their
  // cases share (report_groups).
  const KnownFindings no_known;
  reports::Report r =
      build_report({opts, sel, stats_, cases_, elapsed(), findings_, internal_errors_, no_known, {}, {}});
  r.errors.insert(r.errors.end(), input_errors_.begin(), input_errors_.end());
  // Bad input outranks findings (the run is incomplete), an internal error outranks both.
  r.exit_code = !internal_errors_.empty() ? kExitInternal : !input_errors_.empty() ? kExitUsage : r.exit_code;
  reports::write_reports(r, o_.out_dir);
  print_summary(opts, r, true);
  return {r, r.exit_code};
}

// The output directory: a previous check's findings are cleared (re-running after a fix must not show stale
// bundles); a campaign's directory is refused.
void prepare_out_dir(const fs::path& dir) {
  if (fs::exists(dir / "journal.jsonl"))
    throw UsageError(fmt::format("{} holds a fuzz campaign: choose another --out", dir.string()));
  if (fs::exists(dir / "report.json")) fs::remove_all(dir / "findings");
  fs::create_directories(dir);
}

}  // namespace

CheckResultSet check_outputs(const CheckOptions& o) {
  prepare_out_dir(o.out_dir);
  Checker checker(o);  // an unusable manifest or backends file throws here: nothing can be judged
  return checker.run();
}

Command add_check_command(CLI::App& app, const CliContext& ctx) {
  auto* cmd =
      app.add_subcommand("check", "judge outputs another program wrote for an export (docs/EXCHANGE.md)");
  auto o = std::make_shared<CheckOptions>();
  cmd->add_option("--cases", o->cases_dir, "directory `driftcheck export` wrote")->required();
  cmd->add_option("--outputs", o->outputs_dir,
                  "directory holding <id>.safetensors per case, written by the kernel")
      ->required();
  cmd->add_option("--backend-config", o->backend_config,
                  "backends file (TOML) declaring the kernel's op, numerics and supports")
      ->required();
  cmd->add_option("--backend", o->backend, "the entry of the backends file to use (default: its only one)");
  cmd->add_option("--case", o->only_ids, "judge only this case id (repeatable)");
  cmd->add_option("--out", o->out_dir, "report directory (default ./driftcheck-check)");
  return {cmd, [o, &ctx] {
            o->command_line = ctx.command_line, o->log = &ctx.err;
            return check_outputs(*o).exit_code;
          }};
}

}  // namespace driftcheck::fuzz
