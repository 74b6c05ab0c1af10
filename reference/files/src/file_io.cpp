#include "driftcheck/files/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <system_error>

#include <fmt/format.h>

namespace driftcheck::files {
namespace {

// Bytes this process may still write before the injected ENOSPC (DRIFTCHECK_FAULT_ENOSPC_AFTER).
std::atomic<std::int64_t>& write_budget() {
  static std::atomic<std::int64_t> budget{fault_limit("DRIFTCHECK_FAULT_ENOSPC_AFTER").value_or(-1)};
  return budget;
}

// The next chunk write_all may hand to write(): all of it, or what is left of an injected budget (0: the disk
// is "full").
std::size_t allowed(std::size_t n) {
  auto& budget = write_budget();
  std::int64_t left = budget.load();
  if (left < 0) return n;
  std::int64_t take;
  do {
    take = std::min<std::int64_t>(left, static_cast<std::int64_t>(n));
  } while (!budget.compare_exchange_weak(left, left - take));
  return static_cast<std::size_t>(take);
}

}  // namespace

void throw_io_error(int err, std::string_view what, const std::filesystem::path& path) {
  throw std::system_error(std::error_code(err, std::generic_category()),
                          fmt::format("{} {}", what, path.string()));
}

void write_all(int fd, std::string_view data, const std::filesystem::path& path) {
  std::size_t done = 0;
  while (done < data.size()) {
    const std::size_t chunk = allowed(data.size() - done);
    if (chunk == 0) throw_io_error(ENOSPC, "cannot write", path);
    const ssize_t n = ::write(fd, data.data() + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw_io_error(n < 0 ? errno : EIO, "cannot write", path);
    done += static_cast<std::size_t>(n);
  }
}

void write_file_atomic(const std::filesystem::path& path, std::string_view content) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io_error(errno, "cannot create", tmp);
  try {
    write_all(fd, content, path);
    // fsync before rename: otherwise a crash after the rename can leave an empty file under the final name.
    if (::fsync(fd) != 0) throw_io_error(errno, "cannot write", path);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io_error(err, "cannot replace", path);
  }
}

std::optional<std::int64_t> fault_limit(const char* name) {
#ifdef DRIFTCHECK_FAULT_INJECTION
  if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::strtoll(v, nullptr, 10);
#else
  (void)name;
#endif
  return std::nullopt;
}

bool fault_injection_available() {
#ifdef DRIFTCHECK_FAULT_INJECTION
  return true;
#else
  return false;
#endif
}

}  // namespace driftcheck::files
