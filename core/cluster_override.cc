#include "core/cluster_override.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/spec_yaml.h"
#include "core/text.h"
#include "core/units.h"

namespace ptdp {
namespace {

constexpr const char* kFlag = "--cluster-set";

// One number of a profile: its YAML key and unit, how it is stored, and the key it moves with.
struct Key {
  std::string_view path;                     // dotted, as the profile YAML nests it
  std::string_view unit;                     // for messages ("" for plain numbers)
  double scale;                              // SI per YAML unit
  enum Kind { kReal, kBytes, kCount } kind;  // bytes round to whole ones; counts must be whole
  std::string_view leader;  // the key whose change moves this one by the same factor ("" none)
  double (*get)(const ClusterSpec&);
  void (*set)(ClusterSpec&, double si);
};

// The profile's numbers, in its order (core/spec_yaml.cc ReadCluster). Left out: names, the
// efficiency tables and compute_capability (a version, not a quantity).
const Key kKeys[] = {
    {"gpu.peak_bf16_tflops", "TFLOP/s", units::kTflops, Key::kReal, "",
     [](const ClusterSpec& c) { return c.gpu.peak_bf16_flops; },
     [](ClusterSpec& c, double v) { c.gpu.peak_bf16_flops = v; }},
    {"gpu.peak_fp16_tflops", "TFLOP/s", units::kTflops, Key::kReal, "gpu.peak_bf16_tflops",
     [](const ClusterSpec& c) { return c.gpu.peak_fp16_flops; },
     [](ClusterSpec& c, double v) { c.gpu.peak_fp16_flops = v; }},
    {"gpu.peak_fp32_tflops", "TFLOP/s", units::kTflops, Key::kReal, "",
     [](const ClusterSpec& c) { return c.gpu.peak_fp32_flops; },
     [](ClusterSpec& c, double v) { c.gpu.peak_fp32_flops = v; }},
    {"gpu.peak_fp8_tflops", "TFLOP/s", units::kTflops, Key::kReal, "",
     [](const ClusterSpec& c) { return c.gpu.peak_fp8_flops; },
     [](ClusterSpec& c, double v) { c.gpu.peak_fp8_flops = v; }},
    {"gpu.hbm_bytes", "bytes", 1, Key::kBytes, "",
     [](const ClusterSpec& c) { return static_cast<double>(c.gpu.hbm_bytes); },
     [](ClusterSpec& c, double v) { c.gpu.hbm_bytes = static_cast<int64_t>(v); }},
    {"gpu.hbm_bandwidth_gb_per_s", "GB/s", units::kGBPerS, Key::kReal, "",
     [](const ClusterSpec& c) { return c.gpu.hbm_bandwidth_bytes_per_s; },
     [](ClusterSpec& c, double v) { c.gpu.hbm_bandwidth_bytes_per_s = v; }},
    {"gpu.memory_efficiency", "", 1, Key::kReal, "",
     [](const ClusterSpec& c) { return c.gpu.memory_efficiency; },
     [](ClusterSpec& c, double v) { c.gpu.memory_efficiency = v; }},
    {"gpu.sm_count", "", 1, Key::kCount, "",
     [](const ClusterSpec& c) { return static_cast<double>(c.gpu.sm_count); },
     [](ClusterSpec& c, double v) { c.gpu.sm_count = static_cast<int>(v); }},
    {"gpu.reserved_bytes", "bytes", 1, Key::kBytes, "",
     [](const ClusterSpec& c) { return static_cast<double>(c.gpu.reserved_bytes); },
     [](ClusterSpec& c, double v) { c.gpu.reserved_bytes = static_cast<int64_t>(v); }},
    {"gpu.fragmentation", "", 1, Key::kReal, "",
     [](const ClusterSpec& c) { return c.gpu.fragmentation; },
     [](ClusterSpec& c, double v) { c.gpu.fragmentation = v; }},
    {"node.gpus_per_node", "", 1, Key::kCount, "",
     [](const ClusterSpec& c) { return static_cast<double>(c.gpus_per_node); },
     [](ClusterSpec& c, double v) { c.gpus_per_node = static_cast<int>(v); }},
    {"node.nvlink_gb_per_s", "GB/s", units::kGBPerS, Key::kReal, "",
     [](const ClusterSpec& c) { return c.nvlink_bytes_per_s; },
     [](ClusterSpec& c, double v) { c.nvlink_bytes_per_s = v; }},
    {"node.nvlink_busbw_gb_per_s", "GB/s", units::kGBPerS, Key::kReal, "node.nvlink_gb_per_s",
     [](const ClusterSpec& c) { return c.nvlink_busbw_bytes_per_s; },
     [](ClusterSpec& c, double v) { c.nvlink_busbw_bytes_per_s = v; }},
    {"node.nvlink_step_latency_us", "us", units::kMicrosecond, Key::kReal, "",
     [](const ClusterSpec& c) { return c.nvlink_step_latency_s; },
     [](ClusterSpec& c, double v) { c.nvlink_step_latency_s = v; }},
    {"network.nics_per_node", "", 1, Key::kCount, "node.gpus_per_node",
     [](const ClusterSpec& c) { return static_cast<double>(c.nics_per_node); },
     [](ClusterSpec& c, double v) { c.nics_per_node = static_cast<int>(v); }},
    {"network.nic_gb_per_s", "GB/s", units::kGBPerS, Key::kReal, "",
     [](const ClusterSpec& c) { return c.nic_bytes_per_s; },
     [](ClusterSpec& c, double v) { c.nic_bytes_per_s = v; }},
    {"network.nic_busbw_gb_per_s", "GB/s", units::kGBPerS, Key::kReal, "network.nic_gb_per_s",
     [](const ClusterSpec& c) { return c.nic_busbw_bytes_per_s; },
     [](ClusterSpec& c, double v) { c.nic_busbw_bytes_per_s = v; }},
    {"network.nic_step_latency_us", "us", units::kMicrosecond, Key::kReal, "",
     [](const ClusterSpec& c) { return c.nic_step_latency_s; },
     [](ClusterSpec& c, double v) { c.nic_step_latency_s = v; }},
    {"network.collective_base_latency_us", "us", units::kMicrosecond, Key::kReal, "",
     [](const ClusterSpec& c) { return c.collective_base_latency_s; },
     [](ClusterSpec& c, double v) { c.collective_base_latency_s = v; }},
    {"host.kernel_launch_us", "us", units::kMicrosecond, Key::kReal, "",
     [](const ClusterSpec& c) { return c.host.kernel_launch_s; },
     [](ClusterSpec& c, double v) { c.host.kernel_launch_s = v; }},
    {"host.microbatch_overhead_us", "us", units::kMicrosecond, Key::kReal, "",
     [](const ClusterSpec& c) { return c.host.microbatch_overhead_s; },
     [](ClusterSpec& c, double v) { c.host.microbatch_overhead_s = v; }},
    {"host.optimizer_step_us", "us", units::kMicrosecond, Key::kReal, "",
     [](const ClusterSpec& c) { return c.host.optimizer_step_s; },
     [](ClusterSpec& c, double v) { c.host.optimizer_step_s = v; }},
    {"host.moe_layer_us", "us", units::kMicrosecond, Key::kReal, "",
     [](const ClusterSpec& c) { return c.host.moe_layer_s; },
     [](ClusterSpec& c, double v) { c.host.moe_layer_s = v; }},
};

// Keys a profile has that are not numbers one can scale: named to say so, not "unknown".
constexpr std::string_view kNotNumbers[] = {
    "name",
    "description",
    "gpu.name",
    "gpu.compute_capability",
    "gpu.gemm_efficiency",
    "gpu.gemm_efficiency_fp8",
    "gpu.flash_attention",
    "gpu.fused_attention",
    "overrides",
};

std::string_view Leaf(std::string_view path) {
  const size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

const Key* FindKey(std::string_view name) {
  for (const Key& k : kKeys) {
    if (k.path == name || Leaf(k.path) == name) return &k;
  }
  return nullptr;
}

const Key& KeyOf(std::string_view path) {
  const Key* k = FindKey(path);
  PTDP_CHECK(k != nullptr);
  return *k;
}

[[noreturn]] void Fail(std::string message, std::string hint = "") {
  throw InputError({"", 0, kFlag}, std::move(message), std::move(hint));
}

std::string KeyList() {
  std::string list;
  for (const Key& k : kKeys) list += (list.empty() ? "" : ", ") + std::string(k.path);
  return list;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// All of `text` as a finite number, or NaN.
double Number(std::string_view text) {
  double x = std::numeric_limits<double>::quiet_NaN();
  if (text.empty() || text.front() == '+' || text.front() == '-') return x;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(x)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return x;
}

// The value's forms, for messages.
std::string Forms(const Key& k) {
  return fmt::format("a number{}, x<factor>, *<factor>, +<p>% or -<p>%",
                     k.unit.empty() ? "" : fmt::format(" (in {})", k.unit));
}

}  // namespace

ClusterOverride ParseClusterOverride(std::string_view typed) {
  ClusterOverride o;
  o.text = std::string(typed);
  if (typed.size() > kLongWordBytes) {
    Fail(fmt::format("{}: too long ({} bytes)", QuotedWord(typed), typed.size()),
         "e.g. --cluster-set network.nic_gb_per_s=x2");
  }
  const size_t eq = typed.find('=');
  if (eq == std::string_view::npos) {
    Fail(fmt::format("expected KEY=VALUE, got \"{}\"", QuotedWord(typed)),
         "e.g. --cluster-set network.nic_gb_per_s=x2 or --cluster-set gpu.hbm_bytes=+50%");
  }
  std::string_view left = typed.substr(0, eq);
  if (const size_t colon = left.rfind(':'); colon != std::string_view::npos) {
    o.cluster = std::string(Trim(left.substr(0, colon)));
    if (o.cluster.empty()) Fail(fmt::format("\"{}\": no cluster before ':'", QuotedWord(typed)));
    left = left.substr(colon + 1);
  }
  const std::string_view name = Trim(left);
  const std::string_view value = Trim(typed.substr(eq + 1));
  o.assignment = fmt::format("{}={}", name, value);
  if (name.empty()) Fail(fmt::format("\"{}\": no key before '='", QuotedWord(typed)));
  const Key* key = FindKey(name);
  if (!key) {
    for (std::string_view other : kNotNumbers) {
      if (other == name || Leaf(other) == name) {
        Fail(fmt::format("\"{}\" is not a number --cluster-set can change", QuotedWord(name)),
             "for other changes, copy the profile (hwprofiles/NAME.yaml), edit it and pass the "
             "file to --cluster");
      }
    }
    std::vector<std::string> names;
    for (const Key& k : kKeys) {
      names.emplace_back(k.path);
      names.emplace_back(Leaf(k.path));
    }
    std::string near = ClosestName(name, names);
    if (near.empty()) near = ClosestName(Leaf(name), names);  // gpu.nic_gb_per_s
    Fail(fmt::format("unknown key \"{}\"", QuotedWord(name)),
         near.empty() ? "keys: " + KeyList()
                      : fmt::format("did you mean {}? keys: {}", near, KeyList()));
  }
  o.key = std::string(key->path);
  const auto bad = [&](std::string_view why) {
    Fail(fmt::format("{}: {}, got \"{}\"", key->path, why, QuotedWord(value)),
         "a value is " + Forms(*key));
  };
  if (value.empty()) bad("no value after '='");
  if (value.front() == 'x' || value.front() == 'X' || value.front() == '*') {
    o.relative = true;
    o.amount = Number(value.substr(1));
    if (std::isnan(o.amount)) bad("expected a factor after x");
    if (!(o.amount > 0)) bad("a factor must be above 0");
  } else if (value.front() == '+' || value.front() == '-') {
    if (value.size() < 3 || value.back() != '%') {
      bad("a change is a percentage, +<p>% or -<p>%");
    }
    const double p = Number(value.substr(1, value.size() - 2));
    if (std::isnan(p)) bad("expected a percentage");
    o.relative = true;
    o.amount = value.front() == '+' ? 1 + p / 100 : 1 - p / 100;
    if (!(o.amount > 0) || !std::isfinite(o.amount)) bad("a decrease must be below 100%");
  } else if (value.back() == '%') {
    bad("a change has a sign: +<p>% or -<p>% (or x<factor>)");
  } else {
    o.amount = Number(value);
    if (std::isnan(o.amount)) bad("expected a number");
    if (key->kind != Key::kReal && o.amount != std::floor(o.amount)) bad("expected a whole number");
  }
  return o;
}

namespace {

// `x` (SI) as a value of `k`'s field: bytes rounded, counts whole; within what the field holds.
double Settable(const Key& k, double x, const ClusterOverride& o, const ClusterSpec& c) {
  const double max = k.kind == Key::kBytes   ? 9e18
                     : k.kind == Key::kCount ? std::numeric_limits<int>::max()
                                             : std::numeric_limits<double>::max();
  if (k.kind == Key::kBytes) x = std::round(x);
  if (!std::isfinite(x) || x > max) {
    Fail(fmt::format("{}: {} gives {}, too large", QuotedWord(o.assignment), k.path, x));
  }
  if (k.kind == Key::kCount && std::abs(x - std::round(x)) > 1e-9 * std::max(1.0, x)) {
    Fail(fmt::format("{}: {} would be {:g} in {}, not a whole number", QuotedWord(o.assignment),
                     k.path, x, c.name),
         k.leader.empty() ? "give a factor that makes a whole number, or a number"
                          : fmt::format("{} moves with {}: give {} too", k.path, k.leader, k.path));
  }
  return k.kind == Key::kCount ? std::round(x) : x;
}

}  // namespace

void ApplyClusterOverrides(const std::vector<ClusterOverride>& overrides, ClusterSpec& cluster) {
  std::vector<const ClusterOverride*> applied;
  std::set<std::string_view> given;
  for (const ClusterOverride& o : overrides) {
    if (!o.cluster.empty() && o.cluster != cluster.name) continue;
    applied.push_back(&o);
    given.insert(o.key);
  }
  if (applied.empty()) return;
  ClusterSpec c = cluster;
  // Which override last changed each key (itself or as its leader), for the reader's errors.
  std::vector<std::pair<std::string_view, const ClusterOverride*>> changed_by;
  for (const ClusterOverride* o : applied) {
    const Key& k = KeyOf(o->key);
    const double old = k.get(c);
    if (k.path == "gpu.peak_fp8_tflops" && old <= 0) {
      Fail(fmt::format("{}: {}'s {} has no FP8 units (the profile gives no peak_fp8_tflops and no "
                       "gemm_efficiency_fp8 table)",
                       QuotedWord(o->assignment), cluster.name, cluster.gpu.name),
           "a profile of a GPU with FP8 units (dgx-h100, hgx-h200)");
    }
    if (o->relative && old == 0) {
      Fail(fmt::format("{}: {} is 0 in {}: a factor leaves it 0", QuotedWord(o->assignment), k.path,
                       cluster.name),
           fmt::format("give a number ({})", k.unit.empty() ? "absolute" : k.unit));
    }
    const double now = Settable(k, o->relative ? old * o->amount : o->amount * k.scale, *o, c);
    k.set(c, now);
    changed_by.emplace_back(k.path, o);
    for (const Key& f : kKeys) {
      if (f.leader != k.path || given.contains(f.path)) continue;
      // A follower moves by the leader's factor (a leader read from a profile is positive).
      const double f_old = f.get(c);
      f.set(c, Settable(f, old > 0 ? f_old * (now / old) : f_old, *o, c));
      changed_by.emplace_back(f.path, o);
    }
  }
  // The profile reader's checks, and its values: a plan file holding `c` reads back equal.
  ClusterSpec checked;
  try {
    checked = ParseClusterYaml(WriteClusterYaml(c), kFlag);
  } catch (const InputError& e) {
    const ClusterOverride* culprit = applied.back();
    for (const auto& [path, o] : changed_by) {
      if (path == e.where().key) culprit = o;
    }
    std::string hint = e.hint();
    if (const Key* k = FindKey(e.where().key); k && !k->leader.empty() && hint.empty()) {
      hint = fmt::format("{} moves {} along; set them together", k->leader, k->path);
    }
    Fail(fmt::format("{}: {}: {}", QuotedWord(culprit->assignment), e.where().key, e.message()),
         hint);
  }
  for (const ClusterOverride* o : applied) checked.overrides.push_back(o->assignment);
  cluster = std::move(checked);
}

void ApplyClusterOverride(const ClusterOverride& override, ClusterSpec& cluster) {
  ApplyClusterOverrides({override}, cluster);
}

void CheckOverrideClusters(const std::vector<ClusterOverride>& overrides,
                           const std::vector<std::string>& cluster_names) {
  for (const ClusterOverride& o : overrides) {
    if (o.cluster.empty() ||
        std::find(cluster_names.begin(), cluster_names.end(), o.cluster) != cluster_names.end()) {
      continue;
    }
    std::vector<std::string> quoted;
    for (const std::string& name : cluster_names) quoted.push_back(QuotedWord(name));
    const std::string near = ClosestName(o.cluster, cluster_names);
    Fail(fmt::format("\"{}\" names cluster \"{}\", not one of this command's ({})",
                     QuotedWord(o.text), QuotedWord(o.cluster), fmt::join(quoted, ", ")),
         (near.empty() ? "" : fmt::format("did you mean {}:{}? ", near, o.assignment)) +
             "without a CLUSTER: prefix it changes every cluster");
  }
}

std::vector<std::string> ClusterOverrideKeys() {
  std::vector<std::string> keys;
  for (const Key& k : kKeys) keys.emplace_back(k.path);
  return keys;
}

std::string ClusterOverridesLine(const ClusterSpec& cluster) {
  if (cluster.overrides.empty()) return "";
  std::vector<std::string> changes;
  for (const std::string& o : cluster.overrides) changes.push_back(QuotedWord(o));
  return fmt::format("{} changed (--cluster-set): {}", QuotedWord(cluster.name),
                     fmt::join(changes, ", "));
}

}  // namespace ptdp
