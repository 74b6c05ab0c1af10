#include "thread_group.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <system_error>

#include "driftcheck/files/file_io.hpp"

namespace driftcheck::fuzz {
namespace {

// Threads the fault seam still lets start (negative: no limit).
bool injected_failure() {
  static std::atomic<std::int64_t> left{files::fault_limit("DRIFTCHECK_FAULT_THREADS").value_or(-1)};
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
    running_->add(1);
    try {
      threads_.emplace_back([running = running_, fn = std::move(fn)] {
        fn();
        running->add(-1);
      });
    } catch (...) {
      running_->add(-1);
      throw;
    }
    return true;
  } catch (const std::system_error& e) {
    *why = e.code().message();
  } catch (const std::bad_alloc&) {
    *why = "out of memory";
  }
  return false;
}

bool ThreadGroup::wait(const std::atomic<int>* interrupts, double grace, const std::function<void()>& tick,
                       int* abandoned, const std::function<bool()>& give_up) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> first_signal;
  // Wakes when the last thread returns, else every 50 ms for the tick, the signals and `give_up`.
  while (!running_->wait_for_none(std::chrono::milliseconds(50))) {
    if (tick) tick();
    const int signals = interrupts != nullptr ? interrupts->load() : 0;
    const bool given_up = give_up && give_up();
    if (signals == 0 && !given_up) continue;
    if (signals > 0 && !first_signal) first_signal = Clock::now();
    if (!given_up && signals < 2 &&
        std::chrono::duration<double>(Clock::now() - *first_signal).count() < grace)
      continue;
    *abandoned = running_->count();
    if (*abandoned == 0) break;  // the last one returned meanwhile
    for (auto& t : threads_) t.detach();
    threads_.clear();
    return false;
  }
  join();
  return true;
}

void ThreadGroup::Running::add(int n) {
  std::lock_guard lock(mu_);
  n_ += n;
  if (n_ == 0) none_.notify_all();
}

int ThreadGroup::Running::count() const {
  std::lock_guard lock(mu_);
  return n_;
}

bool ThreadGroup::Running::wait_for_none(std::chrono::milliseconds at_most) {
  std::unique_lock lock(mu_);
  return none_.wait_for(lock, at_most, [this] { return n_ == 0; });
}

void ThreadGroup::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace driftcheck::fuzz
