// Subcommands of the contract (DESIGN.md) whose machinery is not built yet. Their flags are
// declared now, so `--help` documents the contract and bad flags are refused with exit code 2;
// running them says plainly that they are not implemented (exit code 3).
#include "cli/commands.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

void AddModelFlags(po::options_description& o) {
  o.add_options()("model", po::value<std::string>()->value_name("M"),
                  "model preset, model YAML or config.json")(
      "cluster", po::value<std::string>()->value_name("C"), "hardware profile name or file")(
      "gpus", po::value<std::string>()->value_name("N"), "number of GPUs")(
      "global-batch", po::value<std::string>()->value_name("B"), "global batch size");
}

void AddSimulateOptions(po::options_description& o) {
  o.add_options()("plan", po::value<std::string>()->value_name("FILE"), "plan file to simulate");
  AddModelFlags(o);
  o.add_options()("tp", po::value<std::string>()->value_name("T"), "tensor-parallel size")(
      "pp", po::value<std::string>()->value_name("P"), "pipeline-parallel size")(
      "micro-batch", po::value<std::string>()->value_name("b"), "micro-batch size")(
      "virtual-stages", po::value<std::string>()->value_name("v"),
      "model chunks per pipeline rank")("schedule", po::value<std::string>()->value_name("S"),
                                        "gpipe | 1f1b | interleaved | zb-h1")(
      "sequence-parallel", po::bool_switch(), "Megatron's --sequence-parallel")(
      "recompute", po::value<std::string>()->value_name("R"), "none | selective | full")(
      "distributed-optimizer", po::bool_switch(), "Megatron's --use-distributed-optimizer")(
      "format", po::value<std::string>()->value_name("F"), "table | json")(
      "trace", po::value<std::string>()->value_name("FILE"), "write a Chrome trace (Perfetto)")(
      "svg", po::value<std::string>()->value_name("FILE"), "write the timeline as SVG");
}

void AddCheckOptions(po::options_description& o) {
  o.add_options()("gpus", po::value<std::string>()->value_name("N"),
                  "number of GPUs (else from the command)")(
      "cluster", po::value<std::string>()->value_name("C"), "hardware profile name or file")(
      "file", po::value<std::string>()->value_name("FILE"), "read the command line from a file");
}

int NotReached(const Flags&, std::ostream&, std::ostream&) { return 0; }

}  // namespace

const Command kSimulateCommand{
    .name = "simulate",
    .summary = "simulate one configuration operation by operation",
    .usage =
        "ptdp simulate --plan plan.yaml | (--model M --cluster C --gpus N --global-batch B\n"
        "                     --tp T --pp P [--micro-batch b] [--virtual-stages v]\n"
        "                     [--schedule gpipe|1f1b|interleaved|zb-h1] [--sequence-parallel]\n"
        "                     [--recompute none|selective|full] [--distributed-optimizer])\n"
        "                     [--format table|json] [--trace out.json] [--svg out.svg]",
    .description =
        "Plays one configuration's pipeline schedule with durations from the cost "
        "model: step time,\nbubbles, memory per stage, communication, as numbers, an "
        "SVG timeline and a Chrome trace.",
    .examples =
        "ptdp simulate --plan plan.yaml --svg timeline.svg\n"
        "ptdp simulate --model seed-example --cluster dgx-a100-80gb --gpus 8 "
        "--global-batch 128 --tp 2 --pp 4 --micro-batch 4",
    .implemented = false,
    .tracked_in = "the cost-model and schedule issues",
    .add_options = AddSimulateOptions,
    .run = NotReached,
};

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
