// The `driftcheck` command line: `list`, `fuzz`, `replay` (docs/CAMPAIGN.md). Exit codes: 0 nothing beyond
// budget, 1 drift found (or a backend/op asked for ran zero cases), 2 bad usage or bad input file, 3 internal
// or device error. Every error is one line on `err`; run_cli never throws.
#pragma once

#include <iosfwd>

namespace driftcheck::fuzz {

inline constexpr int kExitClean = 0;
inline constexpr int kExitDrift = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

// `err_is_tty` makes `fuzz` refresh its progress line in place instead of printing periodic lines.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err, bool err_is_tty);

}  // namespace driftcheck::fuzz
