// Threads that are always joined. A std::thread still joinable when it is destroyed calls std::terminate,
// which is what an exception on the starting thread (a full disk at a checkpoint) or a thread that cannot be
// created
// (--jobs 1000 under a process limit) used to do to a campaign. Internal to the campaign runner.
#pragma once

#include <functional>
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
  // (or DRIFTCHECK_FAULT_THREADS says so, file_io.hpp).
  bool start(std::function<void()> fn, std::string* why);
  std::size_t size() const { return threads_.size(); }
  void join();

 private:
  std::function<void()> stop_;
  std::vector<std::thread> threads_;
};

}  // namespace driftcheck::fuzz
