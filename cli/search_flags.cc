#include "cli/search_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "cli/workload.h"
#include "core/parallel_config.h"

namespace po = boost::program_options;

namespace ptdp::cli {

void AddSearchConstraintOptions(po::options_description& o) {
  o.add_options()(
      "fix", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
      "fix a knob (repeatable): tp, cp, cp-comm (p2p | a2a | allgather), ep, etp, pp, dp, mbs, v, "
      "schedule, sp, recompute, recompute-modules (Megatron's names joined by +, e.g. "
      "moe_act+layernorm), dist-opt, fsdp (none | optim | optim_grads | optim_grads_params), "
      "uneven (on | off), layout (Megatron's --pipeline-model-parallel-layout string)")(
      "num-layers-per-virtual-pipeline-stage", po::value<std::string>()->value_name("N"),
      "Megatron's way to ask for interleaving; needs --fix pp=P: fixes v = layers / (P x N)")(
      "max-tp", po::value<std::string>()->value_name("T"), "largest tensor-parallel size")(
      "max-pp", po::value<std::string>()->value_name("P"), "largest pipeline-parallel size")(
      "max-cp", po::value<std::string>()->value_name("C"), "largest context-parallel size")(
      "max-ep", po::value<std::string>()->value_name("E"), "largest expert-parallel size")(
      "max-micro-batch", po::value<std::string>()->value_name("b"), "largest micro-batch size")(
      "memory-headroom", po::value<std::string>()->value_name("X"),
      "memory each plan must leave free: a fraction (0.1) or a percentage (10%)")(
      "no-recompute", po::bool_switch(), "only plans without activation recompute")(
      "no-sequence-parallel", po::bool_switch(), "only plans without sequence parallelism")(
      "no-distributed-optimizer", po::bool_switch(),
      "only plans without the distributed optimizer (and without Megatron-FSDP)")(
      "no-overlap", po::bool_switch(),
      "do not turn on --overlap-grad-reduce and --overlap-param-gather (the planner does for "
      "Megatron-Core)")(
      "schedules", po::value<std::string>()->value_name("LIST"),
      "schedules to consider, comma-separated (default 1f1b,interleaved,zb-h1; gpipe too)");
}

SearchConstraints ReadSearchConstraints(const Flags& flags, const ModelSpec& model) {
  SearchConstraints c;
  for (const std::string& fix : flags.Strings("fix")) ApplyFix(fix, c);
  if (flags.Has("num-layers-per-virtual-pipeline-stage")) {
    if (!c.pp) {
      flags.Fail("num-layers-per-virtual-pipeline-stage", "needs the pipeline size",
                 "add --fix pp=P: the virtual stages are num_layers / (P x N)");
    }
    if (c.virtual_stages || c.layout) {
      flags.Fail("num-layers-per-virtual-pipeline-stage",
                 fmt::format("cannot be combined with --fix {}", c.layout ? "layout" : "v"),
                 "keep one");
    }
    const int v = *VirtualStagesFromLayers(flags, model.num_layers, ParallelConfig{.pp = *c.pp});
    c.virtual_stages = v;
    c.uneven = false;  // Megatron refuses it with uneven first / last stages
  }
  c.max_tp = static_cast<int>(flags.OptionalPositiveInt("max-tp").value_or(0));
  c.max_pp = static_cast<int>(flags.OptionalPositiveInt("max-pp").value_or(0));
  c.max_cp = static_cast<int>(flags.OptionalPositiveInt("max-cp").value_or(0));
  c.max_ep = static_cast<int>(flags.OptionalPositiveInt("max-ep").value_or(0));
  c.max_micro_batch_size =
      static_cast<int>(flags.OptionalPositiveInt("max-micro-batch").value_or(0));
  if (flags.Switch("no-recompute")) c.recomputes = {Recompute::kNone};
  if (flags.Switch("no-sequence-parallel")) c.sequence_parallel = false;
  if (flags.Switch("no-distributed-optimizer")) c.distributed_optimizer = false;
  if (auto list = flags.OptionalString("schedules")) {
    c.schedules.clear();
    size_t start = 0;
    while (start <= list->size()) {
      const size_t comma = std::min(list->find(',', start), list->size());
      const std::string name = list->substr(start, comma - start);
      const auto s = ValueOf<Schedule>(kScheduleNames, name);
      if (!s) flags.Fail("schedules", UnknownValueMessage<Schedule>(kScheduleNames, name));
      c.schedules.push_back(*s);
      start = comma + 1;
    }
  }
  return c;
}

double ReadHeadroom(const Flags& flags) {
  const auto text = flags.OptionalString("memory-headroom");
  if (!text) return 0;
  std::string number = *text;
  const bool percent = !number.empty() && number.back() == '%';
  if (percent) number.pop_back();
  double value = -1;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size()) value = -1;
  if (percent) value /= 100;
  if (!(value >= 0 && value < 1)) {
    flags.Fail(
        "memory-headroom",
        fmt::format("expected a fraction below 1 or a percentage below 100%, got \"{}\"", *text));
  }
  return value;
}

}  // namespace ptdp::cli
