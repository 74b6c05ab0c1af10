// `driftcheck corpus add BUNDLE...` (docs/GATE.md).
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

int corpus_add_command(const CorpusArgs& a, std::ostream& out) {
  std::filesystem::path dir = a.corpus;
  if (!a.config.empty()) {
    const GateConfig c = load_gate_config(a.config);
    if (!c.corpus) throw UsageError(fmt::format("{} names no corpus (gate.corpus)", a.config));
    dir = *c.corpus;
  }
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
  auto* add =
      cmd->add_subcommand("add", "add repro bundles (content-addressed: a case already there is kept once)");
  auto a = std::make_shared<CorpusArgs>();
  add->add_option("bundle", a->bundles, "repro bundle directories (DIR/findings/<id>)")->required();
  auto* dir = add->add_option("--corpus", a->corpus, "corpus directory");
  auto* config = add->add_option("--config", a->config, "gate configuration whose gate.corpus to add to");
  dir->excludes(config);
  return {cmd, [a, dir, config, &ctx] {
            if (dir->count() == 0 && config->count() == 0)
              throw UsageError("corpus add needs --corpus DIR or --config FILE");
            return corpus_add_command(*a, ctx.out);
          }};
}

}  // namespace driftcheck::fuzz
