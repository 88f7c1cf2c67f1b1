#include "cli/workload.h"

#include <fmt/format.h>

#include "core/presets.h"

namespace po = boost::program_options;

namespace ptdp::cli {

void AddWorkloadOptions(po::options_description& o, bool example_defaults) {
  auto value = [&](const char* fallback) {
    auto* v = po::value<std::string>();
    if (example_defaults) v->default_value(fallback);
    return v;
  };
  o.add_options()("model", value("seed-example")->value_name("M"),
                  "model: preset name (ptdp models), model YAML or Hugging Face config.json")(
      "cluster", value("dgx-a100-80gb")->value_name("C"),
      "hardware profile: name (ptdp profiles) or YAML file")("gpus", value("8")->value_name("N"),
                                                             "number of GPUs")(
      "global-batch", value("128")->value_name("B"), "global batch size, in sequences")(
      "seq-length", po::value<std::string>()->value_name("S"),
      "override the model's training sequence length")(
      "precision", po::value<std::string>()->default_value("bf16")->value_name("P"),
      "bf16 | fp16 | fp32");
}

Workload ReadWorkload(const Flags& flags) {
  Workload w;
  w.model = ResolveModel(flags.String("model"));
  w.cluster = ResolveCluster(flags.String("cluster"));
  w.gpus = flags.PositiveInt("gpus");
  w.training.global_batch_size = flags.PositiveInt("global-batch");
  w.training.precision = flags.Enum("precision", kPrecisionNames, Precision::kBf16);
  if (auto seq = flags.OptionalPositiveInt("seq-length")) {
    if (*seq > w.model.max_position_embeddings &&
        w.model.position_embedding == PositionEmbedding::kLearned) {
      flags.Fail("seq-length", fmt::format("{} exceeds the model's max_position_embeddings ({})",
                                           *seq, w.model.max_position_embeddings));
    }
    w.model.seq_length = static_cast<int>(*seq);
    w.model.max_position_embeddings = std::max(w.model.max_position_embeddings, w.model.seq_length);
  }
  return w;
}

void AddCostOptions(po::options_description& o) {
  o.add_options()(
      "megatron-version", po::value<std::string>()->default_value("core")->value_name("V"),
      "the Megatron-LM code to model: core (today's defaults), 2022 (Korthikanti et al.), 2021 "
      "(Narayanan et al.: scatter-gather p2p, no gradient-accumulation fusion)")(
      "overlap-grad-reduce", po::bool_switch(),
      "Megatron's --overlap-grad-reduce: the data-parallel reduction overlaps the backward")(
      "overlap-p2p-communication", po::bool_switch(),
      "Megatron's --overlap-p2p-communication: pipeline sends run beside compute");
}

CostOptions ReadCostOptions(const Flags& flags) {
  enum class Version { kCore, k2022, k2021 };
  constexpr EnumName<Version> kVersions[] = {
      {"core", Version::kCore}, {"2022", Version::k2022}, {"2021", Version::k2021}};
  const Version version = flags.Enum("megatron-version", kVersions, Version::kCore);
  CostOptions o = version == Version::k2021   ? Megatron2021Options()
                  : version == Version::k2022 ? Megatron2022Options()
                                              : CostOptions{};
  o.overlap_grad_reduce = o.overlap_grad_reduce || flags.Switch("overlap-grad-reduce");
  o.overlap_p2p_communication =
      o.overlap_p2p_communication || flags.Switch("overlap-p2p-communication");
  return o;
}

}  // namespace ptdp::cli
