// The worker side of the protocol in C++: a WorkerServer reads requests and writes replies on the descriptors
// driftcheck passed (docs/PROTOCOL.md section 1) and maps the arena; serve() answers every request with a
// built-in backend (what `driftcheck worker --backend NAME`, and so --isolate, runs).
#pragma once

#include <optional>
#include <span>

#include "driftcheck/external/protocol.hpp"

namespace driftcheck::external {

class WorkerServer {
 public:
  // Descriptors from DRIFTCHECK_REQUEST_FD / DRIFTCHECK_REPLY_FD / DRIFTCHECK_ARENA_FD (3, 4, 5 when unset).
  WorkerServer();
  ~WorkerServer();
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  // The next request; nullopt at end of file (driftcheck is gone). Throws ProtocolError for a bad frame.
  std::optional<Frame> next();
  void reply(MessageType type, std::uint32_t seq, const nlohmann::json& payload);
  // Raw bytes on the reply channel (the test worker's garbage).
  void write_raw(std::string_view bytes);
  // The arena mapped with at least `size` bytes (mapped again when it grew).
  std::span<std::byte> arena(std::uint64_t size);

 private:
  int request_fd_, reply_fd_, arena_fd_;
  std::byte* arena_ = nullptr;
  std::uint64_t mapped_ = 0;
};

// Serves `backend` until shutdown or end of file. Returns the process's exit status: 0, or 3 after a protocol
// error (written to stderr).
int serve(const Backend& backend);

}  // namespace driftcheck::external
