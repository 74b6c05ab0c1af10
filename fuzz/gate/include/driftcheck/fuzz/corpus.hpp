// The regression corpus: minimal repro cases kept in a directory of the user's repository, content-addressed
// so that the same case added twice is one entry and an edited or corrupted entry is noticed. Every entry is
// a repro bundle (bundle.hpp), so `driftcheck replay DIR/<id>` runs it; the gate re-runs all of them on every
// backend of their op. Layout (docs/GATE.md):
//   DIR/CORPUS.json   {"format": "driftcheck.corpus", "format_version": 1}
//   DIR/<id>/         case.json, tensors.bin, finding.json (the finding it came from)
// <id> is the first 16 hex digits of SHA-256(spec JSON of case.json, a zero byte, tensors.bin): the case's
// content, not where or when it was found.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {

inline constexpr std::string_view kCorpusFormatName = "driftcheck.corpus";
inline constexpr int kCorpusFormatVersion = 1;

struct CorpusEntry {
  std::string id;
  std::filesystem::path dir;
  Bundle bundle;
  std::string origin_backend;  // the backend of the finding it came from (a mutant's entries must fail on it)
  std::string origin_verdict;
};

struct CorpusAdd {
  std::string id;
  bool added = false;  // false: an entry with this content was there already
};

// Copies a bundle into the corpus (created with its CORPUS.json when missing), atomically. Throws BundleError
// for a bad bundle, InputError("corpus", ...) for a directory that is not a corpus of this version.
CorpusAdd corpus_add(const std::filesystem::path& corpus, const std::filesystem::path& bundle);

// `driftcheck corpus init DIR`: an empty corpus (DIR and its CORPUS.json); true when created, false when DIR
// is a corpus already (left as it is). Throws InputError("corpus", ...) for a file, a non-empty directory
// that is not a corpus, or a corpus of another version.
bool corpus_init(const std::filesystem::path& corpus);

// `driftcheck fuzz --corpus DIR`: adds the representative (shrunk) bundle of every finding group of a
// campaign written to `out_dir`.
struct CorpusTally {
  std::size_t added = 0, present = 0;
};
CorpusTally add_findings_to_corpus(const reports::Report& campaign, const std::filesystem::path& out_dir,
                                   const std::filesystem::path& corpus);

// Every entry, sorted by id. Throws InputError("corpus", "DIR/...: problem") for a missing directory or
// marker (the message offers `driftcheck corpus init DIR`), another format version, an entry whose content
// does not match its id, or an unreadable bundle.
std::vector<CorpusEntry> load_corpus(const std::filesystem::path& corpus);

// The content address of a bundle directory.
std::string corpus_id(const std::filesystem::path& bundle);

}  // namespace driftcheck::fuzz
