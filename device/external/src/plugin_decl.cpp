// ext.<name> declared with `plugin = "path.so"`: a C plugin (driftcheck/plugin.h, docs/PLUGIN.md) loaded in
// process, with the backends file's name, description, configuration string, static supports and, when given,
// numerics (which must equal the plugin's own declaration).
#include <fmt/format.h>

#include "driftcheck/device/plugin_backend.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "worker_backend.hpp"

namespace driftcheck::external {

std::unique_ptr<Backend> make_plugin_backend(const BackendDecl& d) {
  PluginOptions o;
  o.name = d.name, o.config = d.plugin_config, o.description = d.description, o.origin = d.origin();
  o.backends_file = d.file;
  o.twin = d.twin, o.compile_set = d.compile_set;
  if (!d.numerics_source.empty()) o.numerics = d.numerics;
  const std::string who = fmt::format("{} ({})", d.name, d.origin());
  o.static_supports = [supports = d.supports, who](const Case& c) { return supports.check(c, who); };
  o.static_supports_summary =
      fmt::format("{}", fmt::join(d.supports.parts(), "; "));  // the plugin adds its own
  std::unique_ptr<Backend> b;
  try {
    b = load_plugin(*d.plugin, o);
  } catch (const PluginError& e) {
    throw BackendFileError(fmt::format("{}: {}: {}", d.origin(), d.name, e.what()));
  }
  if (b->op() != d.op)
    throw BackendFileError(fmt::format("{}: {}: the plugin runs {}, the file says {}", d.origin(), d.name,
                                       op_name(b->op()), op_name(d.op)));
  return b;
}

}  // namespace driftcheck::external
