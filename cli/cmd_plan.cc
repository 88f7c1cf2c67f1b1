// `ptdp plan`: resolves the model, cluster and training inputs. The search and ranking come
// with the planner; until then this prints what it resolved and says plainly that nothing is
// ranked.
#include <fmt/format.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "core/presets.h"
#include "core/training_spec.h"
#include "core/units.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

void AddPlanOptions(po::options_description& options) {
  options.add_options()("model",
                        po::value<std::string>()->default_value("seed-example")->value_name("M"),
                        "model: preset name, model YAML or Hugging Face config.json")(
      "cluster", po::value<std::string>()->default_value("dgx-a100-80gb")->value_name("C"),
      "hardware profile: name or YAML file")(
      "gpus", po::value<std::string>()->default_value("8")->value_name("N"), "number of GPUs")(
      "global-batch", po::value<std::string>()->default_value("128")->value_name("B"),
      "global batch size in sequences")("seq-length", po::value<std::string>()->value_name("S"),
                                        "override the model's training sequence length")(
      "precision", po::value<std::string>()->default_value("bf16")->value_name("P"),
      "bf16 | fp16 | fp32")("top", po::value<std::string>()->value_name("K"),
                            "show the best K plans (default 10)")(
      "format", po::value<std::string>()->value_name("F"), "table | json")(
      "out", po::value<std::string>()->value_name("FILE"), "write the best plan as a plan file")(
      "explain", po::bool_switch(), "count the rejections per rule, with an example each");
}

std::string Plural(int64_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

int RunPlan(const Flags& flags, std::ostream& out, std::ostream& err) {
  ModelSpec model = ResolveModel(flags.String("model"));
  const ClusterSpec cluster = ResolveCluster(flags.String("cluster"));
  const int64_t gpus = flags.PositiveInt("gpus");
  TrainingSpec training;
  training.global_batch_size = flags.PositiveInt("global-batch");
  training.precision = flags.Enum("precision", kPrecisionNames, Precision::kBf16);
  if (auto seq = flags.OptionalPositiveInt("seq-length")) {
    if (*seq > model.max_position_embeddings &&
        model.position_embedding == PositionEmbedding::kLearned) {
      flags.Fail("seq-length", fmt::format("{} exceeds the model's max_position_embeddings ({})",
                                           *seq, model.max_position_embeddings));
    }
    model.seq_length = static_cast<int>(*seq);
    model.max_position_embeddings = std::max(model.max_position_embeddings, model.seq_length);
  }
  for (std::string_view wanted : {"top", "format", "out", "explain"}) {
    if (flags.Has(wanted) && !(wanted == "explain" && !flags.Switch("explain"))) {
      err << fmt::format(
          "ptdp: error: --{} needs the planner's ranking, which is not implemented yet (the "
          "planner issue)\n",
          wanted);
      return kExitNotImplemented;
    }
  }

  const ParameterCounts params = CountParameters(model);
  const double nodes = static_cast<double>(gpus) / cluster.gpus_per_node;
  auto count = [](int64_t n) { return HumanCount(static_cast<double>(n)); };
  out << fmt::format("ptdp plan: {} on {} of {}, global batch {}\n\n", model.name,
                     Plural(gpus, "GPU"), cluster.name, training.global_batch_size);
  out << fmt::format(
      "model       {}: {} layers, hidden {}, {} heads ({} query groups of {}), FFN {}\n",
      model.name, model.num_layers, model.hidden_size, model.num_attention_heads,
      model.num_query_groups, model.kv_channels, model.ffn_hidden_size);
  out << fmt::format("            {}, {}, {} positions, {} embeddings, {}\n",
                     Name(model.activation), Name(model.normalization),
                     Name(model.position_embedding), model.tied_embeddings ? "tied" : "untied",
                     model.add_bias_linear ? "biases" : "no biases");
  out << fmt::format("            vocabulary {} (padded to {}), sequence {}\n", model.vocab_size,
                     PaddedVocabSize(model), model.seq_length);
  out << fmt::format("parameters  {} ({}): embeddings {} + {} layers x {}{} + final norm {}\n",
                     count(params.total), Grouped(params.total),
                     count(params.word_embedding + params.position_embedding), model.num_layers,
                     count(params.per_layer),
                     params.output_layer > 0 ? " + output layer " + count(params.output_layer) : "",
                     count(params.final_norm));
  out << fmt::format("cluster     {}: {:g} node{} of {} x {}\n", cluster.name, nodes,
                     nodes == 1 ? "" : "s", cluster.gpus_per_node, cluster.gpu.name);
  out << fmt::format("            {:g} TFLOP/s bf16, {:.1f} GB HBM at {:g} GB/s per GPU\n",
                     cluster.gpu.peak_bf16_flops / units::kTflops,
                     cluster.gpu.hbm_bytes / units::kGB,
                     cluster.gpu.hbm_bandwidth_bytes_per_s / units::kGBPerS);
  out << fmt::format(
      "            NVLink {:g} GB/s per GPU and direction; {} NICs of {:g} GB/s per node\n",
      cluster.nvlink_bytes_per_s / units::kGBPerS, cluster.nics_per_node,
      cluster.nic_bytes_per_s / units::kGBPerS);
  out << fmt::format("training    global batch {} sequences = {} tokens per step, {}, {}\n\n",
                     training.global_batch_size,
                     Grouped(training.global_batch_size * model.seq_length),
                     Name(training.precision), Name(training.optimizer));
  out << "Nothing is ranked: the planner (search over tp, pp, dp, micro-batch, schedule, "
         "recompute\nand sharding, ranked by simulated step time) is not implemented yet.\n";
  return kExitOk;
}

}  // namespace

const Command kPlanCommand{
    .name = "plan",
    .summary = "search every valid configuration and rank them by predicted step time",
    .usage =
        "ptdp plan --model M --cluster C --gpus N --global-batch B [--top K]\n"
        "                 [--format table|json] [--out plan.yaml] [--explain]",
    .description =
        "Searches every PTD-P configuration Megatron-LM accepts for the model on the cluster,\n"
        "ranks them by simulated step time, explains the rejections and writes the best as a\n"
        "plan file and as Megatron-LM flags. Without flags it plans the founding document's\n"
        "example: seed-example (24 layers, hidden 2048, 32 heads, sequence 2048) on 8\n"
        "A100-80GB GPUs with global batch 128.\n\n"
        "Today it resolves and prints the inputs (model, parameter count, cluster, batch); the\n"
        "search and ranking are not implemented yet, and it says so instead of ranking.",
    .examples =
        "ptdp plan\n"
        "ptdp plan --model gpt3-175b --cluster dgx-a100-80gb --gpus 1024 "
        "--global-batch 1536\n"
        "ptdp plan --model path/to/config.json --cluster hgx-h200 --gpus 64 "
        "--global-batch 512 --seq-length 4096",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddPlanOptions,
    .run = RunPlan,
};

}  // namespace ptdp::cli
