// Built-in presets (models/*.yaml, hwprofiles/*.yaml, compiled into the binary so that ptdp
// works from any directory) and the resolution of a user's --model / --cluster argument.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/cluster_spec.h"
#include "core/model_spec.h"

namespace ptdp {

struct PresetFile {
  std::string_view name;  // "gpt3-175b"
  std::string_view path;  // "models/gpt3-175b.yaml", as quoted in errors
  std::string_view text;
};

// In the order core/CMakeLists.txt lists them (by family, then size).
std::span<const PresetFile> ModelPresetFiles();
std::span<const PresetFile> ClusterPresetFiles();

// `arg` is, in this order: "-" (standard input), an existing file (a Hugging Face config.json when
// it ends in .json or has a "model_type" key, else a model YAML), a Hugging Face model folder (its
// config.json), or a preset name. Anything else is an InputError on `flag`: "no such file" for a
// path, "did you mean" for a name close to a preset, else the list of presets.
ModelSpec ResolveModel(const std::string& arg, std::string_view flag = "--model");

// ResolveModel, saying whether the model came from a Hugging Face config.json (whose training
// sequence length is ParseHfConfig's default, not a number the file gives).
struct ResolvedModel {
  ModelSpec model;
  bool hf_config = false;
};
ResolvedModel ResolveModelAndSource(const std::string& arg, std::string_view flag = "--model");

// `arg` is an existing hardware-profile file or a preset name (errors as ResolveModel's).
ClusterSpec ResolveCluster(const std::string& arg, std::string_view flag = "--cluster");

// The parsed presets (each parse error names the preset's path).
ModelSpec ModelPreset(std::string_view name);
ClusterSpec ClusterPreset(std::string_view name);

}  // namespace ptdp
