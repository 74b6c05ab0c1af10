// driftcheck's side of the worker protocol (docs/PROTOCOL.md): a Worker is one worker process with its
// control channel and shared-memory arena; a WorkerPool keeps the workers of one backend, one per campaign
// job at most (or a declared cap), and replaces a worker that faulted, in the background. Every fault of a
// worker surfaces as a BackendFault (error, timeout, crash) for the request it happened in; the worker is
// then discarded.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "driftcheck/external/protocol.hpp"

namespace driftcheck::external {

struct WorkerCommand {
  std::filesystem::path exe;               // resolved executable (argv[0] looked up in PATH or cwd)
  std::vector<std::string> argv;           // as declared
  std::map<std::string, std::string> env;  // added to driftcheck's environment
  std::filesystem::path cwd;               // empty: driftcheck's
  bool stdio_channel = false;
  double timeout_s = 30;           // per supports/run request
  double startup_timeout_s = 120;  // spawn to hello_reply
};

class Process;
class Arena;

class Worker {
 public:
  // Spawns the worker and exchanges hello. Throws BackendFault when it cannot (a crash, a timeout, a protocol
  // error such as another version, or a worker that does not implement `op`), and when `cancel` is set
  // meanwhile (by another thread).
  Worker(const WorkerCommand& cmd, std::string backend, OpKind op, const std::atomic<bool>* cancel = nullptr);
  ~Worker();  // shutdown, then kill
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const HelloReply& hello() const { return hello_; }
  Support supports(const Case& c);
  Support supports(std::string_view case_object);  // case_text(c, nullptr), when the caller has it
  // Runs c on the worker: storages into the arena, run request, storages back into c. A supports or run
  // request is also bound by the calling thread's CallPolicy::deadline: one that has not been answered by
  // then kills the worker and throws BackendNotRun (the case was not judged; no timeout verdict, since the
  // worker's own timeout_s had not passed).
  void run(Case& c);
  // False once a fault left the worker unusable (it is then killed and must be replaced).
  bool healthy() const { return healthy_; }
  // Asks the worker to exit; the destructor then waits for it (a pool asks all its workers first).
  void begin_shutdown();

 private:
  Frame request(MessageType type, std::string_view payload, double timeout_s);
  [[noreturn]] void protocol_fault(const ProtocolError& e);

  std::string backend_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Process> process_;
  double timeout_s_;
  std::uint32_t seq_ = 0;
  bool healthy_ = true;
  HelloReply hello_;
};

// The workers of one backend. Calls may come from every campaign thread at once; each takes an idle worker or
// starts one (at most `max_workers`, 0 for no cap), so there is one worker per job that runs the backend.
// A worker left unhealthy by a fault is replaced at once on a thread of the pool's own ("a restart"), so the
// call that met the fault returns its verdict without waiting for the replacement's start-up (seconds for a
// worker that imports torch). A call that finds no idle worker while a restart is under way waits for it,
// unless its thread's CallPolicy says not to wait for restarts: then it waits only when the restart is
// expected to end within kRestartWaitSeconds (by the mean of this pool's start-ups so far; a worker that
// starts in milliseconds costs no case), and otherwise throws BackendNotRun at once (docs/PROTOCOL.md
// section 5).
class WorkerPool {
 public:
  WorkerPool(WorkerCommand cmd, std::string backend, OpKind op, int max_workers);
  ~WorkerPool();  // cancels the restarts under way, then shuts every idle worker down

  // Runs f(worker) on a worker of the pool. A worker left unhealthy by a fault is dropped and restarted in
  // the background. A restart that fails is the fault of the next call (one verdict, as a start in that call
  // would have been) and is tried again; after kMaxStartFailures failed starts in a row, every call fails at
  // once with the last start failure (a worker that cannot start costs one verdict per case, not one start-up
  // per case).
  template <class F>
  decltype(auto) with_worker(F&& f) {
    Lease lease(*this);
    return f(*lease.worker);
  }
  // Starts one worker (kept for later calls) and returns its hello reply; throws BackendFault.
  HelloReply handshake();
  const WorkerCommand& command() const { return cmd_; }
  // Restarts begun so far and the seconds the finished ones took (a failed start included).
  WorkerRestarts restarts() const;

  static constexpr int kMaxStartFailures = 3;
  static constexpr double kRestartWaitSeconds = 0.1;

 private:
  struct Lease {
    explicit Lease(WorkerPool& p) : pool(p), worker(p.acquire()) {}
    ~Lease() { pool.release(std::move(worker)); }
    WorkerPool& pool;
    std::unique_ptr<Worker> worker;
  };
  struct Restarter {
    std::thread thread;
    std::chrono::steady_clock::time_point began;
    bool done = false;  // guarded by mu_; the thread touches nothing of the pool after setting it
  };
  std::unique_ptr<Worker> acquire();
  void release(std::unique_ptr<Worker> w);
  void begin_restart();  // with mu_ held
  // With mu_ held and a restart under way: until when a call that does not wait for restarts waits for this
  // one (its expected end, plus kRestartWaitSeconds), or nullopt when that end is further off than that.
  std::optional<std::chrono::steady_clock::time_point> restart_wait_until() const;
  void started(double seconds);  // with mu_ held: a worker started in `seconds`
  void restart(Restarter* self);

  WorkerCommand cmd_;
  std::string backend_;
  OpKind op_;
  int max_workers_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Worker>> idle_;
  int live_ = 0;        // workers idle, leased or being restarted
  int restarting_ = 0;  // restarts under way
  int start_failures_ = 0;
  std::deque<BackendFault> start_faults_;  // failed restarts not yet handed to a call
  std::optional<BackendFault> broken_;
  WorkerRestarts counters_;
  std::int64_t starts_ = 0;  // workers started, and the seconds their starts took
  double start_seconds_ = 0;
  std::atomic<bool> cancel_{false};
  std::list<Restarter> restarters_;  // a list: a Restarter stays put while its thread runs
};

}  // namespace driftcheck::external
