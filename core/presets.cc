#include "core/presets.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"
#include "core/hf_config.h"
#include "core/spec_yaml.h"
#include "core/yaml_io.h"

namespace ptdp {

// Defined in the generated presets_data.cc (cmake/embed_presets.cmake).
namespace generated {
extern const PresetFile kModelPresets[];
extern const size_t kNumModelPresets;
extern const PresetFile kClusterPresets[];
extern const size_t kNumClusterPresets;
}  // namespace generated

namespace {

const PresetFile* FindPreset(std::span<const PresetFile> presets, std::string_view name) {
  for (const PresetFile& p : presets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string Names(std::span<const PresetFile> presets) {
  std::vector<std::string_view> names;
  for (const PresetFile& p : presets) names.push_back(p.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

bool IsFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

bool LooksLikeHfConfig(const std::string& path, std::string_view text) {
  if (std::filesystem::path(path).extension() == ".json") return true;
  const YAML::Node root = ParseYamlDocument(text, path);
  return root.IsMap() && (root["model_type"] || root["architectures"]);
}

}  // namespace

std::span<const PresetFile> ModelPresetFiles() {
  return {generated::kModelPresets, generated::kNumModelPresets};
}

std::span<const PresetFile> ClusterPresetFiles() {
  return {generated::kClusterPresets, generated::kNumClusterPresets};
}

ModelSpec ModelPreset(std::string_view name) {
  const PresetFile* p = FindPreset(ModelPresetFiles(), name);
  if (p == nullptr) throw InputError({}, fmt::format("no model preset named \"{}\"", name));
  return ParseModelYaml(p->text, std::string(p->path));
}

ClusterSpec ClusterPreset(std::string_view name) {
  const PresetFile* p = FindPreset(ClusterPresetFiles(), name);
  if (p == nullptr) throw InputError({}, fmt::format("no hardware profile named \"{}\"", name));
  return ParseClusterYaml(p->text, std::string(p->path));
}

ModelSpec ResolveModel(const std::string& arg, std::string_view flag) {
  if (IsFile(arg)) {
    const std::string text = ReadTextFile(arg);
    return LooksLikeHfConfig(arg, text) ? ParseHfConfig(text, arg) : ParseModelYaml(text, arg);
  }
  if (FindPreset(ModelPresetFiles(), arg) != nullptr) return ModelPreset(arg);
  throw InputError({"", 0, std::string(flag)},
                   fmt::format("\"{}\" is neither a model preset nor a file", arg),
                   fmt::format("presets: {}; `ptdp models` shows them", Names(ModelPresetFiles())));
}

ClusterSpec ResolveCluster(const std::string& arg, std::string_view flag) {
  if (IsFile(arg)) return ParseClusterYaml(ReadTextFile(arg), arg);
  if (FindPreset(ClusterPresetFiles(), arg) != nullptr) return ClusterPreset(arg);
  throw InputError(
      {"", 0, std::string(flag)},
      fmt::format("\"{}\" is neither a hardware profile nor a file", arg),
      fmt::format("profiles: {}; `ptdp profiles` shows them", Names(ClusterPresetFiles())));
}

}  // namespace ptdp
