// A scratch folder for one test process. The suites of several build trees (release, ASan, other checkouts)
// may run at once on one machine, so a fixed name under /tmp would be shared between them: the process id
// keeps their folders apart.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace driftcheck::testing {

// TEMP/driftcheck_<suite>_<pid>_<name>, removed if an earlier run left it (not created).
inline std::filesystem::path fresh_scratch_dir(const std::string& suite, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("driftcheck_" + suite + "_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace driftcheck::testing
