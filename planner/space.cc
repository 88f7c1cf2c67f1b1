#include "planner/space.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <memory>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/plan.h"
#include "megatron/rules.h"

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

// The candidates PipelineSplits filters.
std::vector<ParallelConfig> SplitCandidates(int L, int pp) {
  std::vector<ParallelConfig> out;
  if (pp == 1) return {ParallelConfig{}};
  if (L % pp == 0) out.push_back(ParallelConfig{});
  for (auto [e, l] : {std::pair{true, false}, {false, true}, {true, true}}) {
    if ((L + e + l) % pp == 0 && (L + e + l) / pp >= 1) {
      out.push_back(ParallelConfig{.account_for_embedding = e, .account_for_loss = l});
    }
  }
  const auto uneven = [&](int first, int last) {
    out.push_back(ParallelConfig{.first_stage_layers = first, .last_stage_layers = last});
  };
  if (pp == 2) {
    // One of the two stages given: the other takes the rest.
    for (int fewer = 1; fewer <= kUnevenFewer; ++fewer) {
      if ((L - fewer) % 2 != 0 || (L - fewer) / 2 < 1) continue;
      uneven((L - fewer) / 2, 0);
      uneven(0, (L - fewer) / 2);
    }
    return out;
  }
  // m layers on each middle stage; the first and / or last stage m - k (1 <= k <= kUnevenFewer).
  for (int m = 1; m * (pp - 2) < L; ++m) {
    for (int kf = 0; kf <= kUnevenFewer; ++kf) {
      for (int kl = 0; kl <= kUnevenFewer; ++kl) {
        if (kf == 0 && kl == 0) continue;
        const int first = kf > 0 ? m - kf : 0, last = kl > 0 ? m - kl : 0;
        if ((kf > 0 && first < 1) || (kl > 0 && last < 1)) continue;
        const int middle = pp - (kf > 0) - (kl > 0);
        if (L - first - last == m * middle) uneven(first, last);
      }
    }
  }
  return out;
}

}  // namespace

void Rejections::Add(const std::string& reason, const std::function<std::string()>& example,
                     int64_t count) {
  auto [it, inserted] = counts.emplace(reason, 0);
  it->second += count;
  if (inserted) examples[reason] = example();
}

int64_t Rejections::total() const {
  int64_t n = 0;
  for (const auto& [reason, count] : counts) n += count;
  return n;
}

std::string Describe(const ParallelConfig& p) {
  std::string text = p.cp > 1 ? fmt::format("tp {} x cp {} {} x pp {} x dp {}", p.tp, p.cp,
                                            Name(p.cp_comm), p.pp, p.dp)
                              : fmt::format("tp {} x pp {} x dp {}", p.tp, p.pp, p.dp);
  if (p.ep > 1 || p.etp > 0) text += ExpertGridText(p, /*lower=*/true);
  text += fmt::format(", mbs {}, {}", p.micro_batch_size, Name(p.schedule));
  if (p.schedule == Schedule::kInterleaved) text += fmt::format(" v={}", p.virtual_stages);
  if (p.first_stage_layers > 0) text += fmt::format(", first {}", p.first_stage_layers);
  if (p.last_stage_layers > 0) text += fmt::format(", last {}", p.last_stage_layers);
  if (!p.layout.empty()) text += fmt::format(", layout {}", PipelineLayoutText(p.layout, 0));
  if (p.account_for_embedding) text += ", emb-in-split";
  if (p.account_for_loss) text += ", loss-in-split";
  if (p.sequence_parallel) text += ", sp";
  if (p.recompute != Recompute::kNone) text += fmt::format(", {} recompute", Name(p.recompute));
  if (p.recompute == Recompute::kSelective && p.recompute_modules != kRecomputeCoreAttn) {
    text += fmt::format(" ({})", RecomputeModulesText(p.recompute_modules, '+'));
  }
  if (p.recompute_num_layers > 0) text += fmt::format(" ({} per chunk)", p.recompute_num_layers);
  if (p.fsdp != Fsdp::kNone) {
    text += fmt::format(", fsdp {}", Name(p.fsdp));
  } else if (p.distributed_optimizer) {
    text += ", dist-opt";
  }
  return text;
}

std::string SizesText(const ParallelConfig& p) {
  std::string text = p.cp > 1 ? fmt::format("TP {} x CP {} {} x PP {} x DP {}", p.tp, p.cp,
                                            Name(p.cp_comm), p.pp, p.dp)
                              : fmt::format("TP {} x PP {} x DP {}", p.tp, p.pp, p.dp);
  if (p.ep > 1 || p.etp > 0) text += ExpertGridText(p);
  return text;
}

std::string ShardingText(const ParallelConfig& p) {
  switch (p.fsdp) {
    case Fsdp::kNone:
      return p.distributed_optimizer ? "dist-opt" : "-";
    case Fsdp::kOptim:
      return "fsdp o";
    case Fsdp::kOptimGrads:
      return "fsdp o+g";
    case Fsdp::kOptimGradsParams:
      return "fsdp o+g+p";
  }
  return "?";
}

std::string SplitText(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  if (!p.layout.empty()) return PipelineLayoutText(p.layout, plan.model.mtp_num_layers);
  if (p.first_stage_layers > 0 || p.last_stage_layers > 0) {
    const LayerSplit split = SplitLayers(plan.model.num_layers, p);
    std::vector<int> per_stage(p.pp, 0);
    for (size_t vs = 0; vs < split.layers.size(); ++vs) per_stage[vs % p.pp] += split.layers[vs];
    return UnevenSplitText(per_stage);
  }
  if (p.account_for_embedding && p.account_for_loss) return "emb+loss";
  if (p.account_for_embedding) return "emb";
  if (p.account_for_loss) return "loss";
  return "even";
}

std::vector<ParallelConfig> PipelineSplits(int L, int pp) {
  std::vector<ParallelConfig> candidates = SplitCandidates(L, pp);
  // Splits that put the same layers on every stage are one candidate (at pp = 2 the embedding
  // and the loss counted as layers is the even split); the first one listed stays.
  std::vector<ParallelConfig> out;
  std::set<std::vector<int>> seen;
  for (ParallelConfig s : candidates) {
    s.pp = pp;
    if (!seen.insert(SplitLayers(L, s).layers).second) continue;
    s.pp = 1;
    out.push_back(s);
  }
  return out;
}

namespace {

// A MoE model's (ep, etp) pairs: ep dividing the experts, etp 1 or tp, the expert grid
// etp x ep x pp dividing the GPUs (no other pair passes Megatron's rules; a pair the user fixes
// is examined to say why). A dense model: ep 1 and etp unset.
std::vector<std::pair<int, int>> ExpertLayouts(const ModelSpec& m, int64_t gpus, int tp, int pp,
                                               const SearchConstraints& c) {
  if (!m.moe()) return {{c.ep.value_or(1), c.etp.value_or(0)}};
  std::vector<std::pair<int, int>> out;
  std::vector<int> etps = {1};
  if (tp > 1) etps.push_back(tp);
  if (c.etp) etps = {*c.etp};
  for (int etp : etps) {
    for (int64_t ep : Divisors(m.num_experts)) {
      if (!Allowed(c.ep, ep) || (c.max_ep > 0 && ep > c.max_ep)) continue;
      if (gpus % (int64_t{etp} * ep * pp) != 0 && !(c.ep && c.etp)) continue;
      out.emplace_back(static_cast<int>(ep), etp);
    }
  }
  return out;
}

// The model-chunk counts an interleaved schedule can use with `split`: v > 1 dividing every
// pipeline rank's layers (Megatron's per-rank divisibility rules).
std::vector<int64_t> ChunkCounts(int L, int pp, const ParallelConfig& split) {
  int g = 0;
  if (split.first_stage_layers > 0 || split.last_stage_layers > 0) {
    int rest = L, middle = pp;
    if (split.first_stage_layers > 0)
      rest -= split.first_stage_layers, --middle, g = split.first_stage_layers;
    if (split.last_stage_layers > 0) {
      rest -= split.last_stage_layers, --middle;
      g = std::gcd(g, split.last_stage_layers);
    }
    if (middle > 0) g = std::gcd(g, rest / middle);
  } else {
    const int total = L + split.account_for_embedding + split.account_for_loss;
    if (total % pp == 0) g = total / pp;
  }
  std::vector<int64_t> out;
  if (g <= 0) return out;
  for (int64_t v : Divisors(g)) {
    if (v > 1) out.push_back(v);
  }
  return out;
}

struct Sharding {
  bool distributed_optimizer;
  Fsdp fsdp;
};
constexpr Sharding kShardings[] = {{false, Fsdp::kNone},
                                   {true, Fsdp::kNone},
                                   {true, Fsdp::kOptimGrads},
                                   {true, Fsdp::kOptimGradsParams}};

// Whether the constraints leave sharding `sh` to a layout of `dp` data-parallel replicas.
bool ShardingAllowed(const SearchConstraints& c, const Sharding& sh, int64_t dp) {
  if (c.distributed_optimizer && *c.distributed_optimizer != sh.distributed_optimizer) {
    return false;
  }
  if (c.fsdp ? *c.fsdp != sh.fsdp : false) return false;
  // With one data-parallel replica nothing is sharded.
  return !(dp == 1 && sh.distributed_optimizer && !c.distributed_optimizer && !c.fsdp);
}

// ---- EnumerateConfigs' walk: the sizes (tensor, pipeline, context and data-parallel) in
// EnumerateConfigs; per size its micro-batch sizes, layer splits, schedules and model chunks
// (WalkSize); per such layout the knobs below, each candidate checked against Megatron's rules
// (WalkKnobs).

// What the walk reads, and where it counts the candidates broken per rule (RuleTally).
struct ConfigWalk {
  const ModelSpec& model;
  const TrainingSpec& training;
  int64_t num_gpus;
  const SearchConstraints& c;
  const std::function<void(const ParallelConfig&)>& visit;
  const CostOptions& options;
  RuleTally& tally;
};

// One tensor x pipeline x context x data-parallel size of the GPUs, with what its candidates
// share: the exchanges of context parallelism (one, unused, without it) and the expert layouts.
struct LayoutSize {
  int64_t tp, pp, cp, dp;
  std::vector<CpComm> comms;
  std::vector<std::pair<int, int>> experts;  // (ep, etp), ExpertLayouts
  std::vector<ParallelConfig> splits;        // LayerSplits
};

// The layer splits for `pp` pipeline stages; with none possible, the even split carries the
// rejection. A layout the user gives (--fix layout=...) is the split, for pp dividing it (else
// there is none).
std::vector<ParallelConfig> LayerSplits(const ConfigWalk& walk, int64_t pp) {
  const SearchConstraints& c = walk.c;
  std::vector<ParallelConfig> splits;
  if (c.layout) {
    if (c.layout->size() % static_cast<size_t>(pp) == 0) {
      splits.push_back(ParallelConfig{.layout = *c.layout});
    }
    return splits;
  }
  for (const ParallelConfig& s : PipelineSplits(walk.model.num_layers, static_cast<int>(pp))) {
    // A hybrid model's stack splits its layers alone (the rules refuse the account-for
    // options there).
    if (walk.model.hybrid() && (s.account_for_embedding || s.account_for_loss)) continue;
    if (!c.uneven || *c.uneven == UnevenSplit(s)) splits.push_back(s);
  }
  if (splits.empty() && (!c.uneven || !*c.uneven)) splits.push_back(ParallelConfig{});
  return splits;
}

// The model-chunk counts `schedule` is examined with for `split` on `pp` stages (`v_list`: the
// split's counts for interleaving, or its layout's); none: the schedule is not examined.
std::vector<int64_t> ScheduleChunks(const ConfigWalk& walk, int64_t pp, const ParallelConfig& split,
                                    const std::vector<int64_t>& v_list, Schedule schedule) {
  const SearchConstraints& c = walk.c;
  // Without a pipeline, zb-h1 and gpipe run exactly as 1f1b: not distinct candidates.
  if (pp == 1 && (schedule == Schedule::kZbH1 || schedule == Schedule::kGpipe) &&
      Contains(c.schedules, Schedule::k1F1B)) {
    return {};
  }
  // A hybrid model has virtual stages only with a layout (Megatron: '|' in its
  // pattern); without one, interleaving is examined only when the user asks for it
  // (to say why not).
  if (walk.model.hybrid() && schedule == Schedule::kInterleaved && split.layout.empty() &&
      !c.virtual_stages && c.schedules.size() > 1) {
    return {};
  }
  // A layout fixes the chunks: interleaved exactly when it has more than one per
  // pipeline rank.
  if (!split.layout.empty()) {
    if ((schedule == Schedule::kInterleaved) != (v_list.front() > 1)) return {};
    return v_list;
  }
  if (schedule == Schedule::kInterleaved) return v_list.empty() ? std::vector<int64_t>{2} : v_list;
  return {1};
}

// Every candidate of one layout: `size`, micro-batch size `mbs`, `split`, `schedule` and `v`
// model chunks, with and without sequence parallelism, each recompute, sharding, exchange of
// context parallelism and expert layout the constraints leave. Each is checked against
// Megatron's rules (`leading`: a rule every one of them breaks); the valid ones are visited, the
// others counted per rule. `p`: the split, its other fields set here. Returns the number
// examined.
int64_t WalkKnobs(ConfigWalk& walk, const LayoutSize& size, int64_t mbs,
                  const std::optional<Rule>& leading, const ParallelConfig& split,
                  Schedule schedule, int64_t v, ParallelConfig& p) {
  const SearchConstraints& c = walk.c;
  int64_t examined = 0;
  for (int sp = 0; sp < 2; ++sp) {
    if (c.sequence_parallel && *c.sequence_parallel != (sp == 1)) continue;
    for (Recompute recompute : c.recomputes) {
      for (const Sharding& sh : kShardings) {
        if (!ShardingAllowed(c, sh, size.dp)) continue;
        for (CpComm comm : size.comms) {
          for (auto [ep, etp] : size.experts) {
            p.ep = ep;
            p.etp = etp;
            p.tp = static_cast<int>(size.tp);
            p.pp = static_cast<int>(size.pp);
            p.dp = static_cast<int>(size.dp);
            p.cp = static_cast<int>(size.cp);
            p.cp_comm = comm;
            p.micro_batch_size = static_cast<int>(mbs);
            p.virtual_stages = static_cast<int>(v);
            p.schedule = schedule;
            p.sequence_parallel = sp == 1;
            p.recompute = recompute;
            p.recompute_modules = recompute == Recompute::kSelective && c.recompute_modules
                                      ? *c.recompute_modules
                                      : split.recompute_modules;
            p.distributed_optimizer = sh.distributed_optimizer;
            p.fsdp = sh.fsdp;
            ++examined;
            if (const std::optional<Rule> rule =
                    leading ? leading
                            : FirstBrokenRule(walk.model, walk.training, p, walk.num_gpus,
                                              walk.options)) {
              // Counted per rule here, in the map at the end; the first example met.
              const int r = static_cast<int>(*rule);
              if (walk.tally.broken[r]++ == 0) {
                walk.tally.examples[r] = fmt::format(
                    "{}: {}", Describe(p),
                    CheckParallelConfig(walk.model, walk.training, p, walk.num_gpus, walk.options)
                        .front()
                        .message);
              }
              continue;
            }
            walk.visit(p);
          }
        }
      }
    }
  }
  return examined;
}

// Every candidate of one size and micro-batch size: its layer splits (`splits`), schedules
// and model chunks, each layout's knobs by WalkKnobs. Returns the number examined.
int64_t WalkSize(ConfigWalk& walk, const LayoutSize& size,
                 const std::vector<ParallelConfig>& splits, int64_t mbs) {
  const SearchConstraints& c = walk.c;
  const int64_t pp = size.pp;
  int64_t examined = 0;
  // A leading rule broken here is the first broken rule of every candidate below (most
  // of a large space's rejections: heads not divisible by tp): checked once.
  const std::optional<Rule> leading =
      FirstBrokenLeadingRule(walk.model, walk.training,
                             ParallelConfig{.tp = static_cast<int>(size.tp),
                                            .pp = static_cast<int>(pp),
                                            .dp = static_cast<int>(size.dp),
                                            .cp = static_cast<int>(size.cp),
                                            .micro_batch_size = static_cast<int>(mbs)},
                             walk.num_gpus);
  for (const ParallelConfig& split : splits) {
    // Each candidate below: the split with every other field set (copied once here).
    ParallelConfig p = split;
    const std::vector<int64_t> v_list =
        split.layout.empty() ? ChunkCounts(walk.model.num_layers, static_cast<int>(pp), split)
                             : std::vector<int64_t>{static_cast<int64_t>(split.layout.size()) / pp};
    for (Schedule schedule : c.schedules) {
      for (int64_t v : ScheduleChunks(walk, pp, split, v_list, schedule)) {
        if (!Allowed(c.virtual_stages, v)) continue;
        examined += WalkKnobs(walk, size, mbs, leading, split, schedule, v, p);
      }
    }
  }
  return examined;
}

}  // namespace

void RuleTally::Add(const RuleTally& later) {
  for (int r = 0; r < kNumRules; ++r) {
    if (broken[r] == 0) examples[r] = later.examples[r];
    broken[r] += later.broken[r];
  }
}

void RuleTally::AddTo(Rejections& rejected) const {
  for (int r = 0; r < kNumRules; ++r) {
    if (broken[r] > 0) {
      rejected.Add(
          std::string(RuleId(static_cast<Rule>(r))), [&] { return examples[r]; }, broken[r]);
    }
  }
}

struct ConfigSpace::Part {
  std::shared_ptr<const LayoutSize> size;  // shared by the size's micro-batch sizes
  int64_t mbs;
};

ConfigSpace::~ConfigSpace() = default;

size_t ConfigSpace::parts() const { return parts_.size(); }

ConfigSpace::ConfigSpace(const ModelSpec& model, const TrainingSpec& training, int64_t num_gpus,
                         const SearchConstraints& c, const CostOptions& options)
    : model_(model), training_(training), num_gpus_(num_gpus), c_(c), options_(options) {
  // A walk to find the parts; it visits nothing (LayerSplits reads the walk's inputs alone).
  RuleTally unused;
  const std::function<void(const ParallelConfig&)> none;
  ConfigWalk walk{model, training, num_gpus, c, none, options, unused};
  for (int64_t tp : Divisors(num_gpus)) {
    if (!Allowed(c.tp, tp) || (c.max_tp > 0 && tp > c.max_tp)) continue;
    for (int64_t pp : Divisors(num_gpus / tp)) {
      if (!Allowed(c.pp, pp) || (c.max_pp > 0 && pp > c.max_pp)) continue;
      for (int64_t cp : Divisors(num_gpus / (tp * pp))) {
        if (!Allowed(c.cp, cp) || (c.max_cp > 0 && cp > c.max_cp)) continue;
        // Megatron splits each sequence into 2 cp chunks: no other size can pass its rule (one
        // such size, fixed by the user, is examined to say why).
        if (cp > 1 && model.seq_length % (2 * cp) != 0 && !c.cp) continue;
        const int64_t dp = num_gpus / (tp * pp * cp);
        if (!Allowed(c.dp, dp)) continue;
        // The exchanges of context parallelism; one (unused) without it.
        auto size = std::make_shared<const LayoutSize>(LayoutSize{
            tp, pp, cp, dp, cp > 1 ? c.cp_comms : std::vector<CpComm>{CpComm::kP2p},
            ExpertLayouts(model, num_gpus, static_cast<int>(tp), static_cast<int>(pp), c),
            LayerSplits(walk, pp)});
        // Micro-batch sizes: divisors of GBS / dp; if dp does not divide GBS, none can work,
        // and one candidate (mbs 1) carries the rejection.
        const int64_t gbs = training.global_batch_size;
        for (int64_t mbs : gbs % dp == 0 ? Divisors(gbs / dp) : std::vector<int64_t>{1}) {
          if (!Allowed(c.micro_batch_size, mbs)) continue;
          if (c.max_micro_batch_size > 0 && mbs > c.max_micro_batch_size) continue;
          parts_.push_back(Part{size, mbs});
        }
      }
    }
  }
}

int64_t ConfigSpace::Walk(size_t part, RuleTally& tally,
                          const std::function<void(const ParallelConfig&)>& visit) const {
  PTDP_CHECK(part < parts_.size());
  ConfigWalk walk{model_, training_, num_gpus_, c_, visit, options_, tally};
  const Part& at = parts_[part];
  return WalkSize(walk, *at.size, at.size->splits, at.mbs);
}

int64_t EnumerateConfigs(const ModelSpec& model, const TrainingSpec& training, int64_t num_gpus,
                         const SearchConstraints& c, Rejections& rejected,
                         const std::function<void(const ParallelConfig&)>& visit,
                         const CostOptions& options) {
  const ConfigSpace space(model, training, num_gpus, c, options);
  RuleTally tally;
  int64_t examined = 0;
  for (size_t i = 0; i < space.parts(); ++i) examined += space.Walk(i, tally, visit);
  tally.AddTo(rejected);
  return examined;
}

void ApplyFix(std::string_view assignment, SearchConstraints& c) {
  const size_t eq = assignment.find('=');
  auto fail = [&](const std::string& why) {
    throw InputError({"", 0, "--fix"}, fmt::format("\"{}\": {}", assignment, why),
                     "keys: tp, cp, cp-comm, ep, etp, pp, dp, mbs, v, schedule, sp, recompute, "
                     "recompute-modules, dist-opt, fsdp, uneven, layout; e.g. --fix tp=8");
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
  else if (key == "cp")
    c.cp = number();
  else if (key == "ep")
    c.ep = number();
  else if (key == "layout") {
    const PipelineLayout layout = ParsePipelineLayout(value);
    if (!layout.error.empty()) fail(layout.error);
    c.layout = layout.layers;
  } else if (key == "etp")
    c.etp = number();
  else if (key == "cp-comm" || key == "cp_comm") {
    const auto comm = ValueOf<CpComm>(kCpCommNames, value);
    if (!comm) fail(UnknownValueMessage<CpComm>(kCpCommNames, value));
    c.cp_comms = {*comm};
  } else if (key == "dp")
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
  } else if (key == "recompute-modules" || key == "recompute_modules") {
    // Megatron's module names joined by '+' (',' separates the --compare keys).
    std::string error;
    const uint8_t modules = ParseRecomputeModules(value, &error);
    if (!error.empty()) fail(error);
    c.recompute_modules = modules;
    c.recomputes = {Recompute::kSelective};
  } else if (key == "sp" || key == "sequence-parallel")
    c.sequence_parallel = on_off();
  else if (key == "dist-opt" || key == "distributed-optimizer")
    c.distributed_optimizer = on_off();
  else if (key == "fsdp") {
    const auto f = ValueOf<Fsdp>(kFsdpNames, value);
    if (!f) fail(UnknownValueMessage<Fsdp>(kFsdpNames, value));
    c.fsdp = *f;
    if (*f != Fsdp::kNone) c.distributed_optimizer = true;
  } else if (key == "uneven")
    c.uneven = on_off();
  else
    fail("unknown key");
}

}  // namespace ptdp
