#include "driftcheck/fuzz/journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "driftcheck/files/file_io.hpp"
#include "driftcheck/files/json_text.hpp"
#include "driftcheck/fuzz/json_fields.hpp"

namespace driftcheck::fuzz {
namespace {

void check_header(const nlohmann::json& h, const std::string& name) {
  if (h.at("type") != "header")  // parse_journal checked that "type" is a string
    throw JournalError(fmt::format("{}:1: first line is not a driftcheck journal header", name));
  if (const std::string problem = format_problem(h, kJournalFormatName, kJournalFormatVersion);
      !problem.empty())
    throw JournalError(fmt::format("{}:1: journal {}", name, problem));
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  if (in) ss << in.rdbuf();
  if (!in || in.bad())
    throw JournalError(fmt::format("cannot read journal {}: {}", path.string(), std::strerror(errno)));
  return ss.str();
}

}  // namespace

JournalContents parse_journal(std::string_view text, const std::string& name) {
  JournalContents out;
  std::size_t line_no = 0, start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    // A kill mid-write leaves a partial last line without its newline. It is dropped even when it happens to
    // parse, because reopen() cuts it off the file too; the cases behind it are above the last checkpoint and
    // run again on resume.
    if (end == std::string_view::npos) {
      out.torn_tail = true;
      break;
    }
    ++line_no;
    auto j = nlohmann::json::parse(text.substr(start, end - start), nullptr, /*allow_exceptions=*/false);
    start = end + 1;
    if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j.at("type").is_string())
      throw JournalError(
          fmt::format("{}:{}: not a journal record (a JSON object with a \"type\")", name, line_no));
    if (line_no == 1) check_header(j, name);
    if (line_no > 1 && j.at("type") == "header")
      throw JournalError(fmt::format("{}:{}: a second header (two journals concatenated?)", name, line_no));
    out.records.push_back(std::move(j));
  }
  return out;
}

JournalContents read_journal(const std::filesystem::path& path) {
  return parse_journal(slurp(path), path.string());
}

Journal Journal::create(const std::filesystem::path& path, nlohmann::json header) {
  header["type"] = "header";
  header["format"] = kJournalFormatName;
  header["format_version"] = kJournalFormatVersion;
  // The header goes into a temp file that is then linked under the final name: link() never replaces an
  // existing journal, and a kill leaves either no journal or one with its whole header. The descriptor stays
  // open for appending: after link() it is the journal's.
  const std::filesystem::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) files::throw_io_error(errno, "cannot create journal", tmp);
  try {
    files::write_all(fd, files::json_text(header) + "\n", tmp);
    if (::fsync(fd) != 0) files::throw_io_error(errno, "cannot write", tmp);
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      if (errno == EEXIST) throw JournalError(fmt::format("{} exists already", path.string()));
      files::throw_io_error(errno, "cannot create journal", path);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::unlink(tmp.c_str());
  return Journal(fd, path);
}

Journal Journal::reopen(const std::filesystem::path& path) {
  const std::string text = slurp(path);
  const auto keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (keep != text.size()) {
    std::error_code ec;
    std::filesystem::resize_file(path, keep, ec);
    if (ec) files::throw_io_error(ec.value(), "cannot cut the torn tail of", path);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) files::throw_io_error(errno, "cannot open journal", path);
  return Journal(fd, path);
}

Journal::Journal(Journal&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), mu_(std::move(other.mu_)) {
  other.fd_ = -1;
}

Journal& Journal::operator=(Journal&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    mu_ = std::move(other.mu_);
    other.fd_ = -1;
  }
  return *this;
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

void Journal::append(const nlohmann::json& record) {
  // One write() per line: with O_APPEND the line lands whole or (if killed inside the call, or on a full
  // disk) as a torn tail that read_journal() drops; user-space buffering could lose several records instead.
  const std::string line = files::json_text(record) + "\n";
  std::lock_guard lock(*mu_);
  if (fd_ < 0) files::throw_io_error(EIO, "an earlier write failed, no more records go to", path_);
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  try {
    files::write_all(fd_, line, path_);
  } catch (...) {
    // A partial line (disk full) is cut off again, so that a later record cannot glue onto it and leave a
    // malformed line in the middle of the journal; if even that fails, this journal takes no more records.
    if (size < 0 || ::ftruncate(fd_, size) != 0) ::close(fd_), fd_ = -1;
    throw;
  }
}

}  // namespace driftcheck::fuzz
