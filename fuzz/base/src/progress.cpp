#include "driftcheck/fuzz/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace driftcheck::fuzz {
namespace {

constexpr int kBarWidth = 24;
constexpr double kBarInterval = 0.1;   // a terminal redraw ten times a second is smooth and cheap
constexpr double kJsonInterval = 1.0;  // machines poll; one record a second is plenty

// Counts print as integers when they are; rates with a few significant digits.
std::string count_text(double v) {
  return v == std::floor(v) && std::abs(v) < 1e15 ? fmt::format("{}", static_cast<std::int64_t>(v))
                                                  : fmt::format("{:.3g}", v);
}

std::string rate_text(double r) {
  return r >= 100 ? fmt::format("{:.0f}", r) : fmt::format("{:.3g}", r);
}

}  // namespace

bool parse_progress_mode(std::string_view name, ProgressMode* out) {
  static constexpr std::pair<std::string_view, ProgressMode> kModes[] = {{"auto", ProgressMode::kAuto},
                                                                         {"bar", ProgressMode::kBar},
                                                                         {"lines", ProgressMode::kLines},
                                                                         {"json", ProgressMode::kJson},
                                                                         {"none", ProgressMode::kNone}};
  for (const auto& [n, m] : kModes) {
    if (n == name) {
      *out = m;
      return true;
    }
  }
  return false;
}

ProgressStyle ProgressStyle::resolve(ProgressMode requested, bool quiet, bool is_tty, const char* no_color,
                                     const char* term) {
  ProgressStyle s;
  const bool dumb = term != nullptr && std::string_view(term) == "dumb";
  if (quiet)
    s.mode = ProgressMode::kNone;
  else if (requested == ProgressMode::kAuto)
    s.mode = is_tty && !dumb ? ProgressMode::kBar : ProgressMode::kLines;
  else
    s.mode = requested;
  // NO_COLOR: "when present and not an empty string" (no-color.org).
  s.color = s.mode == ProgressMode::kBar && is_tty && !dumb && (no_color == nullptr || *no_color == '\0');
  return s;
}

ProgressStyle ProgressStyle::from_environment(ProgressMode requested, bool quiet, bool is_tty) {
  return resolve(requested, quiet, is_tty, std::getenv("NO_COLOR"), std::getenv("TERM"));
}

Progress::Progress(std::ostream* out, ProgressStyle style, std::string task, std::string unit,
                   ProgressGoal goal)
    : out_(style.mode == ProgressMode::kNone ? nullptr : out),
      style_(style),
      task_(std::move(task)),
      unit_(std::move(unit)),
      goal_(goal),
      start_(std::chrono::steady_clock::now()),
      // A bar draws at once; a log line or a JSON record only once an interval has passed (short work prints
      // just its final line).
      last_emit_s_(style.mode == ProgressMode::kBar ? -1e9 : 0.0) {}

Progress::~Progress() {
  // A bar left mid-line would glue the next message to it.
  std::lock_guard lock(mu_);
  if (out_ != nullptr && bar_drawn_ && !finished_) *out_ << "\n" << std::flush;
}

std::optional<double> Progress::fraction(double done, double elapsed_s) const {
  if (goal_.units && *goal_.units > 0) return std::clamp(done / *goal_.units, 0.0, 1.0);
  if (goal_.seconds && *goal_.seconds > 0) return std::clamp(elapsed_s / *goal_.seconds, 0.0, 1.0);
  return std::nullopt;
}

std::optional<double> Progress::eta_s(double done, double elapsed_s) const {
  if (goal_.units && *goal_.units > 0) {
    if (done <= 0 || elapsed_s <= 0) return std::nullopt;
    return std::max(0.0, (*goal_.units - done) / (done / elapsed_s));
  }
  if (goal_.seconds) return std::max(0.0, *goal_.seconds - elapsed_s);
  return std::nullopt;
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const auto s = static_cast<std::int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}

std::string Progress::render_text(double done, std::string_view note, double elapsed_s) const {
  const auto frac = fraction(done, elapsed_s);
  const auto eta = eta_s(done, elapsed_s);
  const double rate = elapsed_s > 0 ? done / elapsed_s : 0;
  std::string s = task_;
  if (style_.mode == ProgressMode::kBar && frac) {
    const int filled = static_cast<int>(std::floor(*frac * kBarWidth));
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < kBarWidth) bar += '>' + std::string(static_cast<std::size_t>(kBarWidth - filled - 1), ' ');
    s += fmt::format(" [{}{}{}]", style_.color ? "\033[36m" : "", bar, style_.color ? "\033[0m" : "");
  } else {
    s += ":";
  }
  if (frac) s += fmt::format(" {:3.0f}%", 100 * *frac);
  s += fmt::format("  {} {}", count_text(done), unit_);
  if (goal_.units) s += fmt::format(" of {}", count_text(*goal_.units));
  s += fmt::format("  {} {}/s  {} elapsed", rate_text(rate), unit_, format_duration(elapsed_s));
  if (eta) s += fmt::format("  ETA {}", format_duration(*eta));
  if (!note.empty()) s += fmt::format("  {}", note);
  return s;
}

std::string Progress::render_json(double done, std::string_view note, double elapsed_s, bool final) const {
  const auto num = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"type", final ? "progress_end" : "progress"},
                      {"task", task_},
                      {"unit", unit_},
                      {"done", done},
                      {"total", num(goal_.units)},
                      {"budget_s", num(goal_.seconds)},
                      {"fraction", num(fraction(done, elapsed_s))},
                      {"rate", elapsed_s > 0 ? done / elapsed_s : 0.0},
                      {"elapsed_s", elapsed_s},
                      {"eta_s", num(eta_s(done, elapsed_s))},
                      {"note", note}};
  return j.dump();
}

void Progress::emit(double done, std::string_view note, bool alert, bool final) {
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double interval = style_.mode == ProgressMode::kBar    ? kBarInterval
                          : style_.mode == ProgressMode::kJson ? kJsonInterval
                                                               : style_.line_interval_s;
  if (!final && t - last_emit_s_ < interval) return;
  last_emit_s_ = t;
  std::string line;
  if (style_.mode == ProgressMode::kJson) {
    line = render_json(done, note, t, final) + "\n";
  } else {
    std::string text = render_text(done, note, t);
    if (alert && style_.color && !note.empty()) {
      const auto at = text.rfind(note);
      text.replace(at, note.size(), fmt::format("\033[1;31m{}\033[0m", note));
    }
    line = style_.mode == ProgressMode::kBar ? fmt::format("\r\033[K{}{}", text, final ? "\n" : "")
                                             : text + "\n";
    bar_drawn_ = style_.mode == ProgressMode::kBar && !final;
  }
  *out_ << line << std::flush;
}

void Progress::update(double done, std::string_view note, bool alert) {
  if (out_ == nullptr) return;
  std::lock_guard lock(mu_);
  if (finished_) return;
  emit(done, note, alert, false);
}

void Progress::finish(double done, std::string_view note, bool alert) {
  if (out_ == nullptr) return;
  std::lock_guard lock(mu_);
  if (finished_) return;
  finished_ = true;
  emit(done, note, alert, true);
}

}  // namespace driftcheck::fuzz
