// Known findings: failures of faithful twins that reproduce a defect of the upstream kernel they model. They
// are true findings about the real kernel, recorded in golden/known-findings.toml (format: docs/FINDINGS.md)
// so that campaigns and gates report them apart and stay green, without hiding anything else: a failure is
// explained only when the same backend, with the named defects repaired (Backend::without_defects), passes
// the same case. A known finding that no longer reproduces is reported too.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/fuzz/oracle.hpp"

namespace driftcheck::fuzz {

inline constexpr int kKnownFindingsVersion = 1;

struct KnownFinding {
  std::string id;        // stable name, also the docs/FINDINGS.md anchor
  std::string backend;   // glob over backend names; also matches mutants of a matching twin
  std::string defect;    // the twin's defect switch (Backend::modelled_defects) that reproduces it
  std::string summary;   // one line: what the real kernel does wrong
  std::string upstream;  // repository@commit file:line of the code at fault
  std::string issue;     // upstream issue or PR, or "none found"
  std::string replay;    // a driftcheck command that reproduces it
};

struct KnownFindings {
  std::vector<KnownFinding> findings;
};

// Parses the TOML text of a known-findings file (format = "driftcheck-known-findings", version = 1, one
// [[finding]] table per finding). Throws InvalidArgument naming the source and the problem.
KnownFindings parse_known_findings(std::string_view toml, std::string_view source);
KnownFindings read_known_findings(const std::filesystem::path& path);

// golden/known-findings.toml as it was when this binary was built.
const KnownFindings& builtin_known_findings();

// The known findings that apply to a backend: their glob matches its name or the twin it mutates, and it
// models their defect. For a kernel from outside that names its twin (Backend::twin), the twin's.
std::vector<const KnownFinding*> applicable_findings(const KnownFindings& known, const Backend& backend);
// The registered twin a kernel from outside names (Backend::twin), or nullptr: none named, or the backend
// has defect switches of its own.
const Backend* twin_of(const Backend& backend);
// Whether a kernel's outputs on a case are what its twin computed there: every element NaN on both sides or
// equal, or finite on both and |kernel - twin| <= tol_kernel + tol_twin + 1 ulp of the output's format at
// the larger magnitude. With `twin_on_abs_v` (the twin's outputs on the case with |V| in place of V, whose o
// is sum act(p_i) |v_i| / L over the twin's own weights), in the attention output `o` of a kernel whose P is
// rounded to act and where the twin itself is beyond its tolerance of the reference (the defect's arithmetic,
// not the reference's), 2u(1 + u)(1 + 2u) times that is added: the most that weights rounded to the
// neighbouring act value can move o (docs/FINDINGS.md derives both). Outputs the twin did not write disagree.
bool agrees_with_twin(const PreparedCase& prepared, const Outputs& kernel, const Numerics& kernel_numerics,
                      const Outputs& twin, const Numerics& twin_numerics,
                      const Outputs* twin_on_abs_v = nullptr);
// A backend's outputs on an attention case with every value of V (v_cache, v_new) replaced by its absolute
// value; nullopt where the backend does not run it.
std::optional<Outputs> outputs_on_abs_values(const Backend& backend, const Case& c);

// The backend with every applicable known finding's defect repaired, or nullptr when none applies. A mutant
// repaired this way still carries its own bug: the proof that a mutant is caught runs this backend.
std::unique_ptr<Backend> repaired_backend(const KnownFindings& known, const Backend& backend);

// Which known findings explain a failed evaluation of `backend` on `prepared`: the backend with all
// applicable defects repaired must pass (else the failure is unexplained and the result is empty); then each
// finding whose defect alone, left in, still fails the case is named; when none does, those whose repair
// alone makes it pass; all of them when neither singles any out.
//
// A kernel from outside that names its twin has no defect switches: its failure is explained by the known
// findings that explain its twin's failure on the same case, when its outputs agree with the twin's
// (agrees_with_twin): the real kernel then computed what the twin computes with the defect in, which the
// repaired twin shows is the defect's doing. This overload evaluates such a kernel again for its outputs;
// the next one takes the failed evaluation.
std::vector<const KnownFinding*> explain_failure(const KnownFindings& known, const Backend& backend,
                                                 const PreparedCase& prepared, const EvalOptions& opts = {});
std::vector<const KnownFinding*> explain_failure(const KnownFindings& known, const Backend& backend,
                                                 const PreparedCase& prepared, const Evaluation& failed,
                                                 const EvalOptions& opts = {});
// The same as "id, id": empty when no known finding explains it.
std::string explained_ids(const KnownFindings& known, const Backend& backend, const PreparedCase& prepared);

}  // namespace driftcheck::fuzz
