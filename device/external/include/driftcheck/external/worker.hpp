// driftcheck's side of the worker protocol (docs/PROTOCOL.md): a Worker is one worker process with its
// control channel and shared-memory arena; a WorkerPool keeps the workers of one backend, one per campaign
// job at most (or a declared cap), and replaces a worker that faulted. Every fault of a worker surfaces as a
// BackendFault (error, timeout, crash) for the request it happened in; the worker is then discarded.
#pragma once

#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
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
  // error such as another version, or a worker that does not implement `op`).
  Worker(const WorkerCommand& cmd, std::string backend, OpKind op);
  ~Worker();  // shutdown, then kill
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const HelloReply& hello() const { return hello_; }
  Support supports(const Case& c);
  Support supports(std::string_view case_object);  // case_text(c, nullptr), when the caller has it
  // Runs c on the worker: storages into the arena, run request, storages back into c.
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
class WorkerPool {
 public:
  WorkerPool(WorkerCommand cmd, std::string backend, OpKind op, int max_workers);
  ~WorkerPool();

  // Runs f(worker) on a worker of the pool. A worker left unhealthy by a fault is dropped; the next call
  // starts a fresh one. After kMaxStartFailures failed starts in a row, every call fails at once with the
  // last start failure (a worker that cannot start costs one verdict per case, not one start-up per case).
  template <class F>
  decltype(auto) with_worker(F&& f) {
    Lease lease(*this);
    return f(*lease.worker);
  }
  // Starts one worker (kept for later calls) and returns its hello reply; throws BackendFault.
  HelloReply handshake();
  const WorkerCommand& command() const { return cmd_; }

  static constexpr int kMaxStartFailures = 3;

 private:
  struct Lease {
    explicit Lease(WorkerPool& p) : pool(p), worker(p.acquire()) {}
    ~Lease() { pool.release(std::move(worker)); }
    WorkerPool& pool;
    std::unique_ptr<Worker> worker;
  };
  std::unique_ptr<Worker> acquire();
  void release(std::unique_ptr<Worker> w);

  WorkerCommand cmd_;
  std::string backend_;
  OpKind op_;
  int max_workers_;
  std::mutex mu_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Worker>> idle_;
  int live_ = 0;  // workers idle or leased
  int start_failures_ = 0;
  std::optional<BackendFault> broken_;
};

}  // namespace driftcheck::external
