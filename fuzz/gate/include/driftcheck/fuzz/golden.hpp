// Golden cases (golden/): canonical cases stored with their fp64 reference outputs, to prove that the
// reference has not moved (a compiler, platform or code change that changes one bit is caught) and to check a
// backend without trusting a recomputed reference. Per case NAME, in the golden directory (docs/GATE.md):
//   NAME.safetensors  every input tensor in its stored format (the logical view, raw encodings) and every
//                     reference output as "ref.<output>" in fp64 (reference/io, docs/EXCHANGE.md)
//   NAME.json         "driftcheck.golden" v1: description, op, the CaseSpec (op parameters and the layout the
//                     case is run with), the edits made to the generated inputs, and for every tensor its
//                     role, dtype, shape and SHA-256 of its bytes.
// `driftcheck golden update` writes them from the definitions in golden_cases.cpp; `golden verify` and the
// gate read them back, check every SHA-256, recompute each reference and require it bit-identical.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {

inline constexpr std::string_view kGoldenFormatName = "driftcheck.golden";
inline constexpr int kGoldenFormatVersion = 1;

// How a golden case is made: a spec to materialize, then edits the generator cannot express (a zero row).
struct GoldenDefinition {
  std::string name;
  std::string description;
  CaseSpec spec;
  std::string edit;                  // what `apply` does, recorded in the metadata ("" when nothing)
  std::function<void(Case&)> apply;  // may be empty
};
const std::vector<GoldenDefinition>& golden_definitions();

struct GoldenCase {
  std::string name;
  std::string description;
  std::filesystem::path metadata;  // NAME.json
  CaseSpec spec;
  Case pristine;      // the stored inputs in the spec's layout (outputs poisoned, guard bands around them)
  Outputs reference;  // the stored fp64 reference outputs
};

// NAME.json as read, before its tensors file is opened: every field checked for type and value.
struct GoldenMetadata {
  struct TensorEntry {
    DType dtype = DType::kF64;
    Shape shape;
    std::string sha256;  // 64 lower-case hex digits
  };
  std::string name;
  std::string description;
  CaseSpec spec;
  std::string tensors_file;  // a file name in the same directory (no directory part)
  std::map<std::string, TensorEntry> tensors;
};
// Parses the text of a NAME.json; `file` names it in errors. Throws InputError("golden", "FILE: problem")
// naming the field for anything that is not a golden metadata file of this version.
GoldenMetadata parse_golden_metadata(std::string_view text, const std::filesystem::path& file);

// Reads every case of `dir` (or only `names`), checking format, version, and every tensor's dtype, shape and
// SHA-256 against the metadata. Throws InputError("golden", "FILE: problem") naming the first mismatch.
std::vector<GoldenCase> load_golden(const std::filesystem::path& dir,
                                    const std::vector<std::string>& names = {});

// Recomputes the reference of a golden case. Empty when bit-identical to the stored one; else one line per
// output that moved: how many elements, the first and the largest difference with both values and their
// distance in ulps of fp64.
std::vector<std::string> reference_changes(const GoldenCase& g);

// Judges a backend on a golden case against the stored reference (the naive baseline and error model are
// computed from the stored inputs and reference). The caller checks supports() first.
Evaluation judge_golden(const Backend& b, const GoldenCase& g);
// The prepared case judge_golden judges against (for explaining a failure by known findings).
PreparedCase prepare_golden(const GoldenCase& g);

// Writes NAME.json and NAME.safetensors of every definition (or only `names`) into `dir`, atomically each.
// Returns one line per case: "NAME: new", "NAME: unchanged", or "NAME: rewritten (what changed)".
std::vector<std::string> update_golden(const std::filesystem::path& dir,
                                       const std::vector<std::string>& names = {});

}  // namespace driftcheck::fuzz
