// Every file driftcheck writes (journal, repro bundles, reports) goes through these calls, so a failed write
// is always a std::system_error whose message names the file ("cannot write DIR/journal.jsonl: No space left
// on device"), and so tests can make writes fail on purpose (fault injection, below).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace driftcheck::files {

// Throws std::system_error for errno value `err`; what() is "<what> <path>: <strerror(err)>".
[[noreturn]] void throw_io_error(int err, std::string_view what, const std::filesystem::path& path);

// Writes all of `data` to `fd` (short writes and EINTR retried). Throws std::system_error naming `path`.
void write_all(int fd, std::string_view data, const std::filesystem::path& path);

// Writes `content` to a temp file beside `path`, fsyncs it and renames it over `path`, so a reader sees the
// old file or the new one, never a torn one. On failure the temp file is removed and std::system_error names
// the path.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// Fault injection, compiled in only with the CMake option DRIFTCHECK_FAULT_INJECTION (on in test builds, off
// in the main job's build): the value of environment variable `name` as a count, or nullopt when it is unset
// or the build has no fault injection. Seams (docs/CAMPAIGN.md "Fault injection"):
//   DRIFTCHECK_FAULT_ENOSPC_AFTER=N  write_all fails with ENOSPC once this process has written N bytes
//   DRIFTCHECK_FAULT_THREADS=N       the N+1-th worker thread a campaign starts fails with EAGAIN
std::optional<std::int64_t> fault_limit(const char* name);
// Whether this build has the seams (tests that need them skip otherwise).
bool fault_injection_available();

}  // namespace driftcheck::files
