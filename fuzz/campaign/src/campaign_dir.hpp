// The campaign directory (--out DIR): created on first use and locked for the whole run through DIR/lock
// (flock(2), released however the process ends, kill -9 included), so two runs never write into one campaign;
// and cleared of what interrupted writes leave behind. Internal to the campaign runner.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace driftcheck::fuzz {

class CampaignDir {
 public:
  // Creates DIR and DIR/findings, takes the lock, then removes temp files of interrupted atomic writes
  // (DIR/*.tmp, findings/<id>.tmp/) and puts back a bundle that a replacement moved aside and never replaced
  // (findings/<id>.old when findings/<id> is missing). Throws UsageError when DIR cannot be used (a file, no
  // permission) or another run holds its lock.
  explicit CampaignDir(std::filesystem::path dir);
  ~CampaignDir();
  CampaignDir(const CampaignDir&) = delete;
  CampaignDir& operator=(const CampaignDir&) = delete;

  const std::filesystem::path& path() const { return dir_; }
  std::filesystem::path journal() const { return dir_ / "journal.jsonl"; }
  // What the clean-up found, one line each ("removed findings/x.tmp (an interrupted bundle write)").
  const std::vector<std::string>& repairs() const { return repairs_; }

 private:
  void lock();
  void clean_interrupted_writes();

  std::filesystem::path dir_;
  int lock_fd_ = -1;
  std::vector<std::string> repairs_;
};

}  // namespace driftcheck::fuzz
