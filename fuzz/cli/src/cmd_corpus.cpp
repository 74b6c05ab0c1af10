// `driftcheck corpus init DIR` and `driftcheck corpus add BUNDLE...` (docs/GATE.md).
#include <memory>
#include <ostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/corpus.hpp"
#include "driftcheck/fuzz/gate_config.hpp"

namespace driftcheck::fuzz {
namespace {

struct CorpusArgs {
  std::vector<std::string> bundles;
  std::string corpus;
  std::string config;
};

// The corpus directory: --corpus DIR (or init's DIR), or the gate configuration's gate.corpus.
std::filesystem::path corpus_dir(const CorpusArgs& a) {
  if (a.config.empty()) return a.corpus;
  const GateConfig c = load_gate_config(a.config);
  if (!c.corpus) throw UsageError(fmt::format("{} names no corpus (gate.corpus)", a.config));
  return *c.corpus;
}

int corpus_init_command(const CorpusArgs& a, std::ostream& out) {
  const std::filesystem::path dir = corpus_dir(a);
  const bool created = corpus_init(dir);
  out << fmt::format(
      "{} {}: {}\n", created ? "created" : "present", dir.string(),
      created ? "an empty regression corpus (add cases with `driftcheck corpus add` or `driftcheck "
                "fuzz --corpus`)"
              : "already a driftcheck corpus, left as it is");
  return 0;
}

int corpus_add_command(const CorpusArgs& a, std::ostream& out) {
  const std::filesystem::path dir = corpus_dir(a);
  for (const auto& b : a.bundles) {
    const CorpusAdd r = corpus_add(dir, b);
    out << fmt::format("{} {} {}\n", r.added ? "added" : "present", (dir / r.id).string(), b);
  }
  return 0;
}

}  // namespace

Command add_corpus_command(CLI::App& app, const CliContext& ctx) {
  auto* cmd = app.add_subcommand("corpus", "the regression corpus the gate re-runs");
  cmd->require_subcommand(1);
  auto* init =
      cmd->add_subcommand("init", "create an empty corpus (a new or empty directory and its CORPUS.json)");
  auto i = std::make_shared<CorpusArgs>();
  auto* init_dir = init->add_option("dir", i->corpus, "corpus directory to create")->check(non_empty());
  auto* init_config =
      init->add_option("--config", i->config, "gate configuration whose gate.corpus to create")
          ->check(non_empty());
  init_dir->excludes(init_config);
  auto* add =
      cmd->add_subcommand("add", "add repro bundles (content-addressed: a case already there is kept once)");
  auto a = std::make_shared<CorpusArgs>();
  add->add_option("bundle", a->bundles, "repro bundle directories (DIR/findings/<id>)")->required();
  auto* dir = add->add_option("--corpus", a->corpus, "corpus directory");
  auto* config = add->add_option("--config", a->config, "gate configuration whose gate.corpus to add to");
  dir->excludes(config);
  return {cmd, [a, dir, config, init, i, init_dir, init_config, &ctx] {
            if (init->parsed()) {
              if (init_dir->count() == 0 && init_config->count() == 0)
                throw UsageError("corpus init needs a DIR or --config FILE");
              return corpus_init_command(*i, ctx.out);
            }
            if (dir->count() == 0 && config->count() == 0)
              throw UsageError("corpus add needs --corpus DIR or --config FILE");
            return corpus_add_command(*a, ctx.out);
          }};
}

}  // namespace driftcheck::fuzz
