// The ptdp binary: the only place (with cli/) that prints errors and chooses an exit code.
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return ptdp::cli::Run(args, std::cout, std::cerr);
}
