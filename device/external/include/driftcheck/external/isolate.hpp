// --isolate: built-in backends run out of process through the worker protocol, each served by a child
// `driftcheck worker --backend NAME`, so a kernel that crashes the process (an illegal address, a segfault)
// costs a verdict, not the campaign. The isolated backend keeps the built-in's name, numerics and supports
// (answered in process), so reports, bundles and replay commands read the same.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/external/worker.hpp"

namespace driftcheck::external {

inline constexpr double kIsolateTimeoutSeconds = 60;

// Replaces every backend of `registry` matching `globs` (mutants included) by an isolated one whose workers
// run `driftcheck_exe worker WORKER_ARGS... --backend NAME` (the arguments that register the same backends
// files and plugins in the child, so a C plugin can be isolated too). Returns how many were isolated; throws
// InvalidArgument when the globs match nothing.
int isolate_backends(Registry& registry, std::string_view globs, const std::filesystem::path& driftcheck_exe,
                     double timeout_s = kIsolateTimeoutSeconds,
                     const std::vector<std::string>& worker_args = {});

}  // namespace driftcheck::external
