// The subcommands beyond list/fuzz/replay, one source file each (cmd_<name>.cpp): each adds its options to a
// CLI11 subcommand and maps them to one library call. Internal to the command line.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include <CLI/CLI.hpp>

namespace driftcheck::fuzz {

// What a command needs from the process: the full command line (recorded in files), the streams, and whether
// stderr is a terminal (progress bars).
struct CommandContext {
  std::string command_line;
  std::ostream& out;
  std::ostream& err;
  bool err_is_tty = false;
};

// `driftcheck accept` (cmd_accept.cpp). Returns the callback that runs it once parsed.
CLI::App* add_accept_command(CLI::App& app, std::function<int(const CommandContext&)>& run);

}  // namespace driftcheck::fuzz
