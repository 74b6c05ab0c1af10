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

Worker::Worker(const WorkerCommand& cmd, std::string backend, OpKind op)
    : backend_(std::move(backend)), arena_(std::make_unique<Arena>()), timeout_s_(cmd.timeout_s) {
  process_ = std::make_unique<Process>(SpawnSpec{cmd.exe, cmd.argv, worker_environment(cmd, backend_),
                                                 cmd.cwd, cmd.stdio_channel, arena_->fd()});
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
  const Wait wait{after(timeout_s), timeout_s, fmt::format("{} request {}", message_name(type), ++seq_)};
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
  } catch (const BackendFault&) {
    healthy_ = false;
    process_->kill_group();
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

// Every idle worker is asked to exit first, so they all wind down within one grace period together.
WorkerPool::~WorkerPool() {
  for (auto& w : idle_) w->begin_shutdown();
}

std::unique_ptr<Worker> WorkerPool::acquire() {
  std::unique_lock lock(mu_);
  freed_.wait(lock, [&] { return broken_ || !idle_.empty() || max_workers_ <= 0 || live_ < max_workers_; });
  if (broken_) throw *broken_;
  if (!idle_.empty()) {
    auto w = std::move(idle_.back());
    idle_.pop_back();
    return w;
  }
  ++live_;
  lock.unlock();
  try {
    auto w = std::make_unique<Worker>(cmd_, backend_, op_);
    lock.lock();
    start_failures_ = 0;
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
  std::lock_guard lock(mu_);
  if (w && w->healthy()) {
    idle_.push_back(std::move(w));
  } else {
    --live_;
    w.reset();  // killed already; destroying it only reaps
  }
  freed_.notify_one();
}

HelloReply WorkerPool::handshake() {
  return with_worker([](Worker& w) { return w.hello(); });
}

}  // namespace driftcheck::external
