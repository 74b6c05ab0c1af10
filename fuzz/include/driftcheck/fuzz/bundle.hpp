// Repro bundles: everything needed to re-run one finding alone, in one directory.
//   case.json     format "driftcheck.case": the CaseSpec, op, seed, case index, and a readable layout of each
//   tensor tensors.bin   format "DCTENSOR": every storage of the pristine case (guard bands included) and
//   every view into
//                 it (name, storage, shape, strides, offset), so aliasing and guard bands are reproduced byte
//                 for byte even if the generator changes later
//   finding.json  format "driftcheck.finding": op, backend, verdict, metrics, tolerance, worst index, seed,
//   case
//                 index, shape class and the exact replay command
// A bundle is written into a temp directory and renamed into place, so a bundle directory is always complete.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {

inline constexpr int kBundleFormatVersion = 1;
inline constexpr int kTensorFileVersion = 1;

// A bundle or tensor file that cannot be read: the message names the file and the problem.
class BundleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Binary tensor files (little-endian; layout in docs/CAMPAIGN.md).
void write_tensors(const std::filesystem::path& path, const Case& c);
std::map<std::string, Tensor, std::less<>> read_tensors(const std::filesystem::path& path);

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
};
nlohmann::json finding_json(const FindingRecord& f, OpKind op);

struct Bundle {
  CaseSpec spec;
  Case pristine;           // op, params, seed, index and the stored tensors
  nlohmann::json finding;  // finding.json as written
};

// Writes DIR atomically, replacing a bundle already there.
void write_bundle(const std::filesystem::path& dir, const CaseSpec& spec, const Case& pristine,
                  const FindingRecord& finding);
Bundle read_bundle(const std::filesystem::path& dir);

}  // namespace driftcheck::fuzz
