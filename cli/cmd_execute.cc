// `ptdp execute`, `ptdp validate`, `ptdp calibrate`: the executor's commands. Their flags are
// declared so `--help` documents the contract; running them says plainly that they are not
// implemented yet (exit code 3).
#include "cli/commands.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

void AddExecuteOptions(po::options_description& o) {
  o.add_options()("plan", po::value<std::string>()->value_name("FILE"), "plan file to execute")(
      "steps", po::value<std::string>()->value_name("S"), "training steps")(
      "backend", po::value<std::string>()->value_name("B"), "cpu | cuda")(
      "data", po::value<std::string>()->value_name("FILE"), "text file, or `synthetic`")(
      "save", po::value<std::string>()->value_name("DIR"), "checkpoint directory")(
      "save-interval", po::value<std::string>()->value_name("K"), "checkpoint every K steps")(
      "load", po::value<std::string>()->value_name("DIR"), "resume from a checkpoint")(
      "trace", po::value<std::string>()->value_name("FILE"), "write a measured Chrome trace")(
      "launch", po::bool_switch(), "start mpirun with one rank per GPU of the plan");
}

void AddValidateOptions(po::options_description& o) {
  AddExecuteOptions(o);
  o.add_options()("format", po::value<std::string>()->value_name("F"), "table | json");
}

void AddCalibrateOptions(po::options_description& o) {
  o.add_options()("backend", po::value<std::string>()->value_name("B"), "cpu | cuda")(
      "out", po::value<std::string>()->value_name("FILE"), "hardware profile to write");
}

int NotReached(const Flags&, std::ostream&, std::ostream&) { return 0; }

}  // namespace

const Command kExecuteCommand{
    .name = "execute",
    .summary = "train a GPT with a plan's exact layout, one process per rank",
    .usage =
        "mpirun -np N ptdp execute --plan plan.yaml [--steps S] [--backend cpu|cuda]\n"
        "                     [--data FILE] [--save DIR] [--load DIR] [--trace out.json]\n"
        "       ptdp execute --plan plan.yaml --launch ...",
    .description =
        "Trains a GPT with the plan's tensor, pipeline and data parallel layout "
        "(OpenBLAS + MPI on\nCPUs, cuBLAS + NCCL on GPUs) and measures it.",
    .examples =
        "mpirun -np 8 ptdp execute --plan plan.yaml --steps 20\n"
        "ptdp execute --plan plan.yaml --launch --steps 20 --trace measured.json",
    .implemented = false,
    .tracked_in = "the executor issues",
    .add_options = AddExecuteOptions,
    .run = NotReached,
};

const Command kValidateCommand{
    .name = "validate",
    .summary = "execute a plan, simulate it, and compare the two side by side",
    .usage = "ptdp validate --plan plan.yaml [execute flags]",
    .description =
        "Runs `execute` and `simulate` on the same plan and shows measured against "
        "predicted step time,\nbubble and memory.",
    .examples = "ptdp validate --plan plan.yaml --launch --steps 20",
    .implemented = false,
    .tracked_in = "the executor issues",
    .add_options = AddValidateOptions,
    .run = NotReached,
};

const Command kCalibrateCommand{
    .name = "calibrate",
    .summary = "measure this machine and write a hardware profile",
    .usage = "ptdp calibrate --backend cpu|cuda --out profile.yaml",
    .description =
        "Measures matrix-product rates, memory bandwidth and communication on this "
        "machine and writes\nthem as a hardware profile (the format of hwprofiles/).",
    .examples = "ptdp calibrate --backend cpu --out cpu-local.yaml",
    .implemented = false,
    .tracked_in = "the executor issues",
    .add_options = AddCalibrateOptions,
    .run = NotReached,
};

}  // namespace ptdp::cli
