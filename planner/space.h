// The search space of `ptdp plan`: every PTD-P configuration of a model on N GPUs for a global
// batch, and the constraints users put on it (--fix tp=8, --max-tp 8, --no-recompute, ...).
//
// The space, exactly: tp x cp x pp x dp = N with tp, cp and pp dividing N, and 2 cp dividing the
// sequence (Megatron's split into 2 cp chunks; no other cp can pass its rules); with cp > 1 each
// of the exchanges p2p, a2a and allgather; for a mixture-of-experts model, expert parallelism ep
// dividing the experts with etp 1 or tp (the expert grid etp x ep x pp dividing N); micro-batch
// sizes dividing
// GBS / dp (no other size can divide the global batch); the layer splits of each pp
// (PipelineSplits); schedules 1f1b, zb-h1, and interleaved with every v > 1 dividing each
// stage's layers; sequence parallelism on or off; recompute none, selective or full; data-
// parallel sharding: none, the distributed optimizer, Megatron-FSDP optim_grads and
// optim_grads_params. A hybrid (Mamba) model splits its layers evenly or by first / last stage
// counts, and interleaves only with a layout (Megatron's hybrid stack). Duplicates are left out:
// zb-h1 and gpipe at pp = 1 run exactly as 1f1b, sharding at dp = 1 shards nothing, Megatron-FSDP
// optim is the distributed optimizer's memory and traffic (unless a constraint asks for them). Each
// candidate is checked against Megatron-LM's rules (megatron/rules.h); the ones that break a
// rule are counted under the first rule they break, in Megatron's order.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/plan.h"
#include "core/training_spec.h"
#include "megatron/rules.h"

namespace ptdp {

struct SearchConstraints {
  std::optional<int> tp, pp, dp, micro_batch_size, virtual_stages;  // --fix KEY=VALUE
  std::optional<int> cp, ep, etp;
  std::vector<CpComm> cp_comms = {CpComm::kP2p, CpComm::kA2a, CpComm::kAllGather};
  int max_tp = 0;  // 0: no limit
  int max_pp = 0;
  int max_cp = 0;
  int max_ep = 0;
  int max_micro_batch_size = 0;
  std::vector<Schedule> schedules = {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1};
  std::vector<Recompute> recomputes = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  std::optional<bool> sequence_parallel;      // fixed on or off; unset: both
  std::optional<bool> distributed_optimizer;  // fixed on or off; unset: both
  std::optional<Fsdp> fsdp;                   // fixed; unset: none, optim_grads, optim_grads_params
  std::optional<bool> uneven;                 // off: even splits only; on: uneven only
  std::optional<std::vector<int>> layout;     // a pipeline layout (core ParsePipelineLayout)
  std::optional<uint8_t> recompute_modules;   // selective recompute's modules; unset: core_attn

  bool operator==(const SearchConstraints&) const = default;
};

// Why a candidate is out, counted per reason id ("heads-divisible-by-tp", "out-of-memory", ...),
// each with the first example met.
struct Rejections {
  std::map<std::string, int64_t> counts;
  std::map<std::string, std::string> examples;  // reason id -> "tp 3 pp 4 ...: message"

  void Add(const std::string& reason, const std::function<std::string()>& example,
           int64_t count = 1);
  int64_t total() const;
};

// The layer splits the planner tries for `pp` stages, each a ParallelConfig with only the split
// fields set (first_stage_layers, last_stage_layers, account_for_embedding, account_for_loss):
// the even split when pp divides the layers; Megatron's account-for options (the embedding, the
// loss, or both taking a layer's place) where they divide; and first / last stages with up to
// kUnevenFewer layers fewer than the middle stages (the room the embedding, the LM head and the
// loss take), alone or together.
inline constexpr int kUnevenFewer = 2;
std::vector<ParallelConfig> PipelineSplits(int num_layers, int pp);

// Calls `visit` with every candidate that passes Megatron's rules and the constraints; counts the
// others in `rejected` (candidates a constraint excludes are not counted: they are not in the
// user's space). Returns the number of candidates examined (valid + rejected).
// `options` are the software the plans run (context parallelism needs a flash-style attention).
int64_t EnumerateConfigs(const ModelSpec& model, const TrainingSpec& training, int64_t num_gpus,
                         const SearchConstraints& constraints, Rejections& rejected,
                         const std::function<void(const ParallelConfig&)>& visit,
                         const CostOptions& options = {});

// Candidates broken per Megatron rule, with the first example met of each (the walk counts here
// and adds to a Rejections once, not per candidate).
struct RuleTally {
  std::array<int64_t, kNumRules> broken{};
  std::array<std::string, kNumRules> examples{};

  void Add(const RuleTally& later);  // a tally of candidates met after these
  void AddTo(Rejections& rejected) const;
};

// EnumerateConfigs' space in parts (one tensor x pipeline x context x data-parallel size and
// micro-batch size each) that can be walked independently, on several threads at once: walking
// every part in order visits, counts and exemplifies exactly what EnumerateConfigs does.
// Keeps copies of its arguments.
class ConfigSpace {
 public:
  ConfigSpace(const ModelSpec& model, const TrainingSpec& training, int64_t num_gpus,
              const SearchConstraints& constraints, const CostOptions& options = {});
  ~ConfigSpace();
  ConfigSpace(const ConfigSpace&) = delete;
  ConfigSpace& operator=(const ConfigSpace&) = delete;

  size_t parts() const;
  // Calls `visit` with part `part`'s valid candidates, in EnumerateConfigs' order, and counts
  // the others into `tally`. Returns the number examined. Const and thread-safe.
  int64_t Walk(size_t part, RuleTally& tally,
               const std::function<void(const ParallelConfig&)>& visit) const;

 private:
  struct Part;
  ModelSpec model_;
  TrainingSpec training_;
  int64_t num_gpus_;
  SearchConstraints c_;
  CostOptions options_;
  std::vector<Part> parts_;
};

// "TP 2 x PP 4 x DP 1", "TP 8 x CP 2 p2p x PP 8 x DP 8", "TP 1 x PP 1 x DP 64 (experts: ETP 1 x
// EP 4 x EDP 16)": the sizes, for tables.
std::string SizesText(const ParallelConfig& p);

// "tp 2 x pp 4 x dp 1, mbs 4, 1f1b, sp, selective recompute, dist-opt": one line for people.
std::string Describe(const ParallelConfig& p);

// For tables: "-", "dist-opt", "fsdp o+g", "fsdp o+g+p"; and the layer split: "even",
// "7+8x14+7" (layers per stage), "emb+loss" (counted as layers).
std::string ShardingText(const ParallelConfig& p);
std::string SplitText(const Plan& plan);

// Parses one --fix value ("tp=8", "schedule=interleaved", "sp=on") into `c`; an unknown key or
// bad value throws InputError naming --fix.
void ApplyFix(std::string_view assignment, SearchConstraints& c);

}  // namespace ptdp
