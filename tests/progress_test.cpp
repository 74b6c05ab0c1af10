// The progress component every long command uses (fuzz/base/include/driftcheck/fuzz/progress.hpp): which mode
// a terminal, a log, NO_COLOR, TERM=dumb and --quiet get; what a bar, a line and a JSON record say (rate,
// ETA); and that short work in a log prints one final line, a bar ends its line, and `none` prints nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/progress.hpp"

namespace driftcheck::fuzz {
namespace {

TEST(Progress, ModeFollowsTheTerminalNoColorTermAndQuiet) {
  const auto auto_mode = [](bool tty, const char* no_color, const char* term) {
    return ProgressStyle::resolve(ProgressMode::kAuto, false, tty, no_color, term);
  };
  EXPECT_EQ(auto_mode(true, nullptr, "xterm").mode, ProgressMode::kBar);
  EXPECT_TRUE(auto_mode(true, nullptr, "xterm").color);
  EXPECT_FALSE(auto_mode(true, "1", "xterm").color) << "NO_COLOR set";
  EXPECT_TRUE(auto_mode(true, "", "xterm").color) << "NO_COLOR present but empty does not count";
  EXPECT_EQ(auto_mode(true, nullptr, "dumb").mode, ProgressMode::kLines);
  EXPECT_EQ(auto_mode(false, nullptr, "xterm").mode, ProgressMode::kLines);
  EXPECT_FALSE(auto_mode(false, nullptr, "xterm").color);
  EXPECT_EQ(ProgressStyle::resolve(ProgressMode::kJson, false, true, nullptr, nullptr).mode,
            ProgressMode::kJson);
  EXPECT_EQ(ProgressStyle::resolve(ProgressMode::kBar, true, true, nullptr, nullptr).mode,
            ProgressMode::kNone)
      << "--quiet wins";
  ProgressMode m;
  EXPECT_TRUE(parse_progress_mode("json", &m));
  EXPECT_EQ(m, ProgressMode::kJson);
  EXPECT_FALSE(parse_progress_mode("fancy", &m));
}

ProgressStyle style(ProgressMode mode, bool color = false) {
  ProgressStyle s;
  s.mode = mode, s.color = color;
  return s;
}

TEST(Progress, ABarShowsFractionCountRateAndEta) {
  const Progress bar(nullptr, style(ProgressMode::kBar), "fuzz", "cases", {200.0, std::nullopt});
  const std::string s = bar.render_text(50, "findings 3", 10.0);
  EXPECT_NE(s.find("fuzz [======>"), std::string::npos) << s;
  EXPECT_NE(s.find(" 25%"), std::string::npos) << s;
  EXPECT_NE(s.find("50 cases of 200"), std::string::npos) << s;
  EXPECT_NE(s.find("5 cases/s"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA 30 s"), std::string::npos) << "150 cases at 5/s" << s;
  EXPECT_NE(s.find("findings 3"), std::string::npos);
  EXPECT_EQ(s.find('\033'), std::string::npos) << "no colour unless asked";
  const Progress coloured(nullptr, style(ProgressMode::kBar, true), "fuzz", "cases", {200.0, std::nullopt});
  EXPECT_NE(coloured.render_text(50, "", 10.0).find("\033[36m"), std::string::npos);
  // A time budget: the fraction and ETA follow the clock, the rate the units.
  const Progress timed(nullptr, style(ProgressMode::kLines), "fuzz", "cases", {std::nullopt, 60.0});
  const std::string t = timed.render_text(1000, "", 15.0);
  EXPECT_NE(t.find(" 25%"), std::string::npos) << t;
  EXPECT_NE(t.find("ETA 45 s"), std::string::npos) << t;
  EXPECT_NE(t.find("66.7 cases/s"), std::string::npos) << t;
}

TEST(Progress, JsonRecordsCarryEveryNumber) {
  const Progress p(nullptr, style(ProgressMode::kJson), "accept", "positions", {512.0, std::nullopt});
  const auto j = nlohmann::json::parse(p.render_json(128, "x", 4.0, false));
  EXPECT_EQ(j.at("type"), "progress");
  EXPECT_EQ(j.at("task"), "accept");
  EXPECT_DOUBLE_EQ(j.at("done").get<double>(), 128);
  EXPECT_DOUBLE_EQ(j.at("total").get<double>(), 512);
  EXPECT_DOUBLE_EQ(j.at("fraction").get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j.at("rate").get<double>(), 32);
  EXPECT_DOUBLE_EQ(j.at("eta_s").get<double>(), 12);
  EXPECT_TRUE(j.at("budget_s").is_null());
  EXPECT_EQ(nlohmann::json::parse(p.render_json(512, "", 16.0, true)).at("type"), "progress_end");
}

TEST(Progress, ShortWorkInALogPrintsOneFinalLineAndQuietPrintsNothing) {
  std::ostringstream log;
  {
    Progress p(&log, style(ProgressMode::kLines), "report", "directories", {3.0, std::nullopt});
    for (int i = 1; i <= 3; ++i) p.update(i);
    p.finish(3);
    p.finish(3);  // idempotent
  }
  const std::string text = log.str();
  EXPECT_EQ(text.rfind("report: 100%  3 directories of 3", 0), 0u) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  std::ostringstream none;
  {
    Progress p(&none, style(ProgressMode::kNone), "fuzz", "cases", {});
    p.update(1);
    p.finish(1);
  }
  EXPECT_TRUE(none.str().empty());
  // A bar redraws in place and ends its line, even when the work stops without finish().
  std::ostringstream term;
  {
    Progress p(&term, style(ProgressMode::kBar), "fuzz", "cases", {10.0, std::nullopt});
    p.update(1);
  }
  EXPECT_EQ(term.str().rfind("\r\033[K", 0), 0u);
  EXPECT_EQ(term.str().back(), '\n');
}

}  // namespace
}  // namespace driftcheck::fuzz
