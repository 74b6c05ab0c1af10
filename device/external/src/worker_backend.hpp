// What every backend run by workers shares: its pool and the first handshake, made once (at selection, by
// available()) and kept, so a worker that cannot start is a one-line BadBackend before any case runs.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/external/worker.hpp"

namespace driftcheck::external {

class WorkerLink {
 public:
  WorkerLink(WorkerCommand cmd, std::string backend, std::string origin, OpKind op, int max_workers)
      : pool_(std::move(cmd), backend, op, max_workers),
        backend_(std::move(backend)),
        origin_(std::move(origin)) {}

  // The first worker's hello (started once); throws BadBackend when the handshake fails.
  const HelloReply& hello() {
    std::lock_guard lock(mu_);
    if (!hello_ && !failure_) {
      try {
        hello_ = pool_.handshake();
      } catch (const BackendFault& f) {
        failure_ = fmt::format("{} ({}): {}", backend_, origin_, f.what());
      }
    }
    if (failure_) throw BadBackend(*failure_);
    return *hello_;
  }
  bool handshaken() {
    std::lock_guard lock(mu_);
    return hello_.has_value();
  }
  WorkerPool& pool() { return pool_; }

 private:
  WorkerPool pool_;
  std::string backend_, origin_;
  std::mutex mu_;
  std::optional<HelloReply> hello_;
  std::optional<std::string> failure_;
};

}  // namespace driftcheck::external
