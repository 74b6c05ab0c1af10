#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

namespace driftcheck::external {
namespace {

constexpr std::size_t kTailBytes = 4096;
// Without a pidfd (kernels before 5.3) the process's exit is checked this often while waiting.
constexpr int kExitPollMs = 100;
// A cancellable wait (SpawnSpec::cancel) looks at its flag this often.
constexpr int kCancelPollMs = 50;

std::string errno_text(int err) {
  return std::strerror(err);
}

// Parent ends are moved to fds >= 10, so the dup2s to 0..5 in the child never collide with a source fd.
int high_cloexec(int fd) {
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  if (moved < 0) throw BackendFault(FaultKind::kCrash, "cannot start worker: fcntl: " + errno_text(errno));
  return moved;
}

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
      throw BackendFault(FaultKind::kCrash, "cannot start worker: pipe: " + errno_text(errno));
    read = high_cloexec(fds[0]), write = high_cloexec(fds[1]);
  }
};

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return fmt::format("signal {} (SIG{}: {})", sig, abbrev ? abbrev : "?", strsignal(sig));
}

// Writing to a pipe whose worker died must be an EPIPE error, not a SIGPIPE that kills driftcheck.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] { std::signal(SIGPIPE, SIG_IGN); });
}

class SpawnActions {
 public:
  SpawnActions() { posix_spawn_file_actions_init(&fa_); }
  ~SpawnActions() { posix_spawn_file_actions_destroy(&fa_); }
  posix_spawn_file_actions_t* get() { return &fa_; }

 private:
  posix_spawn_file_actions_t fa_;
};

class SpawnAttr {
 public:
  SpawnAttr() {
    posix_spawnattr_init(&attr_);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr_, &none);
    posix_spawnattr_setsigdefault(&attr_, &defaults);
    posix_spawnattr_setpgroup(&attr_, 0);  // its own group: a timeout kills whatever it started
    posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  ~SpawnAttr() { posix_spawnattr_destroy(&attr_); }
  posix_spawnattr_t* get() { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Process::Process(const SpawnSpec& spec) : cancel_(spec.cancel) {
  ignore_sigpipe();
  Pipe request, reply, output;
  SpawnActions fa;
  const int in_fd = spec.stdio_channel ? 0 : 3, out_fd = spec.stdio_channel ? 1 : 4;
  if (!spec.stdio_channel) {
    posix_spawn_file_actions_addopen(fa.get(), 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(fa.get(), output.write, 1);
  }
  posix_spawn_file_actions_adddup2(fa.get(), output.write, 2);
  posix_spawn_file_actions_adddup2(fa.get(), request.read, in_fd);
  posix_spawn_file_actions_adddup2(fa.get(), reply.write, out_fd);
  // A copy of the arena fd above 10, like the pipes, so no dup2 above overwrites it first.
  const int arena = spec.arena_fd >= 0 ? fcntl(spec.arena_fd, F_DUPFD_CLOEXEC, 10) : -1;
  if (arena >= 0) posix_spawn_file_actions_adddup2(fa.get(), arena, 5);
  posix_spawn_file_actions_addclosefrom_np(fa.get(), 6);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(fa.get(), spec.cwd.c_str());
  SpawnAttr attr;
  auto argv = c_strings(spec.argv);
  auto envp = c_strings(spec.env);
  const int err = posix_spawn(&pid_, spec.exe.c_str(), fa.get(), attr.get(), argv.data(), envp.data());
  for (int fd : {request.read, reply.write, output.write, arena}) close(fd);
  request_fd_ = request.write, reply_fd_ = reply.read, output_fd_ = output.read;
  if (err != 0) {
    pid_ = -1;
    close_fd(request_fd_), close_fd(reply_fd_), close_fd(output_fd_);
    throw BackendFault(FaultKind::kCrash,
                       fmt::format("cannot start worker {}: {}", spec.exe.string(), errno_text(err)));
  }
  fcntl(request_fd_, F_SETFL, fcntl(request_fd_, F_GETFL) | O_NONBLOCK);
  fcntl(output_fd_, F_SETFL, fcntl(output_fd_, F_GETFL) | O_NONBLOCK);
#ifdef SYS_pidfd_open
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
#endif
}

Process::~Process() {
  kill_group();
  close_fd(request_fd_), close_fd(reply_fd_), close_fd(output_fd_), close_fd(pidfd_);
}

void Process::kill_group() {
  if (pid_ > 0 && !reaped_) {
    ::kill(-pid_, SIGKILL);
    reap(true);
  }
}

std::string Process::reap(bool block) {
  if (reaped_ || pid_ <= 0) return status_;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r != pid_) return {};
  reaped_ = true;
  if (WIFEXITED(status))
    status_ = fmt::format("exited with status {}", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    status_ = "killed by " + signal_text(WTERMSIG(status));
  // The rest of the group (children it started) goes too; the pipes they hold would keep them around.
  ::kill(-pid_, SIGKILL);
  return status_;
}

void Process::drain_output() {
  char buf[4096];
  while (output_fd_ >= 0) {
    const ssize_t n = read(output_fd_, buf, sizeof buf);
    if (n > 0) {
      tail_.append(buf, static_cast<std::size_t>(n));
      if (tail_.size() > kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) close_fd(output_fd_);  // every writer is gone
    return;
  }
}

std::string Process::last_output_line() const {
  std::string_view t = tail_;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.remove_suffix(1);
  const auto nl = t.find_last_of('\n');
  if (nl != std::string_view::npos) t.remove_prefix(nl + 1);
  std::string line;
  for (char c : t.substr(0, 300)) line += (c >= 0x20 && c < 0x7f) ? c : '?';
  return line;
}

void Process::crashed(std::string_view what) {
  // Give a dying process a moment to be reaped so the verdict names its exit status or signal.
  std::string how = reap(false);
  for (int i = 0; i < 20 && how.empty(); ++i) {
    usleep(5000);
    how = reap(false);
  }
  if (how.empty()) {
    kill_group();
    how = "closed its reply channel";
  }
  drain_output();
  const std::string line = last_output_line();
  throw BackendFault(FaultKind::kCrash, fmt::format("worker {} during {}{}{}", how, what,
                                                    line.empty() ? "" : "; last output: ", line));
}

void Process::timed_out(const Wait& wait) {
  kill_group();
  drain_output();
  const std::string line = last_output_line();
  throw BackendFault(FaultKind::kTimeout,
                     fmt::format("no reply to {} within {:g} s (worker killed){}{}", wait.what, wait.seconds,
                                 line.empty() ? "" : "; last output: ", line));
}

bool Process::wait_for(int fd, short events, const Wait& wait) {
  const auto deadline = wait.deadline;
  const std::string_view what = wait.what;
  for (;;) {
    pollfd fds[3] = {{fd, events, 0}, {output_fd_, POLLIN, 0}, {pidfd_, POLLIN, 0}};
    if (cancel_ != nullptr && cancel_->load()) {
      kill_group();
      throw BackendFault(FaultKind::kCrash, fmt::format("worker killed: cancelled during {}", what));
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) timed_out(wait);
    int ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    if (pidfd_ < 0) ms = std::min(ms, kExitPollMs);
    if (cancel_ != nullptr) ms = std::min(ms, kCancelPollMs);
    const int n = poll(fds, 3, ms);
    if (n < 0 && errno != EINTR) crashed(what);
    if (fds[1].revents) drain_output();
    if (fds[0].revents & events) return true;
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
    if ((pidfd_ >= 0 && fds[2].revents) || (pidfd_ < 0 && !reap(false).empty())) {
      // Exited: what it wrote before dying is still readable.
      pollfd last{fd, events, 0};
      return poll(&last, 1, 0) > 0 && (last.revents & events);
    }
  }
}

void Process::write_frame(const std::string& bytes, const Wait& wait) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(request_fd_, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      if (!wait_for(request_fd_, POLLOUT, wait)) crashed(wait.what);
    } else if (!(n < 0 && errno == EINTR)) {
      crashed(wait.what);  // EPIPE: nobody reads the requests any more
    }
  }
}

void Process::read_exact(char* out, std::size_t n, const Wait& wait) {
  while (n > 0) {
    if (!wait_for(reply_fd_, POLLIN, wait)) crashed(wait.what);
    const ssize_t got = read(reply_fd_, out, n);
    if (got == 0 || (got < 0 && errno != EINTR)) crashed(wait.what);
    if (got > 0) out += got, n -= static_cast<std::size_t>(got);
  }
}

Frame Process::read_frame(const Wait& wait) {
  std::array<std::byte, kFrameHeaderSize> header;
  read_exact(reinterpret_cast<char*>(header.data()), header.size(), wait);
  const FrameHeader h = decode_header(header);
  std::string payload(h.length, '\0');
  read_exact(payload.data(), payload.size(), wait);
  return {h.type, h.seq, decode_payload(payload)};
}

bool Process::reply_pending() {
  pollfd p{reply_fd_, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

void Process::begin_shutdown(std::uint32_t seq) {
  if (pid_ <= 0 || reaped_ || request_fd_ < 0) return;
  const std::string frame = encode_frame(MessageType::kShutdown, seq, nlohmann::json::object());
  // Best effort: a worker that does not take it is killed by await_exit.
  (void)!write(request_fd_, frame.data(), frame.size());
  close_fd(request_fd_);
}

void Process::await_exit(Clock::time_point deadline) {
  while (Clock::now() < deadline && reap(false).empty()) {
    pollfd p{pidfd_, POLLIN, 0};
    if (pidfd_ >= 0)
      poll(&p, 1, 20);
    else
      usleep(5000);
  }
  kill_group();
}

}  // namespace driftcheck::external
