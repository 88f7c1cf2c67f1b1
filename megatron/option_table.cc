#include "megatron/option_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <limits>

#include "core/text.h"
#include "megatron/launcher_flags.inc"
#include "megatron/megatron_flags.inc"

namespace ptdp {
namespace {

constexpr KnownFlag kMegatronFlags[] = {PTDP_MEGATRON_FLAGS};
constexpr KnownFlag kLauncherFlags[] = {PTDP_LAUNCHER_FLAGS};

}  // namespace

std::span<const KnownFlag> MegatronFlags() { return kMegatronFlags; }
std::span<const KnownFlag> LauncherFlags() { return kLauncherFlags; }

std::string MegatronTableVersion() {
  return fmt::format("Megatron-LM option table: NVIDIA/Megatron-LM commit {} ({}), {} options",
                     PTDP_MEGATRON_COMMIT, PTDP_MEGATRON_COMMIT_DATE, std::size(kMegatronFlags));
}

const KnownFlag* FindFlag(std::span<const KnownFlag> table, std::string_view name) {
  for (const KnownFlag& f : table) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool CanChangeTheStep(const KnownFlag& flag) {
  static constexpr std::string_view kSections[] = {
      "network_size",  "distributed",
      "training",      "mixed_precision",
      "mla",           "moe",
      "experimental",  "transformer_engine",
      "heterogeneous", "experimental_attention_variant"};
  if (std::find(std::begin(kSections), std::end(kSections), flag.section) == std::end(kSections)) {
    return false;
  }
  static constexpr std::string_view kInertPrefixes[] = {
      "--init-method-std",
      "--embedding-init-method-std",
      "--rotary-",
      "--rope-",
      "--use-rope-",
      "--yarn-",
      "--no-yarn-",
      "--mscale",
      "--norm-epsilon",
      "--apply-layernorm-1p",
      "--apply-query-key-layer-scaling",
      "--attention-softmax-in-fp32",
      "--train-iters",
      "--train-samples",
      "--exit-",
      "--distributed-timeout-",
      "--distributed-backend",
      "--local-rank",
      "--lazy-mpu-init",
      "--use-cpu-initialization",
      "--init-model-with-meta",
      "--no-initialization",
      "--use-mcore-models",
      "--profile",
      "--pytorch-profiler-",
      "--use-pytorch-profiler",
      "--record-",
      "--memory-snapshot-path",
      "--nvtx-ranges",
      "--flight-recorder-",
      "--disable-flight-recorder-",
      "--no-flight-recorder-",
      "--check-for-large-grads",
      "--no-check-for-nan-in-loss-and-grad",
      "--check-weight-hash-across-dp-replicas-interval",
      "--config-logger-dir",
      "--dump-param-to-param-group-map",
      "--result-rejected-tracker-filename",
      "--iterations-to-skip",
      "--manual-gc",
      "--no-manual-gc-eval",
      "--disable-manual-gc-eval",
      "--gpu-sniff-test-interval",
      "--train-sync-interval",
      "--initial-loss-scale",
      "--loss-scale",
      "--min-loss-scale",
      "--hysteresis",
      "--mup-",
      "--use-mup",
      "--moe-aux-loss-coeff",
      "--moe-z-loss-coeff",
      "--moe-input-jitter-eps",
      "--moe-router-bias-update-rate",
      "--moe-router-enable-expert-bias",
      "--moe-router-score-function",
      "--moe-router-pre-softmax",
      "--moe-router-topk-scaling-factor",
      "--moe-router-load-balancing-type",
      "--moe-per-layer-logging",
      "--moe-router-dtype",
      "--mtp-loss-scaling-factor",
      "--qk-clip",
      "--dataloader-type",
      "--calculate-per-token-loss",
      "--onnx-safe",
      "--bert-no-binary-head",
      "--fake-process-group",
      "--disable-gloo-process-groups",
      "--tp-comm-bootstrap-backend",
      "--nccl-communicator-config-path",
      "--ddp-average-in-collective",
      "--accumulate-allreduce-grads-in-fp32",
      "--seed",
      "--spec",
      "--check-for-spiky-loss",
      "--fp8-amax-",
      "--fp8-margin",
      "--fp8-interval"};
  return std::none_of(std::begin(kInertPrefixes), std::end(kInertPrefixes),
                      [&](std::string_view prefix) { return flag.name.starts_with(prefix); });
}

std::string SuggestFlag(std::string_view flag) {
  std::string best;
  size_t best_distance = 3;
  for (const KnownFlag& f : kMegatronFlags) {
    const size_t d = EditDistance(flag, f.name, best_distance - 1);
    if (d < best_distance) best_distance = d, best = std::string(f.name);
  }
  if (best.empty() && flag.find('_') != std::string_view::npos) {
    std::string dashed(flag);
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    if (FindFlag(kMegatronFlags, dashed) != nullptr) best = dashed;
  }
  return best;
}

namespace {

bool IsDigit(char ch) { return ch >= '0' && ch <= '9'; }

// Python's number syntax without its blanks and underscores ("" when the underscores are
// misplaced: doubled, leading, trailing or beside anything but a digit); the sign is kept.
std::string PythonDigits(std::string_view text) {
  constexpr std::string_view kBlanks = " \t\n\r\f\v";
  const size_t begin = text.find_first_not_of(kBlanks);
  if (begin == std::string_view::npos) return "";
  text = text.substr(begin, text.find_last_not_of(kBlanks) - begin + 1);
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '_') {
      out += text[i];
      continue;
    }
    const auto digit = [&](size_t k) { return k < text.size() && IsDigit(text[k]); };
    if (i == 0 || !digit(i - 1) || !digit(i + 1)) return "";
  }
  return out;
}

}  // namespace

std::optional<int64_t> PythonInt(std::string_view text) {
  std::string digits = PythonDigits(text);
  std::string_view number = digits;
  if (number.starts_with('+')) number.remove_prefix(1);
  int64_t n = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size()) {
    return std::nullopt;
  }
  return n;
}

std::optional<double> PythonFloat(std::string_view text) {
  std::string digits = PythonDigits(text);
  std::string_view number = digits;
  const bool negative = number.starts_with('-');
  if (number.starts_with('+') || negative) number.remove_prefix(1);
  std::string lower(number);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (lower == "inf" || lower == "infinity") {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (lower == "nan") return std::numeric_limits<double>::quiet_NaN();
  double x = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), x);
  if (number.empty() || !(IsDigit(number.front()) || number.front() == '.') || ec != std::errc() ||
      ptr != number.data() + number.size()) {
    return std::nullopt;
  }
  return negative ? -x : x;
}

std::string FlagValueProblem(const KnownFlag& flag, std::string_view value) {
  if (value.find('$') != std::string_view::npos || value.find('`') != std::string_view::npos) {
    return "";
  }
  if (flag.type == "int" && !PythonInt(value)) {
    return fmt::format("invalid int value: '{}'", value);
  }
  if (flag.type == "float" && !PythonFloat(value)) {
    return fmt::format("invalid float value: '{}'", value);
  }
  if (flag.choices.empty()) return "";
  std::string listed;
  for (std::string_view rest = flag.choices; !rest.empty();) {
    const size_t bar = rest.find('|');
    const std::string_view choice = rest.substr(0, bar);
    if (choice == value) return "";
    listed += fmt::format("{}'{}'", listed.empty() ? "" : ", ", choice);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  return fmt::format("invalid choice: '{}' (choose from {})", value, listed);
}

}  // namespace ptdp
