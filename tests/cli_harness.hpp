// Running the driftcheck binary from a test as a user or a CI job would: a scratch directory of this
// process's own, files in and out, and a command's exit code with its stdout and stderr.
#pragma once

#include <sys/wait.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace driftcheck::harness {

namespace fs = std::filesystem;

struct Outcome {
  int code = -1;  // the exit status; -1 when the command did not exit (a signal)
  std::string out;
  std::string err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A directory named after the test executable and this process, removed at exit.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name)
      : dir(fs::temp_directory_path() / ("driftcheck_" + name + "_" + std::to_string(::getpid()))) {
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

// Runs a shell command line with stdout and stderr captured in `scratch`.
inline Outcome run_command(const std::string& cmd, const fs::path& scratch) {
  const auto out = scratch / "stdout", err = scratch / "stderr";
  const int status = std::system((cmd + " >" + out.string() + " 2>" + err.string()).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

}  // namespace driftcheck::harness
