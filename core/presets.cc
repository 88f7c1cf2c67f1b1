#include "core/presets.h"

#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/hf_config.h"
#include "core/spec_yaml.h"
#include "core/text.h"
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

// Neither a preset nor a file: say which it was meant to be. A path (a slash or a file
// extension) that names nothing is "no such file"; a name close to a preset gets "did you mean";
// anything else the list of presets.
struct PresetKind {
  std::span<const PresetFile> presets;
  std::string_view what;          // "model preset"
  std::string_view plural;        // "presets"
  std::string_view list_command;  // "ptdp models"
  std::string_view folder_hint;   // what to give instead of a folder
};

[[noreturn]] void NotFound(const std::string& arg, std::string_view flag, const PresetKind& kind) {
  const auto& [presets, what, plural, list_command, folder_hint] = kind;
  const InputError::Where where{"", 0, std::string(flag)};
  const std::filesystem::path path(arg);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(where, fmt::format("{} is a folder", arg), std::string(folder_hint));
  }
  if (std::filesystem::exists(path, ec)) {
    throw InputError(where, fmt::format("{} is not a regular file", arg));
  }
  if (arg.find('/') != std::string::npos || path.has_extension()) {
    throw InputError(where, fmt::format("no such file: {}", arg),
                     fmt::format("nor a {} of that name; `{}` lists them", what, list_command));
  }
  std::vector<std::string> names;
  for (const PresetFile& p : presets) names.emplace_back(p.name);
  const std::string near = ClosestName(arg, names);
  if (!near.empty()) {
    throw InputError(where, fmt::format("no {} named \"{}\"", what, arg),
                     fmt::format("did you mean {}? `{}` lists them", near, list_command));
  }
  throw InputError(where, fmt::format("\"{}\" is neither a {} nor a file", arg, what),
                   fmt::format("{}: {}; `{}` shows them", plural, Names(presets), list_command));
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
  return ResolveModelAndSource(arg, flag).model;
}

ResolvedModel ResolveModelAndSource(const std::string& arg, std::string_view flag) {
  // A Hugging Face model folder (a download or a clone of the hub repository) holds its
  // config.json.
  std::error_code ec;
  const std::string hf_config = (std::filesystem::path(arg) / "config.json").string();
  const std::string file =
      std::filesystem::is_directory(arg, ec) && IsFile(hf_config) ? hf_config : arg;
  if (file == "-" || IsFile(file)) {
    const std::string text = ReadTextFile(file);
    const std::string source = file == "-" ? "<stdin>" : file;
    if (LooksLikeHfConfig(source, text)) return {ParseHfConfig(text, source), true};
    return {ParseModelYaml(text, source), false};
  }
  if (FindPreset(ModelPresetFiles(), arg) != nullptr) return {ModelPreset(arg), false};
  NotFound(arg, flag,
           {ModelPresetFiles(), "model preset", "presets", "ptdp models",
            "give a model file, or a Hugging Face model folder (with config.json)"});
}

ClusterSpec ResolveCluster(const std::string& arg, std::string_view flag) {
  if (arg == "-") return ParseClusterYaml(ReadTextFile(arg), "<stdin>");
  if (IsFile(arg)) return ParseClusterYaml(ReadTextFile(arg), arg);
  if (FindPreset(ClusterPresetFiles(), arg) != nullptr) return ClusterPreset(arg);
  NotFound(arg, flag,
           {ClusterPresetFiles(), "hardware profile", "profiles", "ptdp profiles",
            "give a hardware-profile file"});
}

}  // namespace ptdp
