#include <unistd.h>

#include <csignal>
#include <iostream>

#include "driftcheck/fuzz/allocator.hpp"
#include "driftcheck/fuzz/cli.hpp"

int main(int argc, char** argv) {
  // A closed stdout or stderr (`driftcheck fuzz 2>&1 | head -1`) must not kill a campaign before its report
  // is written: with SIGPIPE ignored a write to it fails (EPIPE) and the stream just stops printing.
  std::signal(SIGPIPE, SIG_IGN);
  driftcheck::fuzz::tune_allocator();
  return driftcheck::fuzz::run_cli(argc, argv, std::cout, std::cerr, ::isatty(STDERR_FILENO) == 1);
}
