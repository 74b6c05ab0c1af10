// The gate configuration: a TOML file (toml++) that a kernel repository checks in next to its baseline and
// corpus. Layout and every key in docs/GATE.md. Reading checks everything that needs no registry: syntax,
// types, unknown keys, op / format / verdict names, budgets that make no sense; names of backends are checked
// when the gate resolves them. Every problem is an InputError("config", "FILE:LINE: ...").
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/reference/format.hpp"

namespace driftcheck::fuzz {

inline constexpr int kGateConfigVersion = 1;

// What a backend may do in the gate's campaign before it fails its budget.
struct Budget {
  std::string pattern = "default";                    // a backend name or glob; "default" applies to the rest
  std::vector<std::string> allowed_verdicts{"pass"};  // verdict names a case may get
  double max_ratio = 1.0;                             // largest error / tolerance of any case
  double max_share_beyond = 0.0;                      // largest share of a case's elements beyond tolerance
};

// How much worse than the baseline a statistic may get before the gate fails ("measurably worse").
struct Margin {
  double ratio = 0.05;             // relative, for worst/p99 ratio and share beyond tolerance
  double mean_signed_ulps = 0.05;  // absolute, for the bias of the primary output
};

struct GateConfig {
  std::filesystem::path path;  // the file read; relative paths below are resolved against its directory
  std::string sha256;          // of the file's bytes
  std::vector<OpKind> ops;     // empty: the ops of the selected backends
  std::vector<std::string> backends;  // globs, as `driftcheck fuzz --backend`
  std::vector<DType> formats;  // empty: every format; else every storage format of a case must be listed
  std::uint64_t seed = 1;
  std::uint64_t cases = 0;
  bool large_shapes = true;
  std::filesystem::path baseline;
  std::optional<std::filesystem::path> corpus;
  std::optional<std::filesystem::path> golden;
  std::optional<std::filesystem::path> backends_file;  // external backends (docs/BACKENDS.md)
  Margin margin;
  Budget default_budget;
  std::vector<Budget> budgets;  // by backend glob

  // The budget of a backend: its exact name, else the matching glob with the most literal characters, else
  // the default. Throws InputError when two globs tie for a backend.
  const Budget& budget_for(std::string_view backend) const;
  // "seed 1, 2000 cases, ops rmsnorm,attention, formats all": the statistics of two runs compare only when
  // this is equal.
  std::string stream() const;
};

// Throws InputError("config", ...) naming the file and line of the first problem.
GateConfig load_gate_config(const std::filesystem::path& path);
// The same on text already read (`name` is used in messages; relative paths resolve against its directory).
GateConfig parse_gate_config(std::string_view text, const std::filesystem::path& name);

}  // namespace driftcheck::fuzz
