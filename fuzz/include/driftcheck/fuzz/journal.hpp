// The campaign journal: DIR/journal.jsonl, one JSON object per line, appended and handed to the kernel with
// one write() per record, so a killed campaign loses at most the record being written. Reading tolerates a
// torn last line (the kill landed mid-write) and cuts it off before appending again; a malformed line
// anywhere else means the file is not a journal and is rejected.
//
// Records ("type" field): "header" (format, format_version, campaign arguments) first, then any of "finding"
// (a failing case as soon as it is seen), "bundle" (the finding's shrunk repro bundle was written),
// "progress" (checkpoint: every case below `completed` is done, and the statistics of those cases), "end".
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace driftcheck::fuzz {

inline constexpr int kJournalFormatVersion = 1;
inline constexpr std::string_view kJournalFormatName = "driftcheck.journal";

// A journal that could not be read: malformed line, wrong format or version. The message names file and line.
class JournalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JournalContents {
  std::vector<nlohmann::json> records;  // header first
  bool torn_tail = false;               // a partial last line was dropped
};

// Reads every complete record. Throws JournalError when a line other than the last is malformed, when the
// first record is not a header of a known version, or when the file cannot be read.
JournalContents read_journal(const std::filesystem::path& path);

class Journal {
 public:
  // Creates the file (fails if it exists) and writes `header` as the first record, with format and version
  // added.
  static Journal create(const std::filesystem::path& path, nlohmann::json header);
  // Opens an existing journal for appending, first cutting off a torn last line so new records start on a
  // line of their own.
  static Journal reopen(const std::filesystem::path& path);

  Journal(Journal&& other) noexcept;
  Journal& operator=(Journal&& other) noexcept;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal();

  // Appends one record (a JSON object on one line). Thread-safe: records from several threads never
  // interleave.
  void append(const nlohmann::json& record);

 private:
  explicit Journal(int fd, std::filesystem::path path)
      : fd_(fd), path_(std::move(path)), mu_(std::make_unique<std::mutex>()) {}
  int fd_ = -1;
  std::filesystem::path path_;
  std::unique_ptr<std::mutex> mu_;  // movable journal, one lock
};

}  // namespace driftcheck::fuzz
