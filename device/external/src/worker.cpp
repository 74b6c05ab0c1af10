#include "driftcheck/external/worker.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "process.hpp"

extern char** environ;

namespace driftcheck::external {
namespace {

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

// The shared memory a worker reads and writes storages in: a memfd that grows (never shrinks: a worker's
// mapping must stay valid) and is mapped here read/write.
class Arena {
 public:
  Arena() {
    fd_ = memfd_create("driftcheck-arena", MFD_CLOEXEC);
    if (fd_ < 0)
      throw BackendFault(FaultKind::kCrash, "cannot create the arena: memfd_create: " + errno_text());
  }
  ~Arena() {
    if (data_) munmap(data_, size_);
    close(fd_);
  }
  int fd() const { return fd_; }
  std::string path() const { return fmt::format("/proc/{}/fd/{}", getpid(), fd_); }
  std::span<std::byte> bytes() { return {data_, size_}; }
  void reserve(std::uint64_t n) {
    if (n <= size_) return;
    // Grow geometrically so a campaign remaps a handful of times, not once per larger case.
    const std::uint64_t want = std::max<std::uint64_t>(n, std::max<std::uint64_t>(2 * size_, 1 << 20));
    if (ftruncate(fd_, static_cast<off_t>(want)) != 0)
      throw BackendFault(FaultKind::kError,
                         fmt::format("cannot grow the arena to {} bytes: {}", want, errno_text()));
    void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw BackendFault(FaultKind::kError, "cannot map the arena: " + errno_text());
    if (data_) munmap(data_, size_);
    data_ = static_cast<std::byte*>(p), size_ = want;
  }

 private:
  static std::string errno_text() { return std::strerror(errno); }
  int fd_ = -1;
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

namespace {

std::vector<std::string> worker_environment(const WorkerCommand& cmd, std::string_view backend) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string_view::npos) env[std::string(kv.substr(0, eq))] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : cmd.env) env[k] = v;
  env["DRIFTCHECK_PROTOCOL"] = fmt::format("{}/{}", kProtocolName, kProtocolVersion);
  env["DRIFTCHECK_REQUEST_FD"] = fmt::format("{}", cmd.stdio_channel ? 0 : 3);
  env["DRIFTCHECK_REPLY_FD"] = fmt::format("{}", cmd.stdio_channel ? 1 : 4);
  env["DRIFTCHECK_ARENA_FD"] = fmt::format("{}", 5);
  env["DRIFTCHECK_BACKEND"] = std::string(backend);
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(fmt::format("{}={}", k, v));
  return out;
}

}  // namespace

Worker::Worker(const WorkerCommand& cmd, std::string backend, OpKind op, const std::atomic<bool>* cancel)
    : backend_(std::move(backend)), arena_(std::make_unique<Arena>()), timeout_s_(cmd.timeout_s) {
  process_ = std::make_unique<Process>(SpawnSpec{cmd.exe, cmd.argv, worker_environment(cmd, backend_),
                                                 cmd.cwd, cmd.stdio_channel, arena_->fd(), cancel});
  const Frame reply = request(MessageType::kHello, hello_request(backend_, op, 5, arena_->path()).dump(),
                              cmd.startup_timeout_s);
  try {
    hello_ = parse_hello_reply(reply.payload);
  } catch (const ProtocolError& e) {
    protocol_fault(e);
  }
  if (std::find(hello_.ops.begin(), hello_.ops.end(), op_name(op)) == hello_.ops.end()) {
    healthy_ = false;
    throw BackendFault(FaultKind::kError,
                       fmt::format("the worker does not implement op {} (its hello lists: {})", op_name(op),
                                   fmt::join(hello_.ops, ", ")));
  }
}

Worker::~Worker() {
  if (healthy_) begin_shutdown();
  process_->await_exit(after(2.0));
}

void Worker::begin_shutdown() {
  process_->begin_shutdown(++seq_);
}

void Worker::protocol_fault(const ProtocolError& e) {
  healthy_ = false;
  process_->kill_group();
  throw BackendFault(FaultKind::kError, fmt::format("protocol: {}", e.what()));
}

// One request and its reply. Every way the exchange can go wrong becomes a BackendFault; any fault but an
// error the worker reported (and did not call fatal) leaves the worker unhealthy, and it is killed.
Frame Worker::request(MessageType type, std::string_view payload, double timeout_s) {
  // The calling thread's deadline (the grouping phase's budget) cuts a supports or run request's own timeout;
  // hello keeps the start-up timeout (a pool's start is not the caller's).
  const auto& deadline = call_policy().deadline;
  const double left = deadline && type != MessageType::kHello
                          ? std::chrono::duration<double>(*deadline - Clock::now()).count()
                          : timeout_s;
  const bool cut = left < timeout_s;
  if (cut && left <= 0)
    throw BackendNotRun(
        fmt::format("not run: the caller's time ran out before {} request {}", message_name(type), seq_ + 1));
  const double wait_s = cut ? left : timeout_s;
  const Wait wait{after(wait_s), wait_s, fmt::format("{} request {}", message_name(type), ++seq_)};
  Frame reply;
  try {
    process_->write_frame(encode_frame(type, seq_, payload), wait);
    reply = process_->read_frame(wait);
    const auto expected = static_cast<MessageType>(static_cast<std::uint16_t>(type) | 0x80);
    if (reply.seq != seq_)
      throw ProtocolError(fmt::format("answered out of order: a {} with sequence {} to {}",
                                      message_name(reply.type), reply.seq, wait.what));
    if (reply.type != expected && reply.type != MessageType::kError)
      throw ProtocolError(fmt::format("a {} answers {}", message_name(reply.type), wait.what));
    if (process_->reply_pending()) throw ProtocolError(fmt::format("bytes after the reply to {}", wait.what));
  } catch (const ProtocolError& e) {
    protocol_fault(e);
  } catch (const BackendFault& f) {
    healthy_ = false;
    process_->kill_group();
    if (cut && f.kind() == FaultKind::kTimeout)
      throw BackendNotRun(fmt::format(
          "not judged: no reply to {} within the {:.3g} s left to the caller (its timeout is {:g} s); worker "
          "killed",
          wait.what, wait_s, timeout_s));
    throw;
  }
  if (reply.type != MessageType::kError) return reply;
  ErrorReply e;
  try {
    e = parse_error_reply(reply.payload);
  } catch (const ProtocolError& pe) {
    protocol_fault(pe);
  }
  if (e.unsupported) throw BackendDeclined(e.message);  // the worker stays: it answered, and `fatal` is moot
  if (e.fatal) {
    healthy_ = false;
    begin_shutdown();
  }
  throw BackendFault(FaultKind::kError, e.message);
}

Support Worker::supports(const Case& c) {
  return supports(case_text(c, nullptr));
}

Support Worker::supports(std::string_view case_object) {
  std::string payload = "{\"case\":";
  payload += case_object;
  payload += '}';
  const Frame reply = request(MessageType::kSupports, payload, timeout_s_);
  try {
    return parse_supports_reply(reply.payload);
  } catch (const ProtocolError& e) {
    protocol_fault(e);
  }
}

void Worker::run(Case& c) {
  const ArenaLayout layout = arena_layout(c);
  arena_->reserve(layout.size);
  copy_to_arena(layout, arena_->bytes());
  const std::string payload =
      fmt::format("{{\"case\":{},\"arena_size\":{}}}", case_text(c, &layout), arena_->bytes().size());
  const Frame reply = request(MessageType::kRun, payload, timeout_s_);
  try {
    check_run_reply(reply.payload, layout.nbytes);
  } catch (const ProtocolError& e) {
    protocol_fault(e);
  }
  copy_from_arena(layout, arena_->bytes());
}

// --- WorkerPool
// -----------------------------------------------------------------------------------------------

WorkerPool::WorkerPool(WorkerCommand cmd, std::string backend, OpKind op, int max_workers)
    : cmd_(std::move(cmd)), backend_(std::move(backend)), op_(op), max_workers_(max_workers) {}

// Restarts under way are cancelled (their processes killed within kCancelPollMs) and joined; then every idle
// worker is asked to exit, so they all wind down within one grace period together.
WorkerPool::~WorkerPool() {
  cancel_ = true;
  for (;;) {
    std::list<Restarter> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(restarters_);
    }
    if (threads.empty()) break;
    for (auto& r : threads) r.thread.join();
  }
  for (auto& w : idle_) w->begin_shutdown();
}

WorkerRestarts WorkerPool::restarts() const {
  std::lock_guard lock(mu_);
  return counters_;
}

std::unique_ptr<Worker> WorkerPool::acquire() {
  const CallPolicy& policy = call_policy();
  std::unique_lock lock(mu_);
  for (;;) {
    // A failed restart is this call's fault, before the pool is called broken: the start that failed last is
    // a verdict of its own, as it was when calls started their workers themselves.
    if (!start_faults_.empty()) {
      const BackendFault f = start_faults_.front();
      start_faults_.pop_front();
      throw f;
    }
    if (broken_) throw *broken_;
    if (!idle_.empty()) {
      auto w = std::move(idle_.back());
      idle_.pop_back();
      return w;
    }
    std::optional<Clock::time_point> until = policy.deadline;
    if (restarting_ > 0) {
      // The replacement comes sooner than a start of our own would. A caller that does not wait for restarts
      // waits only for one about to end.
      if (!policy.wait_for_restart) {
        const auto soon = restart_wait_until();
        if (!soon || Clock::now() >= *soon)
          throw BackendNotRun("not judged: its worker was being restarted after a fault");
        if (!until || *soon < *until) until = soon;
      }
    } else if (max_workers_ <= 0 || live_ < max_workers_) {
      break;
    }
    if (!until) {
      freed_.wait(lock);
    } else if (freed_.wait_until(lock, *until) == std::cv_status::timeout && policy.deadline &&
               Clock::now() >= *policy.deadline) {
      throw BackendNotRun(fmt::format("not run: the caller's time ran out waiting for a worker{}",
                                      restarting_ > 0 ? " being restarted after a fault" : ""));
    }
  }
  ++live_;
  lock.unlock();
  try {
    const auto t0 = Clock::now();
    auto w = std::make_unique<Worker>(cmd_, backend_, op_);
    lock.lock();
    start_failures_ = 0;
    started(seconds_since(t0));
    return w;
  } catch (const BackendFault& f) {
    lock.lock();
    --live_;
    if (++start_failures_ >= kMaxStartFailures)
      broken_ = BackendFault(
          FaultKind::kError,
          fmt::format("the worker failed to start {} times in a row: {}", start_failures_, f.what()));
    freed_.notify_all();
    throw;
  }
}

void WorkerPool::release(std::unique_ptr<Worker> w) {
  std::unique_ptr<Worker> dead;
  {
    std::lock_guard lock(mu_);
    if (w && w->healthy()) {
      idle_.push_back(std::move(w));
    } else {
      --live_;
      dead = std::move(w);  // killed already; destroying it only reaps
      if (!broken_ && !cancel_) begin_restart();
    }
    freed_.notify_one();
  }
}

void WorkerPool::begin_restart() {
  restarters_.remove_if([](Restarter& r) {
    if (r.done) r.thread.join();  // it has left the pool alone since it set `done`
    return r.done;
  });
  ++live_, ++restarting_, ++counters_.restarts;
  Restarter& r = restarters_.emplace_back();
  r.began = Clock::now();
  try {
    r.thread = std::thread([this, &r] { restart(&r); });
  } catch (const std::system_error&) {  // no thread: the next call starts a worker itself
    restarters_.pop_back();
    --live_, --restarting_, --counters_.restarts;
  }
}

void WorkerPool::restart(Restarter* self) {
  const auto t0 = Clock::now();
  std::unique_ptr<Worker> w;
  std::optional<BackendFault> fault;
  try {
    w = std::make_unique<Worker>(cmd_, backend_, op_, &cancel_);
  } catch (const BackendFault& f) {
    fault = f;
  } catch (const std::exception& e) {
    fault = BackendFault(FaultKind::kError, fmt::format("cannot restart the worker: {}", e.what()));
  }
  std::lock_guard lock(mu_);
  counters_.seconds += seconds_since(t0);
  --restarting_;
  if (w) {
    start_failures_ = 0;
    started(seconds_since(t0));
    idle_.push_back(std::move(w));
  } else {
    --live_;
    if (!cancel_) {
      start_faults_.push_back(*fault);
      if (++start_failures_ >= kMaxStartFailures)
        broken_ = BackendFault(
            FaultKind::kError,
            fmt::format("the worker failed to start {} times in a row: {}", start_failures_, fault->what()));
      else
        begin_restart();
    }
  }
  freed_.notify_all();
  self->done = true;
}

void WorkerPool::started(double seconds) {
  ++starts_, start_seconds_ += seconds;
}

std::optional<Clock::time_point> WorkerPool::restart_wait_until() const {
  if (starts_ == 0) return std::nullopt;
  const double mean = start_seconds_ / static_cast<double>(starts_);
  std::optional<Clock::time_point> first;
  for (const auto& r : restarters_)
    if (!r.done && (!first || r.began < *first)) first = r.began;
  if (!first) return std::nullopt;
  const auto end = *first + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(mean));
  const auto wait =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kRestartWaitSeconds));
  if (end - Clock::now() > wait) return std::nullopt;
  return end + wait;
}

HelloReply WorkerPool::handshake() {
  return with_worker([](Worker& w) { return w.hello(); });
}

}  // namespace driftcheck::external
