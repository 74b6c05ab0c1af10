// What the process tests check about a campaign directory: its report, its bundles, and whether two campaign
// directories hold the same campaign (the same findings, statistics and bundle bytes).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck_process.hpp"

namespace driftcheck::testing {

inline nlohmann::json report_of(const fs::path& dir) {
  return nlohmann::json::parse(slurp(dir / "report.json"));
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = std::min(text.find('\n', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Names under DIR/findings, sorted.
inline std::vector<std::string> bundle_names(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir / "findings")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The drawn bundles a campaign owes and has not written: per (backend, verdict), the first two findings get
// one (kDrawnBundlesPerClass, fuzz/campaign/include/driftcheck/fuzz/campaign_findings.hpp); the others replay
// from the stream.
inline int missing_drawn_bundles(const nlohmann::json& report) {
  std::map<std::string, std::pair<int, int>> by_class;  // "backend|verdict" -> (findings, bundled)
  for (const auto& f : report.at("findings")) {
    auto& [n, bundled] =
        by_class[f.at("backend").get<std::string>() + "|" + f.at("verdict").get<std::string>()];
    ++n, bundled += !f.at("bundle").get<std::string>().empty();
  }
  int missing = 0;
  for (const auto& [c, counts] : by_class) missing += std::min(counts.first, 2) - counts.second;
  return missing;
}

// Every bundle the campaign owes is on disk (the drawn bundles above and every group's representative), and
// nothing half-written is left in findings/.
inline void expect_every_bundle_written(const fs::path& dir) {
  const auto report = report_of(dir);
  const auto has_bundle = [&dir](const std::string& bundle) {
    for (const char* file : {"case.json", "tensors.bin", "finding.json"})
      if (!fs::exists(dir / bundle / file)) return false;
    return true;
  };
  EXPECT_EQ(missing_drawn_bundles(report), 0) << dir;
  for (const auto& f : report.at("findings")) {
    const std::string bundle = f.at("bundle");
    EXPECT_TRUE(bundle.empty() || has_bundle(bundle)) << f.at("id");
  }
  for (const auto& g : report.at("groups")) {
    EXPECT_TRUE(!g.at("shrunk").get<bool>() || has_bundle(g.at("representative"))) << g.at("id");
  }
  for (const auto& name : bundle_names(dir))
    EXPECT_FALSE(name.ends_with(".tmp") || name.ends_with(".old"))
        << "left behind: " << dir / "findings" / name;
}

inline std::string without(std::string text, const std::string& what) {
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos))
    text.replace(pos, what.size(), "DIR");
  return text;
}

// The findings of a report as comparable rows (timings left out).
inline std::set<std::string> finding_rows(const nlohmann::json& report) {
  std::set<std::string> rows;
  for (const auto& f : report.at("findings"))
    rows.insert(f.at("id").get<std::string>() + " case " + f.at("case_index").dump() + " steps " +
                f.at("shrink_steps").dump() + " " + f.at("bundle").get<std::string>());
  return rows;
}

// `got` holds the same campaign as `ref`: the same cases, per-backend counts and findings, and byte-identical
// bundles (finding.json up to the campaign directory's name in its replay command).
inline void expect_same_campaign(const fs::path& ref, const fs::path& got) {
  const auto a = report_of(ref), b = report_of(got);
  EXPECT_EQ(a.at("cases"), b.at("cases"));
  EXPECT_EQ(a.at("exit_code"), b.at("exit_code"));
  EXPECT_EQ(finding_rows(a), finding_rows(b));
  ASSERT_EQ(a.at("backends").size(), b.at("backends").size());
  for (std::size_t i = 0; i < a.at("backends").size(); ++i)
    for (const char* key : {"name", "cases_run", "passed", "unsupported", "failures_by_verdict"})
      EXPECT_EQ(a.at("backends")[i].at(key), b.at("backends")[i].at(key)) << key;
  ASSERT_EQ(bundle_names(ref), bundle_names(got));
  for (const auto& name : bundle_names(ref)) {
    const auto x = ref / "findings" / name, y = got / "findings" / name;
    EXPECT_EQ(slurp(x / "case.json"), slurp(y / "case.json")) << name;
    EXPECT_EQ(slurp(x / "tensors.bin"), slurp(y / "tensors.bin")) << name;
    EXPECT_EQ(without(slurp(x / "finding.json"), ref.string()),
              without(slurp(y / "finding.json"), got.string()))
        << name;
  }
}

}  // namespace driftcheck::testing
