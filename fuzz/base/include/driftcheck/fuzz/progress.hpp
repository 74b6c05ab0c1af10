// Progress of long work (campaigns, gates, `accept`, `report`): one component every command uses, so that all
// of them look and behave the same.
//   bar   : a line refreshed in place on a terminal: bar, percentage, count, rate, ETA and a short note;
//   lines : a plain line every `line_interval_s` seconds (logs, CI), and one at the end;
//   json  : one JSON object per line, at most one a second, for machines (docs/CAMPAIGN.md "Progress");
//   none  : nothing (--quiet).
// `auto` resolves to bar on a terminal and lines elsewhere. Colour only in bar mode, never when NO_COLOR is
// set (https://no-color.org) or TERM is dumb.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace driftcheck::fuzz {

enum class ProgressMode : std::uint8_t { kAuto, kBar, kLines, kJson, kNone };
bool parse_progress_mode(std::string_view name, ProgressMode* out);  // auto, bar, lines, json, none

struct ProgressStyle {
  ProgressMode mode = ProgressMode::kLines;  // never kAuto once resolved
  bool color = false;
  double line_interval_s = 10.0;

  // `requested` from --progress, `quiet` from --quiet (wins), `is_tty` for the stream progress goes to, and
  // the NO_COLOR and TERM environment variables (nullptr when unset).
  static ProgressStyle resolve(ProgressMode requested, bool quiet, bool is_tty, const char* no_color,
                               const char* term);
  // The same, reading NO_COLOR and TERM from the environment.
  static ProgressStyle from_environment(ProgressMode requested, bool quiet, bool is_tty);
};

// What the work aims at: a number of units (cases, positions, findings), or a time budget in seconds (a
// `--seconds` campaign: the fraction and ETA follow the clock while the count and rate follow the units).
struct ProgressGoal {
  std::optional<double> units;
  std::optional<double> seconds;
};

class Progress {
 public:
  // `out` may be nullptr (nothing is written). `task` names the work ("fuzz", "accept"), `unit` its units.
  Progress(std::ostream* out, ProgressStyle style, std::string task, std::string unit, ProgressGoal goal);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Thread-safe and cheap: renders only when its mode's interval has passed. `note` is a short status
  // ("findings 3"); `alert` colours it (something failed).
  void update(double done, std::string_view note = {}, bool alert = false);
  // Renders the final state once (bar: ends the line; lines/json: a last record). Idempotent.
  void finish(double done, std::string_view note = {}, bool alert = false);

  // The line the bar or lines mode would print now (tests).
  std::string render_text(double done, std::string_view note, double elapsed_s) const;
  std::string render_json(double done, std::string_view note, double elapsed_s, bool final) const;

 private:
  void emit(double done, std::string_view note, bool alert, bool final);
  std::optional<double> fraction(double done, double elapsed_s) const;
  std::optional<double> eta_s(double done, double elapsed_s) const;

  std::ostream* out_;
  ProgressStyle style_;
  std::string task_;
  std::string unit_;
  ProgressGoal goal_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  double last_emit_s_;
  bool finished_ = false;
  bool bar_drawn_ = false;
};

// "1:02:03", "4:05", "7 s": short durations for progress lines.
std::string format_duration(double seconds);

}  // namespace driftcheck::fuzz
