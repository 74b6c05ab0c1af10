#include "driftcheck/fuzz/journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace driftcheck::fuzz {
namespace {

std::string sys_error(std::string_view what, const std::filesystem::path& p) {
  return fmt::format("{} {}: {}", what, p.string(), std::strerror(errno));
}

void check_header(const nlohmann::json& h, const std::filesystem::path& path) {
  if (!h.is_object() || h.value("type", "") != "header" || h.value("format", "") != kJournalFormatName)
    throw JournalError(fmt::format("{}: first line is not a driftcheck journal header", path.string()));
  const int version = h.value("format_version", 0);
  if (version != kJournalFormatVersion)
    throw JournalError(fmt::format("{}: journal format version {} (this driftcheck reads {})", path.string(),
                                   version, kJournalFormatVersion));
}

// Byte length of the complete lines of the file (everything up to and including its last newline).
std::uintmax_t complete_prefix(const std::string& text) {
  const auto pos = text.rfind('\n');
  return pos == std::string::npos ? 0 : pos + 1;
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw JournalError(sys_error("cannot read journal", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

JournalContents read_journal(const std::filesystem::path& path) {
  const std::string text = slurp(path);
  JournalContents out;
  std::istringstream lines(text);
  std::string line;
  std::size_t line_no = 0;
  const std::uintmax_t complete = complete_prefix(text);
  std::uintmax_t consumed = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    consumed += line.size() + 1;
    const bool last_unterminated = consumed > complete;
    // A kill mid-write leaves a partial last line without its newline. It is dropped even when it happens to
    // parse, because reopen() cuts it off the file too; the cases behind it are above the last checkpoint and
    // run again on resume.
    if (last_unterminated) {
      out.torn_tail = true;
      break;
    }
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      throw JournalError(fmt::format("{}:{}: not a JSON object", path.string(), line_no));
    out.records.push_back(std::move(j));
  }
  if (out.records.empty()) throw JournalError(fmt::format("{}: empty journal", path.string()));
  check_header(out.records.front(), path);
  return out;
}

Journal Journal::create(const std::filesystem::path& path, nlohmann::json header) {
  header["type"] = "header";
  header["format"] = kJournalFormatName;
  header["format_version"] = kJournalFormatVersion;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw JournalError(sys_error("cannot create journal", path));
  Journal j(fd, path);
  j.append(header);
  return j;
}

Journal Journal::reopen(const std::filesystem::path& path) {
  const std::string text = slurp(path);
  const auto keep = complete_prefix(text);
  if (keep != text.size()) {
    std::error_code ec;
    std::filesystem::resize_file(path, keep, ec);
    if (ec)
      throw JournalError(fmt::format("cannot cut the torn tail of {}: {}", path.string(), ec.message()));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) throw JournalError(sys_error("cannot open journal", path));
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
  // One write() per line: with O_APPEND the line lands whole or (if killed inside the call) as a torn tail
  // that read_journal() drops; user-space buffering could lose several records instead.
  const std::string line = record.dump() + "\n";
  std::lock_guard lock(*mu_);
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw JournalError(sys_error("cannot append to journal", path_));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace driftcheck::fuzz
