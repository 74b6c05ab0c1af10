// Exchange files (docs/EXCHANGE.md), for kernels on machines where driftcheck cannot run next to them:
//   driftcheck export --out DIR   writes cases of the campaign stream as safetensors (every storage whole,
//   guard
//                                 bands and poison included, plus the fp64 reference outputs) and
//                                 DIR/manifest.json (format driftcheck.exchange v2: each case's layout as the
//                                 worker protocol's case object, its seed/index, spec and replay command,
//                                 and which new-token source (NewKv) its references use);
//   driftcheck check              judges the output storages another program wrote (OUTPUTS/<id>.safetensors)
//   with
//                                 the campaign's oracle, tolerances from the numerics a backends file
//                                 declares, and the campaign's reports and exit codes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/device/one_line.hpp"
#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {

inline constexpr std::string_view kExchangeFormat = "driftcheck.exchange";
// Version 2 (this one) adds the new-token source of the references: the manifest's "new_kv" (the export's
// --new-kv) and each attention case's "references", and the case files' reference_from_inputs.* tensors.
// Version 1 manifests are still read: their references are all NewKv::kCache.
inline constexpr int kExchangeFormatVersion = 2;

// Which reference outputs an export writes into the case files, by the new-token source (case.hpp NewKv):
// kCache: reference.* with NewKv::kCache (the only choice of version 1); kInputs: reference.* with
// NewKv::kInputs; kBoth: reference.* with NewKv::kCache, plus reference_from_inputs.* with NewKv::kInputs in
// each attention case where the two differ.
enum class ExportNewKv : std::uint8_t { kCache, kInputs, kBoth };
std::string_view export_new_kv_name(ExportNewKv n);  // "cache", "inputs", "both"
bool parse_export_new_kv(std::string_view text, ExportNewKv* out);

// A manifest, case file or outputs file that cannot be used: "<file>: <problem>", one line.
class ExchangeError : public std::runtime_error {
 public:
  explicit ExchangeError(std::string_view what) : std::runtime_error(one_line(what)) {}
};

// --- The manifest
// -------------------------------------------------------------------------------------------

// One case of a manifest, as read: everything but the tensor bytes (load_case reads those).
struct ManifestCase {
  std::string id;  // "000017": the case file is cases/<id>.safetensors, the outputs <id>.safetensors
  std::uint64_t seed = 0, index = 0;  // the stream case it is
  OpKind op = OpKind::kRmsNorm;
  CaseSpec spec;
  std::string shape_class;
  nlohmann::json case_object;              // the worker protocol's case object, plus a "name" per storage
  std::vector<std::string> storage_names;  // safetensors key of each storage, in case_object order
  std::vector<std::string> storage_views;  // a tensor viewing each storage (to find it in a Case)
  // Attention cases: the prefix of the case file's reference tensors for each new-token source the export
  // holds ("cache" / "inputs" -> "reference." or "reference_from_inputs."); a source not listed was not
  // exported. Empty for other ops. Version 1 manifests: {"cache": "reference."}.
  std::map<std::string, std::string> references;
};

struct Manifest {
  std::filesystem::path dir;
  int format_version = kExchangeFormatVersion;
  std::uint64_t seed = 0;
  ExportNewKv new_kv = ExportNewKv::kCache;  // the export's --new-kv ("cache" for version 1)
  std::vector<OpKind> ops;
  std::vector<ManifestCase> cases;
  // Entries that could not be read: one line each, naming the manifest and the entry ("manifest.json: case 3:
  // ..."). The other entries are still usable.
  std::vector<std::string> errors;
};

// Parses manifest text (version 1 or 2); `file` names it in errors. Throws ExchangeError when the manifest as
// a whole is unusable (not JSON, another format or version, no case list, a version 2 manifest without a
// valid "new_kv"); a malformed entry goes to Manifest::errors.
Manifest parse_manifest(std::string_view text, const std::filesystem::path& file);
Manifest read_manifest(const std::filesystem::path& dir);

// The case's tensors from DIR/cases/<id>.safetensors, checked against the manifest (every storage present
// with the manifest's dtype and size, nothing else but reference.* and reference_from_inputs.* outputs) and
// validate()d. Throws
// ExchangeError.
Case load_case(const Manifest& m, const ManifestCase& mc);

// --- export
// -------------------------------------------------------------------------------------------------

struct ExportOptions {
  std::vector<OpKind> ops;  // empty: every op
  std::uint64_t cases = 16;
  std::uint64_t seed = 1;
  ExportNewKv new_kv = ExportNewKv::kCache;  // the new-token source of the references (--new-kv)
  std::filesystem::path out_dir;
  std::string command_line;
  std::ostream* log = nullptr;
};
// Writes case files and the manifest (last, atomically: a directory without a manifest is an unfinished
// export). Throws UsageError when out_dir already holds a manifest.
void export_cases(const ExportOptions& o);

// --- check
// --------------------------------------------------------------------------------------------------

struct CheckOptions {
  std::filesystem::path cases_dir, outputs_dir, backend_config;
  std::string backend;                // the entry of backend_config to use; empty: its only one
  std::vector<std::string> only_ids;  // judge only these cases (empty: all)
  std::filesystem::path out_dir = "driftcheck-check";
  std::string command_line;
  std::ostream* log = nullptr;
};
struct CheckResultSet {
  reports::Report report;
  int exit_code =
      0;  // 0 clean; 1 findings or zero cases; 2 some case could not be judged (bad input); 3 internal
};
// Judges every case of the manifest whose op is the backend's; writes report.json, report.md and a repro
// bundle per finding into out_dir. Bad input for one case (a missing or corrupted file) is a one-line error
// in the log and the report, and exit code 2; every other case is still judged and reported.
CheckResultSet check_outputs(const CheckOptions& o);

}  // namespace driftcheck::fuzz
