// `driftcheck replay`: one finding re-run alone, and what it prints. A bundle records the backends file or
// plugin that defined its backend (bundle.hpp DefinitionRecord), so a bundle of an external backend replays
// as printed, without --backends; a file that changed since is refused rather than silently replayed with
// another kernel.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "driftcheck/fuzz/campaign.hpp"

namespace driftcheck::fuzz {

// Makes `backend` available for a bundle whose finding.json is `finding`: nothing when the process registry
// has it already (a built-in, or --backends / DRIFTCHECK_BACKENDS named its file); else, when the bundle
// records the file that defined it, that file is checked against its recorded SHA-256 and loaded. Throws
// UsageError (exit 2) when the file is gone or has changed, and for a backend nothing defines.
void load_bundle_backend(const nlohmann::json& finding, const std::string& backend,
                         const std::filesystem::path& bundle_dir);

// What a replay prints for one backend's run of a case: "PASS|FAIL <backend> <verdict>: <the verdict in
// words>", the oracle's one line, then each output's worst element (value, reference, |error|, tolerance, its
// ratio) and the share of elements beyond tolerance; known findings that explain the failure; or why nothing
// ran.
std::string replay_report(const Backend& b, const CheckResult& r);

}  // namespace driftcheck::fuzz
