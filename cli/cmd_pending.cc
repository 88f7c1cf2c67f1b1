// Subcommands of the contract (DESIGN.md) whose machinery is not built yet. Their flags are
// declared now, so `--help` documents the contract and bad flags are refused with exit code 2;
// running them says plainly that they are not implemented (exit code 3).
#include "cli/commands.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

void AddCheckOptions(po::options_description& o) {
  o.add_options()("gpus", po::value<std::string>()->value_name("N"),
                  "number of GPUs (else from the command)")(
      "cluster", po::value<std::string>()->value_name("C"), "hardware profile name or file")(
      "file", po::value<std::string>()->value_name("FILE"), "read the command line from a file");
}

int NotReached(const Flags&, std::ostream&, std::ostream&) { return 0; }

}  // namespace

const Command kCheckCommand{
    .name = "check",
    .summary = "check a Megatron-LM command line against Megatron's rules and the best plan",
    .usage =
        "ptdp check [--gpus N] [--cluster C] -- <Megatron-LM command line>\n"
        "       ptdp check [--gpus N] [--cluster C] --file cmd.sh",
    .description =
        "Reads a Megatron-LM command line as pasted (python pretrain_gpt.py or "
        "torchrun ..., line\ncontinuations, comments), says what Megatron would reject "
        "and why, simulates it and compares\nit with the best plan.",
    .examples =
        "ptdp check --gpus 8 --file pretrain.sh\n"
        "ptdp check --gpus 8 -- python pretrain_gpt.py --num-layers 24 ...",
    .implemented = false,
    .tracked_in = "the planner issue",
    .add_options = AddCheckOptions,
    .run = NotReached,
};

}  // namespace ptdp::cli
