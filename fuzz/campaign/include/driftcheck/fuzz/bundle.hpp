// Repro bundles: everything needed to re-run one finding alone, in one directory.
//   case.json     format "driftcheck.case": the CaseSpec, op, seed, case index, and a readable layout of each
//                 tensor
//   tensors.bin   format "DCTENSOR": every storage of the pristine case (guard bands included) and every view
//                 into it (name, storage, shape, strides, offset), so aliasing and guard bands are reproduced
//                 byte for byte even if the generator changes later
//   finding.json  format "driftcheck.finding": op, backend, verdict, metrics, tolerance, worst index, seed,
//                 case index, shape class and the exact replay command
// A bundle is written into a temp directory and swapped into place, so a bundle directory is always complete.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/errors.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {

inline constexpr int kBundleFormatVersion = 1;
inline constexpr int kTensorFileVersion = 1;

// Binary tensor files (little-endian; layout in docs/CAMPAIGN.md).
void write_tensors(const std::filesystem::path& path, const Case& c);
std::map<std::string, Tensor, std::less<>> read_tensors(const std::filesystem::path& path);
// The same from the file's bytes; `name` prefixes errors. Every view must lie inside its storage and hold no
// more elements than it (so nothing a reader allocates later exceeds the file's size).
std::map<std::string, Tensor, std::less<>> parse_tensors(std::string data, const std::string& name);

// How the bundle's backend was defined when the bundle was written: the backends file or plugin
// (Backend::definition) and the SHA-256 of its bytes then, so `driftcheck replay BUNDLE` finds an external
// backend without being told, and refuses a file that changed since. Kind kBuiltIn: nothing to record.
struct DefinitionRecord {
  BackendDefinition definition;
  std::string sha256;  // empty when the file could not be read
};
// Records `b`'s definition, hashing its file now.
DefinitionRecord record_definition(const Backend& b);

// What finding.json holds, besides the format fields.
struct FindingRecord {
  std::string id;
  std::string backend;
  std::string shape_class;
  std::string replay;         // replays the shrunk bundle
  std::string replay_stream;  // replays the drawn (unshrunk) case from the stream
  std::uint64_t seed = 0;
  std::uint64_t case_index = 0;
  std::int64_t shrink_steps = 0;  // shrinks accepted
  std::int64_t shrink_tries = 0;  // candidates evaluated
  std::string shape;              // shape_line() of the bundled case
  Evaluation evaluation;          // verdict, detail, metrics (outputs are not stored)
  DefinitionRecord definition;    // of the backend, when it is not built in
};
nlohmann::json finding_json(const FindingRecord& f, OpKind op);

struct Bundle {
  CaseSpec spec;
  Case pristine;           // op, params, seed, index and the stored tensors
  nlohmann::json finding;  // finding.json as written
};

// Writes DIR atomically, replacing a bundle already there. On failure (std::system_error naming the file) no
// temp directory is left behind and DIR is unchanged.
void write_bundle(const std::filesystem::path& dir, const CaseSpec& spec, const Case& pristine,
                  const FindingRecord& finding);
// Reads and validates a bundle: case.json and finding.json field by field, tensors.bin byte by byte, and the
// tensors against the spec's op and parameters (the case is built from the stored tensors; the spec is never
// materialised). Throws BundleError naming the file and the field.
Bundle read_bundle(const std::filesystem::path& dir);
// The same from the three files' contents (`dir` names them in errors).
Bundle parse_bundle(std::string_view case_json, std::string tensors_bin, std::string_view finding_json,
                    const std::filesystem::path& dir);

// The readers of read_bundle, on a file's text (`name` prefixes errors): case.json gives the spec, seed and
// case index; finding.json is returned once its format and the fields replay uses are checked.
struct CaseFile {
  CaseSpec spec;
  std::uint64_t seed = 0;
  std::uint64_t case_index = 0;
};
CaseFile parse_case_json(std::string_view text, const std::string& name);
nlohmann::json parse_finding_json(std::string_view text, const std::string& name);
// The definition finding.json records (kind kBuiltIn when it has none: a built-in backend, or a bundle
// written before bundles recorded it). Throws BundleError naming the field.
DefinitionRecord definition_of(const nlohmann::json& finding, const std::string& name);

}  // namespace driftcheck::fuzz
