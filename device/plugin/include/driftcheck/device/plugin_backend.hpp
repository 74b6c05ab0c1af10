// Backends from C plugins (driftcheck/plugin.h, docs/PLUGIN.md): a shared library loaded with dlopen,
// declared in a backends file (`plugin = "path.so"`) or given with `--plugin PATH`, and then a registry entry
// like any other. The plugin runs in this process, on the case's storages handed over whole.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/plugin.h"

namespace driftcheck {

// A plugin that cannot be loaded or is malformed (missing entry point, another ABI version, a null function,
// an unknown op, create() failing, numerics that disagree with the backends file): "plugin PATH: problem",
// one line (exit 2).
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PluginOptions {
  std::string name;         // registry name; empty: "plugin.<the plugin's name>"
  std::string config;       // handed to the plugin's create() (a backends file's plugin_config)
  std::string description;  // empty: the plugin's own
  std::string origin;       // where it was declared ("backends.toml:12"), for `driftcheck list`
  // The backends file that declares it (`plugin = "x.so"`); empty for a plugin loaded with --plugin, which
  // the plugin's own path defines (Backend::definition).
  std::filesystem::path backends_file;
  std::string twin;     // the CPU twin that models the plugin's kernel (Backend::twin), or empty
  int compile_set = 0;  // a backends file's `compile_set` (Backend::compile_set)
  // A backends file's numerics: when given they must equal the plugin's declaration (a file cannot widen a
  // plugin's tolerance behind its back, nor the plugin the file's).
  std::optional<Numerics> numerics;
  // Checked before the plugin's supports() (a backends file's static supports); empty: none.
  std::function<Support(const Case&)> static_supports;
  std::string static_supports_summary;
};

// Loads the plugin and creates its instance; throws PluginError.
std::unique_ptr<Backend> load_plugin(const std::filesystem::path& path, const PluginOptions& options = {});

// The dc_case of a case: storages in order of first use over the tensors in name order, roles from the op's
// signature. Storage data point at the case's host bytes when `with_data`, else NULL (supports()). Throws
// BackendError for a tensor of more than DC_MAX_DIMS dimensions.
class PluginCase {
 public:
  PluginCase(const Case& c, bool with_data);
  PluginCase(const PluginCase&) = delete;
  PluginCase& operator=(const PluginCase&) = delete;
  const dc_case* get() const { return &case_; }
  // The case's storages in dc_case order (to place them on a device and point `data` there).
  const std::vector<Storage*>& storages() const { return storages_; }
  void set_data(std::size_t i, void* data) { abi_storages_.at(i).data = data; }
  void set_stream(void* stream) { case_.stream = stream; }

 private:
  std::vector<Storage*> storages_;
  std::vector<dc_storage> abi_storages_;
  std::vector<dc_tensor> tensors_;
  dc_case case_{};
};

}  // namespace driftcheck
