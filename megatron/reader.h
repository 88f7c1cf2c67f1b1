// The parts of ReadMegatronCommand (megatron/read_command.h), each in its own file, and the
// Reader they share. Internal to the reading of commands.
//
//   read_command.cc     the training command, argparse's reading of its words, what is not
//                       simulated
//   read_model.cc       the model: sizes, MoE and multi-latent attention, hybrid (Mamba) layers
//   read_layout.cc      parallel sizes, layer split, recompute, sharding, cost options, training
//   start_up_checks.cc  what Megatron-LM asserts after validate_args, at start-up
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megatron/read_command.h"

namespace ptdp::reading {

using Severity = MegatronFinding::Severity;

// The flags of a command as argparse left them (the last of repeated flags wins), read by name;
// findings go to the command. Remembers which flags were looked at.
class Reader {
 public:
  explicit Reader(MegatronCommand& c) : c_(c) {}

  const MegatronCommand::Arg* Last(std::string_view flag) const {
    consulted_.emplace(flag);
    const MegatronCommand::Arg* found = nullptr;
    for (const auto& a : c_.args) {
      if (a.flag == flag && a.valid) found = &a;
    }
    return found;
  }
  bool Has(std::string_view flag) const { return Last(flag) != nullptr; }
  // Whether the command gives `flag`, for one of Megatron's rules about it only: unlike Has,
  // not counted as read, so that a flag the simulation ignores is still said to be "not
  // simulated".
  bool Given(std::string_view flag) const {
    return std::any_of(c_.args.begin(), c_.args.end(),
                       [flag](const MegatronCommand::Arg& a) { return a.flag == flag && a.valid; });
  }

  std::optional<int64_t> Int(std::string_view flag) {
    const auto* a = Last(flag);
    if (a == nullptr || a->values.empty()) return std::nullopt;
    // Nothing for argparse's refusal, or a value known at run time only: said once.
    return PythonInt(a->values.front());
  }
  std::optional<double> Number(std::string_view flag) {
    const auto* a = Last(flag);
    if (a == nullptr || a->values.empty()) return std::nullopt;
    // Nothing for argparse's refusal, or a value known at run time only: said once.
    return PythonFloat(a->values.front());
  }
  std::optional<std::string> String(std::string_view flag) const {
    const auto* a = Last(flag);
    if (a == nullptr || a->values.empty()) return std::nullopt;
    return a->values.front();
  }
  int LineOf(std::string_view flag) const {
    const auto* a = Last(flag);
    return a != nullptr ? a->line : 0;
  }
  void Error(const MegatronCommand::Arg& a, std::string message, std::string fix) {
    c_.findings.push_back({Severity::kError, a.flag, a.line, std::move(message), std::move(fix)});
  }
  void Add(Severity severity, std::string_view flag, std::string message, std::string fix) {
    c_.findings.push_back(
        {severity, std::string(flag), LineOf(flag), std::move(message), std::move(fix)});
  }

  // Whether reading the command looked at `flag`: a flag it never looked at is not simulated.
  bool Consulted(std::string_view flag) const { return consulted_.contains(flag); }

 private:
  MegatronCommand& c_;
  mutable std::set<std::string, std::less<>> consulted_;
};

// A size read from a flag, clamped to what an int holds (the rules and limits say the rest).
inline int ToInt(int64_t v) {
  return static_cast<int>(std::clamp<int64_t>(v, -1'000'000'000, 1'000'000'000));
}

// The model the flags describe, with Megatron's defaults and required arguments. Returns the
// layers of each pipeline segment a hybrid pattern's '|' gives.
std::vector<int> ReadModel(Reader& r, MegatronCommand& c);

// The layout: parallel sizes, context-parallel exchange, the layer split and virtual stages.
void ReadLayout(Reader& r, MegatronCommand& c, const std::vector<int>& hybrid_segments);

// The schedule, sequence parallelism, recompute and sharding.
void ReadRecomputeAndSharding(Reader& r, MegatronCommand& c);

// What changes costs but not the layout: attention backend, dispatcher, overlaps.
void ReadCostOptions(Reader& r, MegatronCommand& c);
// CUBLAS_WORKSPACE_CONFIG's workspace bytes as PyTorch reads the value; -1 when it gives none
// (PyTorch then keeps its default).
int64_t CublasWorkspaceConfigBytes(std::string_view config);

// Training: precision and FP8, the optimizer, the batch.
void ReadTraining(Reader& r, MegatronCommand& c);

// Checks that need the whole command: the world size flag, hierarchical context parallelism,
// the micro-batch group, the expert-parallel overlap, Torch FSDP2 and determinism, the launch
// environment (`environment_complete`: a variable the script does not set is unset).
void ReadStartUpChecks(Reader& r, MegatronCommand& c, bool environment_complete);

}  // namespace ptdp::reading
