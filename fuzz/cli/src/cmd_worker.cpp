// `driftcheck worker --backend NAME`: serves a built-in backend over the worker protocol on the descriptors
// driftcheck passed (docs/PROTOCOL.md section 7); what --isolate runs, and how the protocol is tested on CPU
// twins.
#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/device/plugin_backend.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/external/serve.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace driftcheck::fuzz {

Command add_worker_command(CLI::App& app, const CliContext&) {
  auto* cmd =
      app.add_subcommand("worker", "serve a built-in backend over the worker protocol (what --isolate runs)");
  auto backend = std::make_shared<std::string>();
  cmd->add_option("--backend", *backend, "backend to serve")->required();
  // What --isolate passes for a C plugin: the parent's backends files and plugins (not DRIFTCHECK_BACKENDS'
  // files, which a worker for a built-in must not load, or fail on).
  auto files = std::make_shared<std::vector<std::string>>(),
       plugins = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--backends", *files, "backends file to register first (repeatable)");
  cmd->add_option("--plugin", *plugins, "C plugin to register first (repeatable)");
  return {cmd, [backend, files, plugins] {
            external::register_backends_files(extend_registry(), *files);
            for (const auto& p : *plugins) extend_registry().add(load_plugin(p));
            const Backend* b = registry().find(*backend);
            if (b == nullptr) throw UsageError(fmt::format("worker: unknown backend '{}'", *backend));
            return external::serve(*b);
          }};
}

}  // namespace driftcheck::fuzz
