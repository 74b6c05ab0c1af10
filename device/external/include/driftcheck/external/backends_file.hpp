// Backends declared outside the build: the backends file (TOML, `driftcheck.backends` version 1,
// docs/PROTOCOL.md section 6) and the registry entries `ext.<name>` made from it. One BackendDecl per
// `[[backend]]` table holds what every way in shares (name, op, numerics, static supports, provenance) plus
// how it runs: a worker command today, a C plugin (`plugin = "path.so"`) through the same declaration.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/query_shapes.hpp"
#include "driftcheck/external/worker.hpp"

namespace driftcheck::external {

// A backends file driftcheck cannot accept; the message is "FILE:LINE: problem" (exit 2).
class BackendFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A declared backend whose worker cannot complete its handshake (it exits, crashes, prints garbage, speaks
// another protocol version, lacks the op); the message is "ext.NAME (FILE:LINE): problem" (exit 2).
class BadBackend : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Supports checked in driftcheck, before any round trip. Unset lists and limits restrict nothing.
struct StaticSupports {
  std::vector<DType> dtypes, kv_dtypes;
  std::vector<std::int64_t> block_sizes;
  QueryShapes query;  // attention: decode_only, max_query_len, head_dims, max_head_dim
  std::vector<WeightMode> weight_modes;
  std::optional<std::int64_t> max_hidden, max_tokens;
  bool residual = true, gqa = true, non_causal = true, sliding_window = true, softcap = true, sinks = true;

  // `who` names the backend and file in the reason ("ext.x (backends.toml:4)").
  Support check(const Case& c, std::string_view who) const;
  std::string summary() const;
  std::vector<std::string> parts() const;  // one per restriction ("bf16/fp16", "decode only"), empty for none
};

struct BackendDecl {
  std::string name;  // registry name, "ext.<name>"
  OpKind op = OpKind::kRmsNorm;
  std::string description, provenance;
  std::filesystem::path file;
  std::int64_t line = 0;
  Numerics numerics;
  std::string numerics_source;  // "like:<backend>", "declared", or both
  // numerics = "like:<backend>" with no field declared: that registered backend, whose numerics_for(case) the
  // external backend follows case by case (a twin whose declared rounding depends on the path a batch takes).
  // Null otherwise. It lives in the registry the file was read against, as long as the backend built from it.
  const Backend* numerics_like = nullptr;
  std::string twin;     // `twin = "cpu.x"`: the registered CPU twin that models this kernel, or empty
  int compile_set = 0;  // `compile_set = K`: a JIT kernel's compile set (Backend::compile_set), 0: none
  StaticSupports supports;
  std::optional<WorkerCommand> worker;  // `command = [...]`
  int max_workers = 0;
  std::optional<std::filesystem::path> plugin;  // `plugin = "path.so"`, resolved against the file's directory
  std::string plugin_config;                    // `plugin_config = "..."`, handed to the plugin's create()

  std::string origin() const { return file.string() + ":" + std::to_string(line); }
};

// Reads and checks one file; `known` resolves `numerics = "like:NAME"` and rejects duplicate names. Throws
// BackendFileError. Without `require_runner` (`driftcheck check`, which judges outputs written elsewhere) an
// entry may have neither `command` nor `plugin`.
std::vector<BackendDecl> load_backends_file(const std::filesystem::path& file, const Registry& known,
                                            bool require_runner = true);
// The same for a file's text already in memory (`file` names it in errors; the fuzz target's entry point).
std::vector<BackendDecl> load_backends_text(std::string_view text, const std::filesystem::path& file,
                                            const Registry& known, bool require_runner = true);
// The backend a declaration runs as.
std::unique_ptr<Backend> make_external_backend(BackendDecl decl);
// The backend of a `plugin` declaration (docs/PLUGIN.md); throws BackendFileError naming the file and line.
std::unique_ptr<Backend> make_plugin_backend(const BackendDecl& decl);
// Loads each file (in order) into `registry`. Throws BackendFileError.
void register_backends_files(Registry& registry, const std::vector<std::string>& files);
// The files named by DRIFTCHECK_BACKENDS (':'-separated), then `files`.
std::vector<std::string> backends_files_with_environment(const std::vector<std::string>& files);

}  // namespace driftcheck::external
