// Fuzz target: the planner on random small workloads. The input's bytes choose a model (written
// as a model file and read back through the model reader, so only what a user could give
// reaches the planner), a cluster preset, a GPU count, a global batch, the precision and a few
// search constraints. Whatever it returns must be right: every ranked plan passes Megatron's
// rules, fits in the memory the search allowed, and simulates to the step time it was ranked
// with; the ranking is in increasing step time. Anything but that or an InputError (a crash, a
// sanitizer report, another exception, a hang) is a finding.
#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/presets.h"
#include "core/spec_yaml.h"
#include "megatron/rules.h"
#include "planner/planner.h"
#include "simulator/simulate.h"

namespace {

// Hands out the input's bytes as small choices; zeros once the input runs out.
class Choices {
 public:
  Choices(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  // A number in [0, n).
  int Pick(int n) {
    const int byte = at_ < size_ ? data_[at_] : 0;
    ++at_;
    return byte % n;
  }
  template <typename T, size_t N>
  const T& From(const T (&options)[N]) {
    return options[Pick(static_cast<int>(N))];
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

std::string ModelYaml(Choices& c) {
  static constexpr int kHeads[] = {1, 2, 3, 4, 8, 12, 16, 32};
  static constexpr int kHeadDims[] = {8, 16, 64, 128};
  static constexpr int kSeqs[] = {16, 128, 1024, 2048, 4096, 32768, 131072};
  static constexpr int kVocabs[] = {1, 1000, 32000, 50257, 128256};
  static constexpr int kExperts[] = {0, 0, 0, 2, 4, 8, 64};
  const int heads = c.From(kHeads);
  const int hidden = heads * c.From(kHeadDims);
  int groups = heads;
  for (int tries = c.Pick(4); tries > 0 && groups % 2 == 0; --tries) groups /= 2;
  const int experts = c.From(kExperts);
  std::string y = fmt::format(
      "name: fuzz\nnum_layers: {}\nhidden_size: {}\nnum_attention_heads: {}\n"
      "num_query_groups: {}\nffn_hidden_size: {}\nvocab_size: {}\nseq_length: {}\n"
      "activation: {}\nnormalization: {}\nposition_embedding: {}\ntied_embeddings: {}\n"
      "add_bias_linear: {}\n",
      1 + c.Pick(24), hidden, heads, groups, hidden * (1 + c.Pick(4)), c.From(kVocabs),
      c.From(kSeqs), c.Pick(2) ? "swiglu" : "gelu", c.Pick(2) ? "rmsnorm" : "layernorm",
      c.Pick(2) ? "rope" : "learned", c.Pick(2) ? "true" : "false", c.Pick(2) ? "true" : "false");
  if (experts > 0) {
    y += fmt::format("num_experts: {}\nmoe_router_topk: {}\nmoe_ffn_hidden_size: {}\n", experts,
                     1 + c.Pick(experts < 4 ? experts : 4), hidden * (1 + c.Pick(2)));
  }
  return y;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Choices c(data, size);
  static constexpr const char* kClusters[] = {"dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100",
                                              "hgx-h200", "cpu-local"};
  static constexpr int kGpus[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 96, 128};
  static constexpr int kBatches[] = {1, 2, 3, 8, 16, 32, 64, 96, 128, 512, 1536};
  static constexpr ptdp::Precision kPrecisions[] = {ptdp::Precision::kBf16, ptdp::Precision::kFp16,
                                                    ptdp::Precision::kFp32};
  try {
    ptdp::PlanRequest req;
    req.model = ptdp::ParseModelYaml(ModelYaml(c), "fuzz.yaml");
    req.cluster = ptdp::ClusterPreset(c.From(kClusters));
    req.gpus = c.From(kGpus);
    req.training.global_batch_size = c.From(kBatches);
    req.training.precision = c.From(kPrecisions);
    req.top_k = 1 + c.Pick(5);
    req.memory_headroom = c.Pick(2) ? 0.1 : 0;
    req.recommend_overlap = c.Pick(2) == 0;
    if (c.Pick(2)) req.constraints.max_pp = 1 + c.Pick(8);
    if (c.Pick(2)) req.constraints.sequence_parallel = c.Pick(2) == 1;
    const ptdp::PlanSearchResult res = ptdp::SearchPlans(req);
    if (res.plans.empty()) {
      (void)ptdp::UnblockHints(req, res);
      return 0;
    }
    double previous = 0;
    for (const ptdp::RankedPlan& ranked : res.plans) {
      const ptdp::Plan& plan = ranked.plan;
      if (!ptdp::CheckParallelConfig(plan.model, plan.training, plan.parallel, req.gpus,
                                     plan.options)
               .empty()) {
        __builtin_trap();  // a ranked plan Megatron would refuse
      }
      const ptdp::SimulationReport again = ptdp::SimulatePlan(plan);
      const double t = again.sim.step_time_s;
      if (!std::isfinite(t) || t <= 0) __builtin_trap();
      if (std::abs(t - ranked.report.sim.step_time_s) > 1e-9 * t) __builtin_trap();
      if (ranked.report.peak_memory_bytes > res.memory_limit_bytes * (1 + 1e-12)) {
        __builtin_trap();  // a plan that does not fit
      }
      if (t < previous * (1 - 1e-12)) __builtin_trap();  // not best first
      previous = t;
    }
  } catch (const ptdp::InputError&) {
    // A model the reader refuses (a size that does not divide, ...): said, not planned.
  }
  return 0;
}
