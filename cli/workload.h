// Flags shared by the commands that take a model, a cluster, a number of GPUs and a batch
// (plan, simulate), and the Megatron-LM flags that change costs but not the layout.
#pragma once

#include <boost/program_options.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "core/cluster_override.h"
#include "core/cluster_spec.h"
#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/text.h"
#include "core/training_spec.h"

namespace ptdp::cli {

struct Workload {
  ModelSpec model;
  ClusterSpec cluster;
  int64_t gpus = 0;
  TrainingSpec training;
  // What the user should know of how the inputs were read, one sentence each (the training
  // sequence length ptdp chose for a Hugging Face config.json); commands print them.
  std::vector<std::string> notes;
};

// --model --cluster --gpus --global-batch --seq-length --precision. With `example_defaults` the
// founding document's example fills what is not given (seed-example, dgx-a100-80gb, 8, 128).
void AddWorkloadOptions(boost::program_options::options_description& options,
                        bool example_defaults);
// ReadWorkload applies --cluster-set to the cluster (ApplyClusterSets).
Workload ReadWorkload(const Flags& flags);

// --cluster-set [CLUSTER:]KEY=VALUE, repeatable (core/cluster_override.h): what-if changes to
// the hardware profile. AddClusterSetOption declares it (AddWorkloadOptions does, for plan and
// simulate), with `several_clusters` wording the help for a command of several clusters;
// ReadClusterSets reads every one given, in order (errors name the flag and the key);
// ApplyClusterSets applies them to a command's one cluster, refusing a CLUSTER: prefix that
// names another.
void AddClusterSetOption(boost::program_options::options_description& options,
                         bool several_clusters = false);
std::vector<ClusterOverride> ReadClusterSets(const Flags& flags);
void ApplyClusterSets(const Flags& flags, ClusterSpec& cluster);

// --fp8-recipe --num-layers-at-start-in-bf16 --num-layers-at-end-in-bf16 --fp8-param-gather
// into `training` (refused unless its precision is fp8); fp8 on a GPU without FP8 units is
// refused, naming --precision.
void ReadFp8Flags(const Flags& flags, TrainingSpec& training, const ClusterSpec& cluster);

// --threads N: the threads a search runs on (planner.h PlanRequest::threads); by default the
// cores this process may run on (sched_getaffinity), at most kMaxThreads.
inline constexpr int kMaxThreads = 256;
void AddThreadsOption(boost::program_options::options_description& options);
int ReadThreads(const Flags& flags);
int DefaultThreads();

// --memory-unit GiB | GB: how memory is shown (GiB, 2^30 bytes, by default, as PyTorch and
// Megatron-LM report it; GB = 1e9 on request). JSON keeps bytes.
void AddMemoryUnitOption(boost::program_options::options_description& options);
MemoryUnit ReadMemoryUnit(const Flags& flags);

// Megatron's --num-layers-per-virtual-pipeline-stage N, when given: the virtual stages per
// pipeline rank, (layers / pp) / N, with the embedding and the loss counted as layers where
// the account-for flags (or `p`) say so. Refused in Megatron's words, naming the flag, when pp
// does not divide the layers, N does not divide a stage's layers, --virtual-stages is given too,
// or the split is uneven (first / last stage layers).
std::optional<int> VirtualStagesFromLayers(const Flags& flags, int num_layers,
                                           const ParallelConfig& p);

// --megatron-version --attention-backend --overlap-grad-reduce --overlap-param-gather
// --ddp-bucket-size --tp-comm-overlap --overlap-p2p-communication (Megatron's names). The flags
// given change `base` (a plan file's options, or Megatron-Core's defaults); --megatron-version
// first replaces it with that stack's preset.
void AddCostOptions(boost::program_options::options_description& options);
CostOptions ReadCostOptions(const Flags& flags, const CostOptions& base = {});

}  // namespace ptdp::cli
