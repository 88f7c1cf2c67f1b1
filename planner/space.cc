#include "planner/space.h"

#include <fmt/format.h>

#include <charconv>

#include "core/error.h"
#include "core/megatron_rules.h"

namespace ptdp {
namespace {

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    small.push_back(d);
    if (d != n / d) large.push_back(n / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

bool Allowed(const std::optional<int>& fixed, int64_t value) { return !fixed || *fixed == value; }

template <typename T>
bool Contains(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

void Rejections::Add(const std::string& reason, const std::function<std::string()>& example) {
  auto [it, inserted] = counts.emplace(reason, 0);
  ++it->second;
  if (inserted) examples[reason] = example();
}

int64_t Rejections::total() const {
  int64_t n = 0;
  for (const auto& [reason, count] : counts) n += count;
  return n;
}

std::string Describe(const ParallelConfig& p) {
  std::string text = fmt::format("tp {} x pp {} x dp {}, mbs {}, {}", p.tp, p.pp, p.dp,
                                 p.micro_batch_size, Name(p.schedule));
  if (p.schedule == Schedule::kInterleaved) text += fmt::format(" v={}", p.virtual_stages);
  if (p.sequence_parallel) text += ", sp";
  if (p.recompute != Recompute::kNone) text += fmt::format(", {} recompute", Name(p.recompute));
  if (p.distributed_optimizer) text += ", dist-opt";
  return text;
}

int64_t EnumerateConfigs(const ModelSpec& model, const TrainingSpec& training, int64_t num_gpus,
                         const SearchConstraints& c, Rejections& rejected,
                         const std::function<void(const ParallelConfig&)>& visit) {
  int64_t examined = 0;
  const int64_t gbs = training.global_batch_size;
  for (int64_t tp : Divisors(num_gpus)) {
    if (!Allowed(c.tp, tp) || (c.max_tp > 0 && tp > c.max_tp)) continue;
    for (int64_t pp : Divisors(num_gpus / tp)) {
      if (!Allowed(c.pp, pp) || (c.max_pp > 0 && pp > c.max_pp)) continue;
      const int64_t dp = num_gpus / (tp * pp);
      if (!Allowed(c.dp, dp)) continue;
      // Micro-batch sizes: divisors of GBS / dp; if dp does not divide GBS, none can work, and
      // one candidate (mbs 1) carries the rejection.
      std::vector<int64_t> mbs_list = gbs % dp == 0 ? Divisors(gbs / dp) : std::vector<int64_t>{1};
      // Virtual stages: divisors of the layers per stage, when there are whole layers per stage.
      std::vector<int64_t> v_list;
      if (model.num_layers % pp == 0) {
        for (int64_t v : Divisors(model.num_layers / pp)) {
          if (v > 1) v_list.push_back(v);
        }
      }
      for (int64_t mbs : mbs_list) {
        if (!Allowed(c.micro_batch_size, mbs)) continue;
        if (c.max_micro_batch_size > 0 && mbs > c.max_micro_batch_size) continue;
        for (Schedule schedule : c.schedules) {
          // Without a pipeline, zb-h1 and gpipe run exactly as 1f1b: not distinct candidates.
          if (pp == 1 && (schedule == Schedule::kZbH1 || schedule == Schedule::kGpipe) &&
              Contains(c.schedules, Schedule::k1F1B)) {
            continue;
          }
          std::vector<int64_t> vs = {1};
          if (schedule == Schedule::kInterleaved)
            vs = v_list.empty() ? std::vector<int64_t>{2} : v_list;
          for (int64_t v : vs) {
            if (!Allowed(c.virtual_stages, v)) continue;
            for (int sp = 0; sp < 2; ++sp) {
              if (c.sequence_parallel && *c.sequence_parallel != (sp == 1)) continue;
              for (Recompute recompute : c.recomputes) {
                for (int dist = 0; dist < 2; ++dist) {
                  if (c.distributed_optimizer && *c.distributed_optimizer != (dist == 1)) continue;
                  // With one data-parallel replica the distributed optimizer shards nothing.
                  if (dp == 1 && dist == 1 && !c.distributed_optimizer) continue;
                  const ParallelConfig p{.tp = static_cast<int>(tp),
                                         .pp = static_cast<int>(pp),
                                         .dp = static_cast<int>(dp),
                                         .micro_batch_size = static_cast<int>(mbs),
                                         .virtual_stages = static_cast<int>(v),
                                         .schedule = schedule,
                                         .sequence_parallel = sp == 1,
                                         .recompute = recompute,
                                         .distributed_optimizer = dist == 1};
                  ++examined;
                  const std::vector<Violation> violations =
                      CheckParallelConfig(model, training, p, num_gpus);
                  if (!violations.empty()) {
                    rejected.Add(std::string(RuleId(violations.front().rule)), [&] {
                      return fmt::format("{}: {}", Describe(p), violations.front().message);
                    });
                    continue;
                  }
                  visit(p);
                }
              }
            }
          }
        }
      }
    }
  }
  return examined;
}

void ApplyFix(std::string_view assignment, SearchConstraints& c) {
  const size_t eq = assignment.find('=');
  auto fail = [&](const std::string& why) {
    throw InputError(
        {"", 0, "--fix"}, fmt::format("\"{}\": {}", assignment, why),
        "keys: tp, pp, dp, mbs, v, schedule, sp, recompute, dist-opt; e.g. --fix tp=8");
  };
  if (eq == std::string_view::npos) fail("expected KEY=VALUE");
  const std::string_view key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  auto number = [&]() {
    int n = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || ptr != value.data() + value.size() || n <= 0) {
      fail("expected a positive integer after =");
    }
    return n;
  };
  auto on_off = [&]() {
    if (value == "on" || value == "true" || value == "1") return true;
    if (value == "off" || value == "false" || value == "0") return false;
    fail("expected on or off");
    return false;
  };
  if (key == "tp")
    c.tp = number();
  else if (key == "pp")
    c.pp = number();
  else if (key == "dp")
    c.dp = number();
  else if (key == "mbs" || key == "micro-batch")
    c.micro_batch_size = number();
  else if (key == "v" || key == "virtual-stages")
    c.virtual_stages = number();
  else if (key == "schedule") {
    const auto s = ValueOf<Schedule>(kScheduleNames, value);
    if (!s) fail(UnknownValueMessage<Schedule>(kScheduleNames, value));
    c.schedules = {*s};
  } else if (key == "recompute") {
    const auto r = ValueOf<Recompute>(kRecomputeNames, value);
    if (!r) fail(UnknownValueMessage<Recompute>(kRecomputeNames, value));
    c.recomputes = {*r};
  } else if (key == "sp" || key == "sequence-parallel")
    c.sequence_parallel = on_off();
  else if (key == "dist-opt" || key == "distributed-optimizer")
    c.distributed_optimizer = on_off();
  else
    fail("unknown key");
}

}  // namespace ptdp
