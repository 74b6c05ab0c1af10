// Threads that are always joined, or deliberately abandoned. A std::thread still joinable when it is
// destroyed calls std::terminate, which is what an exception on the starting thread (a full disk at a
// checkpoint) or a thread that cannot be created (--jobs 1000 under a process limit) used to do to a
// campaign. A thread stuck in one long computation after Ctrl-C (a 128k-token attention case) cannot be
// cancelled safely: wait() detaches it once the interrupt's grace runs out. Internal to the campaign runner.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace driftcheck::fuzz {

class ThreadGroup {
 public:
  // `stop` asks running threads to finish; the destructor calls it before joining, so leaving a scope by an
  // exception ends the threads instead of waiting for their whole budget.
  explicit ThreadGroup(std::function<void()> stop) : stop_(std::move(stop)) {}
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  // Starts `fn` on a new thread. False, with the system's reason in `why`, when no thread can be created
  // (or DRIFTCHECK_FAULT_THREADS says so, file_io.hpp). `fn` must own a share of what it uses (a shared_ptr)
  // when the group may abandon it.
  bool start(std::function<void()> fn, std::string* why);
  std::size_t size() const { return threads_.size(); }
  void join();

  // Waits until every thread has returned, calling `tick` about every 50 ms, and joins them: true. After an
  // interrupt (`*interrupts` > 0) they get `grace` seconds more, none after a second interrupt; then those
  // still running are detached, left to run until the process ends, and their number is returned in
  // `abandoned`: false. The caller must seal whatever they could still write before it goes on. `give_up`
  // (called after each tick) returning true abandons the threads still running the same way (a deadline).
  bool wait(const std::atomic<int>* interrupts, double grace, const std::function<void()>& tick,
            int* abandoned, const std::function<bool()>& give_up = {});

 private:
  std::function<void()> stop_;
  std::vector<std::thread> threads_;
  // Threads of this group that have not returned; shared with them, so a detached one can still count
  // itself out after the group is gone.
  class Running {
   public:
    void add(int n);
    int count() const;
    bool wait_for_none(std::chrono::milliseconds at_most);  // true once none is running

   private:
    mutable std::mutex mu_;
    std::condition_variable none_;
    int n_ = 0;
  };
  std::shared_ptr<Running> running_ = std::make_shared<Running>();
};

}  // namespace driftcheck::fuzz
