// YAML forms of the specs: model presets (models/*.yaml), hardware profiles (hwprofiles/*.yaml)
// and plan files. Parsers take text plus the name to quote in errors (ninja's ParseTest habit:
// tests never touch disk); Load* read a file. Every failure is an InputError naming the source,
// line and dotted key. Writers produce text that the parsers read back to an equal value.
#pragma once

#include <string>
#include <string_view>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/plan.h"
#include "core/training_spec.h"

namespace ptdp {

class YamlMap;

// Model keys follow Megatron's argument names (DESIGN.md). Required: num_layers, hidden_size,
// num_attention_heads, vocab_size, seq_length. Optional, with Megatron's defaults: name (the
// file's stem), num_query_groups, kv_channels, ffn_hidden_size, max_position_embeddings,
// make_vocab_size_divisible_by, activation, normalization, position_embedding,
// tied_embeddings, add_bias_linear.
ModelSpec ParseModelYaml(std::string_view text, const std::string& source = "<string>");
ModelSpec ReadModel(const YamlMap& map, std::string_view default_name);
std::string WriteModelYaml(const ModelSpec& model);

ClusterSpec ParseClusterYaml(std::string_view text, const std::string& source = "<string>");
ClusterSpec ReadCluster(const YamlMap& map);
std::string WriteClusterYaml(const ClusterSpec& cluster);

TrainingSpec ReadTraining(const YamlMap& map);
// The plan's `options` section: megatron_version (a preset: core, 2022, 2021,
// megatron-deepspeed) then any field of CostOptions by its name, overriding the preset.
CostOptions ReadOptions(const YamlMap& map);
// `mtp_layers`, when given, receives the MTP layers a `layout` string names (untouched without
// one).
ParallelConfig ReadParallel(const YamlMap& map, int* mtp_layers = nullptr);

// A plan file's specs: version, model, cluster, gpus, training, parallel, options (optional;
// absent: Megatron-Core's defaults), each section checked on its own (and FP8 against the
// cluster's units). Whether Megatron-LM accepts the layout is megatron/plan_file.h's question:
// ParsePlanYaml there is what reads a plan file.
Plan ParsePlanSpecs(std::string_view text, const std::string& source = "<string>");
std::string WritePlanYaml(const Plan& plan);

}  // namespace ptdp
