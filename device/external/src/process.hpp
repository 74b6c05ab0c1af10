// One worker process: spawned in its own process group with the descriptors of docs/PROTOCOL.md section 1,
// frames written and read under a deadline, its stdout/stderr drained into a tail kept for fault details.
// Every failure is a BackendFault: kCrash when the process is gone, kTimeout when the deadline passed (the
// process group is killed), kError for a frame that breaks the protocol.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "driftcheck/external/protocol.hpp"

namespace driftcheck::external {

using Clock = std::chrono::steady_clock;

struct SpawnSpec {
  std::filesystem::path exe;      // resolved executable
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<std::string> env;   // "KEY=VALUE", the whole environment
  std::filesystem::path cwd;      // empty: driftcheck's
  bool stdio_channel = false;     // requests on stdin, replies on stdout
  int arena_fd = -1;              // becomes fd 5 in the worker
  // Set (by another thread): every wait ends within kCancelPollMs, the process is killed and the wait throws
  // BackendFault(kCrash). A pool that is going away cancels the starts it has in flight this way.
  const std::atomic<bool>* cancel = nullptr;
};

// What a request waits for and until when; faults name it ("worker killed by signal 11 during run request 7",
// "no reply to run request 7 within 30 s").
struct Wait {
  Clock::time_point deadline;
  double seconds = 0;
  std::string what;
};

class Process {
 public:
  explicit Process(const SpawnSpec& spec);  // throws BackendFault(kCrash) when the spawn fails
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void write_frame(const std::string& bytes, const Wait& wait);
  Frame read_frame(const Wait& wait);
  // Bytes are waiting on the reply channel (a reply nobody asked for, a stray print with the stdio channel).
  bool reply_pending();
  // Sends shutdown (if it can) and closes the request channel; await_exit then waits for the exit until the
  // deadline and kills the group. Split so a pool shuts all its workers down in parallel.
  void begin_shutdown(std::uint32_t seq);
  void await_exit(Clock::time_point deadline);
  void kill_group();
  std::string last_output_line() const;

 private:
  void drain_output();
  [[noreturn]] void crashed(std::string_view what);
  [[noreturn]] void timed_out(const Wait& wait);
  // Waits for `events` on fd until the deadline while draining output; false when the process exited first.
  bool wait_for(int fd, short events, const Wait& wait);
  void read_exact(char* out, std::size_t n, const Wait& wait);
  std::string reap(bool block);

  const std::atomic<bool>* cancel_ = nullptr;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int request_fd_ = -1, reply_fd_ = -1, output_fd_ = -1;
  bool reaped_ = false;
  std::string status_;  // how it ended, once reaped
  std::string tail_;    // last bytes of its stdout/stderr
};

}  // namespace driftcheck::external
