// `ptdp models` and `ptdp profiles`: the built-in presets.
#include <fmt/format.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/workload.h"
#include "core/json.h"
#include "core/presets.h"
#include "core/table.h"
#include "core/units.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

enum class Format { kTable, kJson };
constexpr EnumName<Format> kFormatNames[] = {{"table", Format::kTable}, {"json", Format::kJson}};

Format ReadFormat(const Flags& flags) { return flags.Enum("format", kFormatNames, Format::kTable); }

void AddFormat(po::options_description& options) {
  options.add_options()("format", po::value<std::string>()->default_value("table")->value_name("F"),
                        "output format: table | json");
}

void AddProfilesOptions(po::options_description& options) {
  AddFormat(options);
  AddMemoryUnitOption(options);
}

int RunModels(const Flags& flags, std::ostream& out, std::ostream&) {
  const Format format = ReadFormat(flags);
  Table table({{"name"},
               {"layers", Table::Align::kRight},
               {"hidden", Table::Align::kRight},
               {"heads", Table::Align::kRight},
               {"kv groups", Table::Align::kRight},
               {"ffn", Table::Align::kRight},
               {"vocab", Table::Align::kRight},
               {"seq", Table::Align::kRight},
               {"mlp"},
               {"experts", Table::Align::kRight},
               {"parameters", Table::Align::kRight},
               {"active", Table::Align::kRight}});
  std::vector<std::string> json;
  for (const PresetFile& file : ModelPresetFiles()) {
    const ModelSpec m = ModelPreset(file.name);
    const ParameterCounts params = CountParameters(m);
    table.AddRow({m.name, std::to_string(m.num_layers), std::to_string(m.hidden_size),
                  std::to_string(m.num_attention_heads), std::to_string(m.num_query_groups),
                  std::to_string(m.ffn_hidden_size), std::to_string(m.vocab_size),
                  std::to_string(m.seq_length), std::string(Name(m.activation)),
                  m.moe() ? fmt::format("{} of {}", m.moe_router_topk, m.num_experts) : "-",
                  HumanCount(static_cast<double>(params.total)),
                  HumanCount(static_cast<double>(params.active))});
    json.push_back(fmt::format(
        "{{\"name\": {}, \"num_layers\": {}, \"hidden_size\": {}, \"num_attention_heads\": {}, "
        "\"num_query_groups\": {}, \"ffn_hidden_size\": {}, \"vocab_size\": {}, "
        "\"seq_length\": {}, \"activation\": \"{}\", \"normalization\": \"{}\", "
        "\"position_embedding\": \"{}\", \"tied_embeddings\": {}, \"num_experts\": {}, "
        "\"moe_router_topk\": {}, \"parameters\": {}, \"active_parameters\": {}}}",
        JsonString(m.name), m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups,
        m.ffn_hidden_size, m.vocab_size, m.seq_length, Name(m.activation), Name(m.normalization),
        Name(m.position_embedding), m.tied_embeddings, m.num_experts,
        m.moe() ? m.moe_router_topk : 0, params.total, params.active));
  }
  if (format == Format::kJson) {
    out << "{\"models\": [\n  " << fmt::format("{}", fmt::join(json, ",\n  ")) << "\n]}\n";
  } else {
    out << table.Render()
        << "\nParameters: one full replica, vocabulary padded to a multiple of 128 (Megatron); "
           "active: what one\ntoken goes through (a mixture of experts routes each token to k "
           "of its experts).\n"
           "Use a preset with --model NAME; a model YAML or a Hugging Face config.json path "
           "works too.\n";
  }
  return kExitOk;
}

int RunProfiles(const Flags& flags, std::ostream& out, std::ostream&) {
  const Format format = ReadFormat(flags);
  const MemoryUnit unit = ReadMemoryUnit(flags);
  Table table({{"name"},
               {"gpu"},
               {"gpus/node", Table::Align::kRight},
               {"bf16 TFLOP/s", Table::Align::kRight},
               {"HBM " + std::string(MemoryUnitName(unit)), Table::Align::kRight},
               {"HBM GB/s", Table::Align::kRight},
               {"NVLink GB/s", Table::Align::kRight},
               {"NICs x GB/s", Table::Align::kRight}});
  std::vector<std::string> json;
  for (const PresetFile& file : ClusterPresetFiles()) {
    const ClusterSpec c = ClusterPreset(file.name);
    table.AddRow({c.name, c.gpu.name, std::to_string(c.gpus_per_node),
                  fmt::format("{:g}", c.gpu.peak_bf16_flops / units::kTflops),
                  MemoryNumber(static_cast<double>(c.gpu.hbm_bytes), unit),
                  fmt::format("{:g}", c.gpu.hbm_bandwidth_bytes_per_s / units::kGBPerS),
                  fmt::format("{:g}", c.nvlink_bytes_per_s / units::kGBPerS),
                  fmt::format("{} x {:g}", c.nics_per_node, c.nic_bytes_per_s / units::kGBPerS)});
    json.push_back(fmt::format(
        "{{\"name\": {}, \"description\": {}, \"gpu\": {}, \"gpus_per_node\": {}, "
        "\"peak_bf16_flops\": {}, \"peak_fp16_flops\": {}, \"peak_fp32_flops\": {}, "
        "\"hbm_bytes\": {}, \"hbm_bandwidth_bytes_per_s\": {}, \"nvlink_bytes_per_s\": {}, "
        "\"nvlink_busbw_bytes_per_s\": {}, \"nics_per_node\": {}, \"nic_bytes_per_s\": {}, "
        "\"nic_busbw_bytes_per_s\": {}}}",
        JsonString(c.name), JsonString(c.description), JsonString(c.gpu.name), c.gpus_per_node,
        JsonNumber(c.gpu.peak_bf16_flops), JsonNumber(c.gpu.peak_fp16_flops),
        JsonNumber(c.gpu.peak_fp32_flops), c.gpu.hbm_bytes,
        JsonNumber(c.gpu.hbm_bandwidth_bytes_per_s), JsonNumber(c.nvlink_bytes_per_s),
        JsonNumber(c.nvlink_busbw_bytes_per_s), c.nics_per_node, JsonNumber(c.nic_bytes_per_s),
        JsonNumber(c.nic_busbw_bytes_per_s)));
  }
  if (format == Format::kJson) {
    out << "{\"profiles\": [\n  " << fmt::format("{}", fmt::join(json, ",\n  ")) << "\n]}\n";
  } else {
    out << table.Render() << "\nHBM as the driver reports it ("
        << (unit == MemoryUnit::kGiB ? "GiB = 2^30" : "GB = 1e9")
        << " bytes); bandwidths per GPU and direction (datasheet), GB/s = 1e9 bytes a second. "
           "Each profile's file "
           "cites its sources.\n"
           "cpu-local holds guesses: `ptdp calibrate --backend cpu --out FILE` measures a "
           "machine.\n";
  }
  return kExitOk;
}

}  // namespace

const Command kModelsCommand{
    .name = "models",
    .summary = "list the model presets with their sizes and parameter counts",
    .usage = "ptdp models [--format table|json]",
    .description =
        "Lists the built-in model presets (models/*.yaml): GPT models of Narayanan et "
        "al. 2021 Table 1,\nGPT-3, Llama 2, Llama 3 and the founding document's "
        "example, with exact parameter counts.",
    .examples = "ptdp models\nptdp models --format json",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddFormat,
    .run = RunModels,
};

const Command kProfilesCommand{
    .name = "profiles",
    .summary = "list the hardware profiles",
    .usage = "ptdp profiles [--format table|json] [--memory-unit GiB|GB]",
    .description =
        "Lists the built-in hardware profiles (hwprofiles/*.yaml): GPU peak rates and "
        "memory, node size,\nNVLink and network bandwidths.",
    .examples = "ptdp profiles\nptdp profiles --format json",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddProfilesOptions,
    .run = RunProfiles,
};

}  // namespace ptdp::cli
