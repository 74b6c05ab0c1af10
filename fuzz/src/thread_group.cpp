#include "thread_group.hpp"

#include <atomic>
#include <system_error>

#include "driftcheck/reports/file_io.hpp"

namespace driftcheck::fuzz {
namespace {

// Threads the fault seam still lets start (negative: no limit).
bool injected_failure() {
  static std::atomic<std::int64_t> left{reports::fault_limit("DRIFTCHECK_FAULT_THREADS").value_or(-1)};
  std::int64_t n = left.load();
  while (n >= 0) {
    if (n == 0) return true;
    if (left.compare_exchange_weak(n, n - 1)) return false;
  }
  return false;
}

}  // namespace

ThreadGroup::~ThreadGroup() {
  if (threads_.empty()) return;
  stop_();
  join();
}

bool ThreadGroup::start(std::function<void()> fn, std::string* why) {
  try {
    if (injected_failure())
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    threads_.emplace_back(std::move(fn));
    return true;
  } catch (const std::system_error& e) {
    *why = e.code().message();
  } catch (const std::bad_alloc&) {
    *why = "out of memory";
  }
  return false;
}

void ThreadGroup::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace driftcheck::fuzz
