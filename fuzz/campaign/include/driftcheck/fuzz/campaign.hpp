// Fuzz campaigns: a deterministic stream of cases checked against a set of backends.
//
// Case k of seed s is draw_case(ops[k % ops.size()], s, k): replayable alone with the op, seed and index.
// Worker threads take case indices from an atomic counter; each case is prepared once (reference + baseline)
// and judged for every selected backend of its op. A failing case is deduplicated by (op, backend, verdict,
// shape class of the drawn case) and journaled at once; the first two of each (backend, verdict) are also
// saved at once as repro bundles of the drawn case. After the discovery budget, a grouping phase (its own
// budget) groups findings by cause: per (backend, verdict), a finding no group explains is shrunk to a
// minimum and its unneeded features ablated, and the result is the group's representative bundle.
// Everything is journaled (journal.hpp) so a killed campaign resumes where its last checkpoint says, and ends
// with report.json / report.md / report.html (reports/report.hpp).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/campaign_options.hpp"
#include "driftcheck/fuzz/errors.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {

// "unknown backend 'NAME' (...)": says how to list backends, and for an ext.* name that its backends file
// must be given (a resumed campaign or a replayed bundle of an external backend needs --backends again).
std::string unknown_backend(std::string_view name);

// "rmsnorm,attention" -> ops; throws UsageError naming an unknown op.
std::vector<OpKind> parse_op_list(std::string_view list);

struct Selection {
  std::vector<OpKind> ops;
  std::vector<const Backend*> backends;
  std::vector<std::string> unavailable;  // backends a glob matched but that cannot run here, with why
  std::vector<std::string> errors;       // asked-for things that can run nothing (ops without backends)
};
// Resolves ops and backends. Throws UsageError when a glob matches no backend at all.
Selection select_backends(const Registry& reg, const std::vector<OpKind>& ops, const std::string& globs,
                          bool include_mutants);

// Runs (or resumes) a campaign into options.out_dir. Throws UsageError for bad options; internal errors
// inside the run end it early with exit code 3 and are listed in the report. See CampaignResult::abandoned
// for an interrupted run with work in flight.
CampaignResult run_campaign(const CampaignOptions& options);

// The one-off checks behind `driftcheck replay`.
struct CheckResult {
  Support support;
  Evaluation evaluation;  // meaningful only when support.ok
  // A failure that known findings explain (an upstream defect the twin reproduces): their ids.
  std::vector<std::string> known_findings;
};
CheckResult check_case(const Backend& backend, Case pristine);

// What a command needs to find a backend that is not built in: " --backends /abs/file.toml" or " --plugin
// /abs/x.so" (shell-quoted where the path needs it), "" for a built-in.
std::string definition_args(const BackendDefinition& d);
// The same for a backend known by name in `reg` ("" when it is not there, or built in).
std::string definition_args(std::string_view backend, const Registry& reg);

// The command that replays case `index` of seed `seed` alone on `backend`, with what it needs to find the
// backend (definition_args) and the flags of the campaign's stream (`stream`, as stream_args() writes them:
// its model profile and compile set).
std::string stream_replay_command(OpKind op, std::uint64_t seed, std::uint64_t index, const Backend& backend,
                                  std::string_view stream = {});
// The same for a backend named only ("<backend>", for a kernel that runs elsewhere), or whose definition
// arguments the caller has (`definition`, as definition_args writes them).
std::string stream_replay_command(OpKind op, std::uint64_t seed, std::uint64_t index,
                                  std::string_view backend, std::string_view stream = {},
                                  std::string_view definition = {});

// The storage formats of a case, the key of its drift statistics: the activation format ("bf16"), and for
// attention with a KV cache in another format both ("bf16+fp8_e4m3fn").
std::string drift_format(const CaseSpec& spec);
// Whether every storage format of the case is in `formats` (empty: every format).
bool formats_selected(const CaseSpec& spec, const std::vector<DType>& formats);

// The campaign's op for case k: ops interleaved so every op gets every n-th index.
inline OpKind stream_op(const std::vector<OpKind>& ops, std::uint64_t k) {
  return ops[k % ops.size()];
}

}  // namespace driftcheck::fuzz
