// `driftcheck worker --backend NAME`: serves a built-in backend over the worker protocol on the descriptors
// driftcheck passed (docs/PROTOCOL.md section 7); what --isolate runs, and how the protocol is tested on CPU
// twins.
#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/external/serve.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace driftcheck::fuzz {

Command add_worker_command(CLI::App& app, const CliContext&) {
  auto* cmd =
      app.add_subcommand("worker", "serve a built-in backend over the worker protocol (what --isolate runs)");
  auto backend = std::make_shared<std::string>();
  cmd->add_option("--backend", *backend, "built-in backend to serve")->required();
  return {cmd, [backend] {
            const Backend* b = registry().find(*backend);
            if (b == nullptr)
              throw UsageError(fmt::format("worker: unknown built-in backend '{}'", *backend));
            return external::serve(*b);
          }};
}

}  // namespace driftcheck::fuzz
