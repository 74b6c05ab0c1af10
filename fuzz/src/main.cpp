#include <unistd.h>

#include <iostream>

#include "driftcheck/fuzz/cli.hpp"

int main(int argc, char** argv) {
  return driftcheck::fuzz::run_cli(argc, argv, std::cout, std::cerr, ::isatty(STDERR_FILENO) == 1);
}
