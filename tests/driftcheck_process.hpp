// Runs the driftcheck binary as a child process for the tests that need a real process: exit codes and stderr
// lines, signals, kill -9, resource limits, a closed pipe. The binary is the build's (DRIFTCHECK_BIN) unless
// DRIFTCHECK_TEST_BIN names another one, e.g. an older build, to see which tests it fails.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace driftcheck::testing {

namespace fs = std::filesystem;

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string driftcheck_binary() {
  const char* over = std::getenv("DRIFTCHECK_TEST_BIN");
  return over != nullptr && *over != '\0' ? over : DRIFTCHECK_BIN;
}

// A directory of this process's own, removed at exit.
inline fs::path scratch() {
  struct Scratch {
    fs::path dir = fs::temp_directory_path() / ("driftcheck_proc_test_" + std::to_string(::getpid()));
    Scratch() {
      fs::remove_all(dir);
      fs::create_directories(dir);
    }
    ~Scratch() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  };
  static const Scratch s;
  return s.dir;
}

struct Outcome {
  int code = -1;    // exit status, -1 when killed by a signal
  int signal = 0;   // the signal that ended it, 0 when it exited
  std::string out;  // stdout
  std::string err;  // stderr
  double seconds = 0;
};

struct ChildOptions {
  std::vector<std::string> env;         // "NAME=value" added to the environment
  std::optional<rlim_t> address_space;  // RLIMIT_AS for the child (bytes)
  bool stderr_to_closed_pipe = false;   // stdout and stderr go to a pipe nobody reads (closed at once)
};

class Child {
 public:
  explicit Child(const std::vector<std::string>& args, const ChildOptions& o = {}) {
    static int counter = 0;
    const std::string tag = std::to_string(++counter);
    out_path_ = scratch() / ("out." + tag), err_path_ = scratch() / ("err." + tag);
    // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
    std::vector<std::string> argv_s{driftcheck_binary()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s = o.env;
    for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    for (auto& e : env_s) envp.push_back(e.data());
    argv.push_back(nullptr), envp.push_back(nullptr);
    const int files[2] = {::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                          ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    int pipe_fds[2] = {-1, -1};
    if (o.stderr_to_closed_pipe && ::pipe2(pipe_fds, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe2 failed");
    const int fds[2] = {o.stderr_to_closed_pipe ? pipe_fds[1] : files[0],
                        o.stderr_to_closed_pipe ? pipe_fds[1] : files[1]};
    const rlimit as{o.address_space.value_or(RLIM_INFINITY), o.address_space.value_or(RLIM_INFINITY)};
    start_ = std::chrono::steady_clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[0], STDOUT_FILENO), ::dup2(fds[1], STDERR_FILENO);
      if (o.address_space) ::setrlimit(RLIMIT_AS, &as);
      ::execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    for (int fd : {pipe_fds[0], pipe_fds[1], files[0], files[1]})  // nobody reads the pipe: writes get EPIPE
      if (fd >= 0) ::close(fd);
  }
  ~Child() {
    if (!reaped_) ::kill(pid_, SIGKILL), (void)wait();
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  // Whether it is still running (it is reaped when it ended).
  bool running() {
    if (reaped_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == 0) return true;
    finish(status);
    return false;
  }
  // Sends `sig` if it is still running; true when it was.
  bool signal(int sig) { return running() && ::kill(pid_, sig) == 0; }
  std::string err_so_far() const { return slurp(err_path_); }
  // Waits until stderr holds `text` (false on exit or timeout).
  bool wait_for_err(const std::string& text, double timeout_s) {
    while (elapsed() < timeout_s && running())
      if (err_so_far().find(text) != std::string::npos)
        return true;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return err_so_far().find(text) != std::string::npos;
  }
  // Waits for the end; after `timeout_s` seconds from the start it is killed (signal SIGKILL in the outcome).
  Outcome wait(double timeout_s = 300) {
    while (running()) {
      if (elapsed() > timeout_s) ::kill(pid_, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    outcome_.out = slurp(out_path_), outcome_.err = slurp(err_path_);
    return outcome_;
  }

 private:
  void finish(int status) {
    reaped_ = true;
    outcome_.seconds = elapsed();
    if (WIFEXITED(status)) outcome_.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) outcome_.signal = WTERMSIG(status);
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  fs::path out_path_, err_path_;
  std::chrono::steady_clock::time_point start_;
  Outcome outcome_;
};

}  // namespace driftcheck::testing
