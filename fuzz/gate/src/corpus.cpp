#include "driftcheck/fuzz/corpus.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/input_error.hpp"
#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/fuzz/sha256.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMarker = "CORPUS.json";
constexpr std::size_t kIdDigits = 16;
constexpr const char* kBundleFiles[] = {"case.json", "tensors.bin", "finding.json"};

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BundleError(fmt::format("cannot read {}", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

[[noreturn]] void fail(const fs::path& where, std::string_view why) {
  throw InputError("corpus", fmt::format("{}: {}", where.string(), why));
}

void check_marker(const fs::path& corpus) {
  const fs::path marker = corpus / kMarker;
  const auto j = nlohmann::json::parse(slurp(marker), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail(marker, fmt::format("not a {} marker", kCorpusFormatName));
  if (const std::string problem = format_problem(j, kCorpusFormatName, kCorpusFormatVersion);
      !problem.empty())
    fail(marker, problem);
}

// True when it created the corpus, false when `corpus` was one already.
bool create_or_check(const fs::path& corpus) {
  if (fs::exists(corpus / kMarker)) {
    check_marker(corpus);
    return false;
  }
  if (fs::exists(corpus) && !fs::is_directory(corpus)) fail(corpus, "not a directory");
  if (fs::exists(corpus) && !fs::is_empty(corpus))
    fail(corpus, fmt::format("not empty and has no {}: not a driftcheck corpus", kMarker));
  fs::create_directories(corpus);
  files::write_file_atomic(
      corpus / kMarker,
      nlohmann::json{{"format", kCorpusFormatName}, {"format_version", kCorpusFormatVersion}}.dump(2) + "\n");
  return true;
}

// What a missing corpus's error offers.
std::string create_hint(const fs::path& corpus) {
  return fmt::format("create one with `driftcheck corpus init {}`", corpus.string());
}

}  // namespace

bool corpus_init(const fs::path& corpus) {
  return create_or_check(corpus);
}

std::string corpus_id(const fs::path& bundle) {
  const auto case_json = nlohmann::json::parse(slurp(bundle / "case.json"), nullptr, false);
  if (case_json.is_discarded() || !case_json.contains("spec"))
    throw BundleError(fmt::format("{}: case.json has no spec", bundle.string()));
  Sha256 h;
  h.update(case_json["spec"].dump());
  h.update(std::string_view("\0", 1));
  h.update(slurp(bundle / "tensors.bin"));
  return h.hex().substr(0, kIdDigits);
}

CorpusAdd corpus_add(const fs::path& corpus, const fs::path& bundle) {
  read_bundle(bundle);  // only whole, valid bundles go in
  create_or_check(corpus);
  CorpusAdd r{corpus_id(bundle), false};
  const fs::path dest = corpus / r.id;
  if (fs::exists(dest)) return r;
  const fs::path tmp = corpus / (r.id + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const char* f : kBundleFiles) fs::copy_file(bundle / f, tmp / f);
  // finding.json is provenance (not part of the address): its replay command now names the entry itself.
  auto finding = nlohmann::json::parse(slurp(tmp / "finding.json"));
  finding["replay"] = fmt::format("driftcheck replay {}", dest.string());
  files::write_file_atomic(tmp / "finding.json", finding.dump(2) + "\n");
  fs::rename(tmp, dest);
  r.added = true;
  return r;
}

CorpusTally add_findings_to_corpus(const reports::Report& campaign, const fs::path& out_dir,
                                   const fs::path& corpus) {
  CorpusTally t;
  // Each group's representative: the shrunk, ablated case of one cause (docs/CAMPAIGN.md).
  for (const auto& g : campaign.groups) {
    if (!g.shrunk || g.representative.empty()) continue;
    (corpus_add(corpus, out_dir / g.representative).added ? t.added : t.present)++;
  }
  return t;
}

std::vector<CorpusEntry> load_corpus(const fs::path& corpus) {
  if (!fs::exists(corpus)) fail(corpus, fmt::format("no such directory ({})", create_hint(corpus)));
  if (!fs::is_directory(corpus)) fail(corpus, "not a directory");
  if (!fs::exists(corpus / kMarker))
    fail(corpus, fmt::format("has no {}: not a driftcheck corpus ({})", kMarker,
                             fs::is_empty(corpus) ? create_hint(corpus)
                                                  : "`driftcheck corpus init DIR` creates one in a new or "
                                                    "empty directory"));
  check_marker(corpus);
  std::vector<CorpusEntry> out;
  for (const auto& d : fs::directory_iterator(corpus)) {
    const std::string name = d.path().filename().string();
    if (!d.is_directory() || name.ends_with(".tmp")) continue;  // .tmp: an add that was killed half-way
    try {
      const std::string id = corpus_id(d.path());
      if (id != name)
        fail(d.path(),
             fmt::format("content does not match its address (SHA-256 prefix {}): edited or corrupted", id));
      Bundle b = read_bundle(d.path());
      const std::string backend = b.finding.value("backend", ""), verdict = b.finding.value("verdict", "");
      out.push_back({id, d.path(), std::move(b), backend, verdict});
    } catch (const BundleError& e) {
      fail(d.path(), e.what());
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

}  // namespace driftcheck::fuzz
