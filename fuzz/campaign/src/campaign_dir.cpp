#include "campaign_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "driftcheck/fuzz/errors.hpp"

namespace driftcheck::fuzz {

namespace fs = std::filesystem;

CampaignDir::CampaignDir(fs::path dir) : dir_(std::move(dir)) {
  if (dir_.empty()) throw UsageError("--out must name a directory (it is empty)");
  std::error_code ec;
  fs::create_directories(dir_ / "findings", ec);
  if (ec || !fs::is_directory(dir_ / "findings"))
    throw UsageError(fmt::format("cannot use --out {}: {}", dir_.string(),
                                 ec ? ec.message() : "findings is not a directory"));
  lock();
  clean_interrupted_writes();
}

CampaignDir::~CampaignDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void CampaignDir::lock() {
  const fs::path path = dir_ / "lock";
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0)
    throw UsageError(fmt::format("cannot use --out {}: cannot create {}: {}", dir_.string(), path.string(),
                                 std::strerror(errno)));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(lock_fd_, pid, sizeof pid - 1, 0);
    ::close(lock_fd_), lock_fd_ = -1;
    throw UsageError(
        fmt::format("{} is in use by another driftcheck run{}; wait for it to end or use another --out",
                    dir_.string(), n > 0 ? fmt::format(" (pid {})", std::string(pid, n)) : ""));
  }
  // The pid is only a hint for the message above; the lock is the flock, so a failed write changes nothing.
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(lock_fd_, 0) == 0) (void)!::pwrite(lock_fd_, pid.data(), pid.size(), 0);
}

void CampaignDir::clean_interrupted_writes() {
  std::error_code ec;
  for (const char* name : {"journal.jsonl.tmp", "report.json.tmp", "report.md.tmp"})
    if (fs::remove(dir_ / name, ec))
      repairs_.push_back(fmt::format("removed {} (an interrupted write)", name));
  const fs::path findings = dir_ / "findings";
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(findings, ec)) entries.push_back(e.path());
  for (const fs::path& p : entries) {
    const std::string name = p.filename().string();
    if (name.ends_with(".old")) {
      // A replacement moved the old bundle aside and was killed before the new one took its place: the old
      // one is whole, and it is the one the journal names.
      const fs::path bundle = findings / name.substr(0, name.size() - 4);
      if (!fs::exists(bundle)) {
        fs::rename(p, bundle, ec);
        if (!ec)
          repairs_.push_back(fmt::format("restored findings/{} (an interrupted bundle replacement)",
                                         bundle.filename().string()));
      } else {
        fs::remove_all(p, ec);
      }
    } else if (name.ends_with(".tmp")) {
      fs::remove_all(p, ec);
      repairs_.push_back(fmt::format("removed findings/{} (an interrupted bundle write)", name));
    }
  }
}

}  // namespace driftcheck::fuzz
