// The campaign journal: DIR/journal.jsonl, one JSON object per line, appended and handed to the kernel with
// one write() per record, so a killed campaign loses at most the record being written. The header line is
// written atomically with the file (temp file + link), so a journal is never without its header. Reading
// tolerates a torn last line (the kill landed mid-write) and cuts it off before appending again; a malformed
// line anywhere else means the file is not a journal and is rejected.
//
// Records ("type" field): "header" (format, format_version, campaign arguments) first and only first, then
// any of "finding" (a failing case as soon as it is seen), "bundle" (the finding's repro bundle was written),
// "progress" (checkpoint: every case below `completed` is done, and the statistics of those cases), "end".
// The campaign reads the records' fields (campaign_journal.cpp); this file knows lines and the header.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/errors.hpp"

namespace driftcheck::fuzz {

inline constexpr int kJournalFormatVersion = 1;
inline constexpr std::string_view kJournalFormatName = "driftcheck.journal";

struct JournalContents {
  std::vector<nlohmann::json> records;  // header first; record i is line i + 1; empty: nothing was recorded
  bool torn_tail = false;               // a partial last line was dropped
};

// Parses a journal's text; `name` (the file) prefixes errors. Throws JournalError naming the line when a
// complete line is not a JSON object with a string "type", when the first record is not a header of a known
// format version, or when a later record is a header (two journals concatenated). Text without one complete
// line (an empty file, or a header torn by a kill) gives no records.
JournalContents parse_journal(std::string_view text, const std::string& name);
// parse_journal of the file; JournalError when it cannot be read.
JournalContents read_journal(const std::filesystem::path& path);

class Journal {
 public:
  // Creates the file with `header` (format and version added) as its first line, atomically: the file appears
  // whole with its header or not at all. Throws JournalError if the file exists, std::system_error when it
  // cannot be written.
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
  // interleave. Throws std::system_error naming the file when the write fails (disk full).
  void append(const nlohmann::json& record);

 private:
  explicit Journal(int fd, std::filesystem::path path)
      : fd_(fd), path_(std::move(path)), mu_(std::make_unique<std::mutex>()) {}
  int fd_ = -1;
  std::filesystem::path path_;
  std::unique_ptr<std::mutex> mu_;  // movable journal, one lock
};

}  // namespace driftcheck::fuzz
