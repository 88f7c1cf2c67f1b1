// Mixture-of-experts pieces in one process: the routing kernels against hand values (top-k with
// ties, the softmax over the chosen and its backward), the dispatcher's layout, a MoE layer of
// identical experts against the dense MLP, the experts' place in each rank's parameters, and
// what CheckExecutable refuses of MoE plans. The layouts themselves are checked under MPI
// (tests/executor/train/mpi_equivalence_test.cc, Equivalence.Moe*) and the backward by finite
// differences (gradient_check_test.cc).
#include "executor/model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/schedule.h"
#include "executor/backend/cpu.h"
#include "executor/model/gpt.h"
#include "executor/model/gpt_params.h"
#include "executor/train/data.h"
#include "executor/train/pipeline.h"
#include "executor/train/trainer.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyModel;
using testing_executor::TinyPlan;

template <typename T>
std::vector<T> Host(Backend& b, const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  b.Download(t.span(), out.data());
  return out;
}

template <typename T>
Tensor Make(Backend& b, DType dtype, std::vector<int64_t> shape, std::vector<T> values) {
  Tensor t(b, dtype, std::move(shape), MemCategory::kWorkspace);
  b.Upload(t.span(), values.data());
  return t;
}

TEST(CpuBackend, RouterTopKBreaksTiesTowardsTheLowerExpertAndSoftmaxesTheChosen) {
  auto b = MakeCpuBackend();
  // Three tokens, four experts, top-2. Row 0: experts 1 and 3 tie at the top; row 1: all tie;
  // row 2: 3 and 1 are the largest logits, of experts 0 and 2.
  const Tensor logits =
      Make<double>(*b, DType::kF64, {3, 4}, {0.5, 2, 1, 2, 1, 1, 1, 1, 3, -1, 1, 0});
  Tensor probs(*b, DType::kF64, {3, 2}, MemCategory::kWorkspace);
  Tensor choice(*b, DType::kI32, {3, 2}, MemCategory::kWorkspace);
  b->RouterTopK(probs.span(), choice.span(), logits.span(), 3, 4, 2);
  EXPECT_EQ(Host<int32_t>(*b, choice), (std::vector<int32_t>{1, 3, 0, 1, 0, 2}));
  // Softmax over the two chosen logits only: equal logits share evenly; 3 vs 1 gives
  // 1 / (1 + e^-2) and e^-2 / (1 + e^-2), not the softmax over all four experts.
  const double big = 1 / (1 + std::exp(-2.0));
  const std::vector<double> p = Host<double>(*b, probs);
  const std::vector<double> want{0.5, 0.5, 0.5, 0.5, big, 1 - big};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(p[i], want[i], 1e-15) << i;

  // Backward: dl_j = p_j (dp_j - sum_i p_i dp_i) at the chosen experts, 0 elsewhere.
  const Tensor dprobs = Make<double>(*b, DType::kF64, {3, 2}, {0.3, -0.2, 0, 0, 1, 0});
  Tensor dlogits(*b, DType::kF64, {3, 4}, MemCategory::kWorkspace);
  b->Fill(dlogits.span(), 7);  // overwritten
  b->RouterTopKBackward(dlogits.span(), dprobs.span(), probs.span(), choice.span(), 3, 4, 2);
  const std::vector<double> dl = Host<double>(*b, dlogits);
  const double g = big * (1 - big);
  const std::vector<double> want_dl{0, 0.125, 0, -0.125, 0, 0, 0, 0, g, 0, -g, 0};
  for (size_t i = 0; i < want_dl.size(); ++i) EXPECT_NEAR(dl[i], want_dl[i], 1e-15) << i;
}

TEST(CpuBackend, RowGatherScatterScaleAndDots) {
  auto b = MakeCpuBackend();
  const Tensor src = Make<float>(*b, DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor index = Make<int32_t>(*b, DType::kI32, {4}, {2, 0, 2, 1});
  Tensor rows(*b, DType::kF32, {4, 2}, MemCategory::kWorkspace);
  b->GatherRows(rows.span(), src.span(), index.span(), 4, 2);
  EXPECT_EQ(Host<float>(*b, rows), (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
  // Rows sharing an index add up: row 2 receives rows 0 and 2.
  Tensor sums(*b, DType::kF32, {3, 2}, MemCategory::kWorkspace);
  b->ScatterAddRows(sums.span(), rows.span(), index.span(), 4, 2);
  EXPECT_EQ(Host<float>(*b, sums), (std::vector<float>{1, 2, 3, 4, 10, 12}));
  const Tensor scale = Make<float>(*b, DType::kF32, {3}, {2, -1, 0.5f});
  b->ScaleRows(sums.span(), scale.span(), 3, 2);
  EXPECT_EQ(Host<float>(*b, sums), (std::vector<float>{2, 4, -3, -4, 5, 6}));
  Tensor dots(*b, DType::kF32, {3}, MemCategory::kWorkspace);
  b->RowDots(dots.span(), sums.span(), src.span(), 3, 2);
  EXPECT_EQ(Host<float>(*b, dots), (std::vector<float>{10, -25, 61}));
}

TEST(Moe, DispatchLayoutSortsCopiesByExpertThenRowsByLocalExpert) {
  // Three tokens, top-2 of four experts on two EP ranks (experts 0-1 and 2-3): token 0 chose
  // experts 1 and 3, token 1 experts 0 and 1, token 2 experts 3 and 2.
  const std::vector<int32_t> choice{1, 3, 0, 1, 3, 2};
  DispatchLayout l = PermuteByExpert(choice, 2, 4, 2);
  // By expert, each expert's copies in token order: e0 {t1}, e1 {t0, t1}, e2 {t2}, e3 {t0, t2}.
  EXPECT_EQ(l.send_token, (std::vector<int32_t>{1, 0, 1, 2, 0, 2}));
  EXPECT_EQ(l.send_slot, (std::vector<int32_t>{2, 0, 3, 5, 1, 4}));
  EXPECT_EQ(l.expert_counts, (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(l.send_rows, (std::vector<int64_t>{3, 3}));

  // ETP rank 1 of 2, two EP ranks, two local experts: counts[(s ep + i) E_l + e] for the rows
  // EP rank i sent to ETP rank s for expert e.
  SortByLocalExpert({1, 2, 0, 3, /*s1:*/ 2, 0, 1, 1}, 1, 2, 2, 2, &l);
  EXPECT_EQ(l.recv_rows, (std::vector<int64_t>{2, 2}));    // this ETP rank's all-to-all
  EXPECT_EQ(l.gather_rows, (std::vector<int64_t>{6, 4}));  // each ETP rank's share
  EXPECT_EQ(l.expert_rows, (std::vector<int64_t>{4, 6}));
  // Gathered rows: s0 [e0: 0 | e1: 1 2 | - | e1: 3 4 5], s1 [e0: 6 7 | - | e0: 8 | e1: 9];
  // expert 0's rows come first, each expert's in (ETP rank, EP rank) order.
  EXPECT_EQ(l.sort_index, (std::vector<int32_t>{0, 6, 7, 8, 1, 2, 3, 4, 5, 9}));
  EXPECT_EQ(l.unsort_index, (std::vector<int32_t>{0, 4, 5, 6, 7, 8, 1, 2, 3, 9}));
  EXPECT_EQ(l.rows(), 10);
}

// One (1, 1, 1) training step in fp64 of `plan` with `params` (gradients left in them): the
// mean token loss over two sequences of GPL-3.
double TrainStep(const Plan& plan, GptParams& params, Backend& b) {
  ProcessGroups groups = MakeProcessGroups(MakeLocalComm(b), plan.parallel);
  Recorder recorder;
  GptModel model(params, b, groups, GptOptions{}, recorder);
  const PipelineSchedule schedule = MakeSchedule(Schedule::k1F1B, 1, 2, 1);
  PipelineRunner runner(model, b, *groups.pp, schedule, recorder);
  const int64_t seq = plan.model.seq_length;
  const TokenData data = TokenData::FromFile(kDefaultDataFile, static_cast<int>(seq), 3);
  auto batch = [&](int i) {
    std::vector<int32_t> tokens(static_cast<size_t>(seq + 1));
    data.TrainSequence(static_cast<uint64_t>(i), static_cast<int>(seq), tokens.data());
    MicroBatch mb;
    mb.inputs = std::make_shared<Tensor>(b, DType::kI32, std::vector<int64_t>{seq},
                                         MemCategory::kActivations);
    mb.targets = std::make_shared<Tensor>(b, DType::kI32, std::vector<int64_t>{seq},
                                          MemCategory::kActivations);
    b.Upload(mb.inputs->span(), tokens.data());
    b.Upload(mb.targets->span(), tokens.data() + 1);
    return mb;
  };
  return runner.RunStep(batch, 1.0 / static_cast<double>(2 * seq)).loss;
}

// An independent check of the MoE layer against the dense MLP: with every expert a copy of a
// dense model's MLP, each token's top-2 copies are weighted by a softmax that sums to 1, so
// the MoE model computes the dense model's loss, and its gradients: the same for every
// parameter the two share, the experts' summing to the MLP's, and the router's 0 (the routing
// weights' gradients cancel). The routing itself (random router) is whatever it is.
TEST(Moe, IdenticalExpertsReproduceTheDenseMlp) {
  auto b = MakeCpuBackend();
  const TinyModel tiny{.layers = 2, .hidden = 16, .heads = 2, .seq = 8, .global_batch = 2};
  Plan dense = TinyPlan({}, tiny);
  dense.model.add_bias_linear = false;
  TinyModel with_experts = tiny;
  with_experts.experts = 4, with_experts.expert_ffn = dense.model.ffn_hidden_size;
  const Plan moe = TinyPlan({}, with_experts);
  GptParams dp(dense.model, dense.parallel, {}, DType::kF64, *b);
  GptParams mp(moe.model, moe.parallel, {}, DType::kF64, *b);
  dp.Initialize(5);
  mp.Initialize(5);
  std::map<std::string, const ParamInfo*> dense_info, moe_info;
  for (const ParamInfo& p : dp.infos()) dense_info[p.name] = &p;
  for (const ParamInfo& p : mp.infos()) moe_info[p.name] = &p;
  auto mlp_of = [](const std::string& name) {  // layers.L.mlp.experts.E.fcN -> layers.L.mlp.fcN
    const size_t at = name.find("experts.");
    if (at == std::string::npos) return std::string();
    return name.substr(0, at) + name.substr(name.find('.', at + 8) + 1);
  };
  for (const ParamInfo& p : mp.infos()) {
    if (const std::string mlp = mlp_of(p.name); !mlp.empty()) {
      b->Copy(mp.Ref(p).value, dp.Ref(*dense_info.at(mlp)).value);
    }
  }
  const double dense_loss = TrainStep(dense, dp, *b);
  const double moe_loss = TrainStep(moe, mp, *b);
  EXPECT_NEAR(moe_loss, dense_loss, 1e-13 * dense_loss);

  auto grads = [&](const GptParams& params, const ParamInfo& p) {
    std::vector<double> g(static_cast<size_t>(p.numel));
    b->Download(params.Ref(p).grad, g.data());
    return g;
  };
  std::map<std::string, std::vector<double>> expert_sums;
  double worst = 0, scale = 0;
  for (const ParamInfo& p : mp.infos()) {
    const std::vector<double> g = grads(mp, p);
    if (p.name.find("router") != std::string::npos) {
      for (const double v : g) EXPECT_NEAR(v, 0, 1e-15) << p.name;
      continue;
    }
    const std::string mlp = mlp_of(p.name);
    if (!mlp.empty()) {
      std::vector<double>& sum = expert_sums[mlp];
      sum.resize(g.size());
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
      continue;
    }
    const std::vector<double> want = grads(dp, *dense_info.at(p.name));
    for (size_t i = 0; i < g.size(); ++i) {
      worst = std::max(worst, std::abs(g[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
  }
  ASSERT_EQ(expert_sums.size(), 4u);  // fc1 and fc2 of both layers
  for (const auto& [mlp, sum] : expert_sums) {
    const std::vector<double> want = grads(dp, *dense_info.at(mlp));
    for (size_t i = 0; i < sum.size(); ++i) {
      worst = std::max(worst, std::abs(sum[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
  }
  EXPECT_GT(scale, 1e-3);
  EXPECT_LT(worst, 1e-12 * scale);
}

TEST(GptParams, ExpertsLiveOnTheirExpertParallelRanksAsSlicesOfTheFullModel) {
  auto b = MakeCpuBackend();
  const TinyModel moe{.layers = 2, .experts = 4, .shared_ffn = 64, .dense_layers = 1};
  const Plan one = TinyPlan({}, moe);
  // World 4: tp 2 x dp 2 with ep 2 x etp 2: rank r holds experts 2 (r / 2) and 2 (r / 2) + 1,
  // their fc1 rows and fc2 columns of half r % 2.
  const Plan four = TinyPlan({.tp = 2, .dp = 2, .sequence_parallel = true, .ep = 2}, moe);
  GptParams full(one.model, one.parallel, {}, DType::kF32, *b);
  full.Initialize(11);
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : full.infos()) by_name[p.name] = &p;
  std::map<std::string, int> holders;
  for (int r = 0; r < 4; ++r) {
    GptParams shard(four.model, four.parallel, CoordsOf(r, four.parallel), DType::kF32, *b, 2, 1);
    shard.Initialize(11);
    const ChunkParams& chunk = shard.chunk(0);
    EXPECT_FALSE(chunk.layers[0].moe);
    ASSERT_TRUE(chunk.layers[1].moe);
    EXPECT_EQ(chunk.layers[1].experts.size(), 2u);
    EXPECT_EQ(chunk.layers[1].first_expert, 2 * (r / 2));
    // The dense range first (padded to a multiple of 2), then the experts'.
    EXPECT_EQ(shard.dense_range().numel % 2, 0);
    EXPECT_EQ(shard.expert_range().begin, shard.dense_range().numel);
    for (const ParamInfo& s : shard.infos()) {
      ++holders[s.name];
      const bool expert = s.name.find(".experts.") != std::string::npos;
      EXPECT_EQ(s.expert, expert) << s.name;
      const FlatRange range = expert ? shard.expert_range() : shard.dense_range();
      EXPECT_TRUE(s.offset >= range.begin && s.offset + s.numel <= range.begin + range.numel);
      if (expert) {
        const int e = std::stoi(s.name.substr(s.name.find(".experts.") + 9));
        EXPECT_EQ(e / 2, r / 2) << s.name << " on rank " << r;
      }
      ASSERT_TRUE(by_name.count(s.name)) << s.name;
      const ParamInfo& f = *by_name[s.name];
      std::vector<float> full_values(static_cast<size_t>(f.numel)),
          values(static_cast<size_t>(s.numel));
      b->Download(full.Ref(f).value, full_values.data());
      b->Download(shard.Ref(s).value, values.data());
      for (int64_t i = 0; i < s.local_rows; ++i) {
        for (int64_t c = 0; c < s.local_cols; ++c) {
          ASSERT_EQ(
              values[static_cast<size_t>(i * s.local_cols + c)],
              full_values[static_cast<size_t>(FullRow(s, i) * f.local_cols + s.col_begin + c)])
              << s.name << " on rank " << r;
        }
      }
    }
  }
  // Every expert tensor on the two ranks of its ETP pair; router and shared expert on all four.
  EXPECT_EQ(holders["layers.1.mlp.experts.3.fc1.weight"], 2);
  EXPECT_EQ(holders["layers.1.mlp.router.weight"], 4);
  EXPECT_EQ(holders["layers.1.mlp.shared_experts.fc2.weight"], 4);
  EXPECT_EQ(holders.size(), by_name.size());
}

TEST(CheckExecutable, RunsMoePlansAndRefusesWhatItsMoeLayersDoNotImplement) {
  const TinyModel moe{.layers = 2, .experts = 4};
  EXPECT_TRUE(CheckExecutable(TinyPlan({.dp = 2, .ep = 2}, moe), {}).empty());
  EXPECT_TRUE(
      CheckExecutable(TinyPlan({.tp = 2, .dp = 2, .sequence_parallel = true, .ep = 2}, moe), {})
          .empty());
  auto only = [](const Plan& plan) {
    const std::vector<std::string> problems = CheckExecutable(plan, {});
    EXPECT_EQ(problems.size(), 1u);
    return problems.empty() ? std::string() : problems.front();
  };
  EXPECT_EQ(only(TinyPlan({.tp = 2, .dp = 2, .ep = 2}, moe)),
            "parallel.sequence_parallel: a MoE model with tp 2 needs sequence parallelism, so "
            "that each tensor-parallel rank routes its own tokens (Megatron's MoELayer refuses to "
            "train without it)");
  Plan dropping = TinyPlan({}, moe);
  dropping.model.moe_expert_capacity_factor = 1.25;
  EXPECT_EQ(only(dropping),
            "model.moe_expert_capacity_factor: 1.25 drops the tokens beyond each expert's "
            "capacity; the CPU executor runs dropless MoE only (Megatron's default): set it to 0");
  Plan sinkhorn = TinyPlan({}, moe);
  sinkhorn.model.moe_router_load_balancing_type = MoeLoadBalancing::kSinkhorn;
  EXPECT_EQ(only(sinkhorn).rfind("model.moe_router_load_balancing_type: sinkhorn", 0), 0u);
  Plan biases = TinyPlan({}, moe);
  biases.model.add_bias_linear = true;
  EXPECT_EQ(only(biases).rfind("model.add_bias_linear: the CPU executor's MoE layers", 0), 0u);
  Plan shared = TinyPlan({.tp = 2, .sequence_parallel = true}, moe);
  shared.model.moe_shared_expert_intermediate_size = 33;
  EXPECT_EQ(only(shared),
            "model.moe_shared_expert_intermediate_size: 33 is not divisible by tp 2 (the shared "
            "experts are a tensor-parallel MLP)");
  Plan grid = TinyPlan({.dp = 2, .ep = 2}, moe);
  grid.parallel.etp = 3;
  EXPECT_EQ(only(grid).rfind("parallel.etp: etp 3 x ep 2 must divide the 2 ranks", 0), 0u);
  // Not MoE, but not run either: multi-head latent attention and norms on queries and keys.
  Plan mla = TinyPlan({});
  mla.model.multi_latent_attention = true;
  EXPECT_EQ(only(mla).rfind("model.multi_latent_attention: ", 0), 0u);
  Plan qk = TinyPlan({});
  qk.model.qk_layernorm = true;
  EXPECT_EQ(only(qk).rfind("model.qk_layernorm: ", 0), 0u);
  Plan mtp = TinyPlan({});
  mtp.model.mtp_num_layers = 1;
  EXPECT_EQ(only(mtp).rfind("model.mtp_num_layers: 1 multi-token prediction", 0), 0u);
  Plan modules = TinyPlan({});
  modules.parallel.recompute = Recompute::kSelective;
  modules.parallel.recompute_modules = kRecomputeCoreAttn | kRecomputeLayernorm;
  EXPECT_EQ(only(modules).rfind("parallel.recompute_modules: \"core_attn,layernorm\"", 0), 0u);
  Plan relu2 = TinyPlan({});
  relu2.model.activation = Activation::kSquaredRelu;
  EXPECT_EQ(only(relu2).rfind("model.activation: squared_relu is not implemented", 0), 0u);
  Plan hybrid = TinyPlan({});
  hybrid.model.hybrid_layer_pattern = std::string(hybrid.model.num_layers, '*');
  EXPECT_EQ(only(hybrid).rfind("model.hybrid_layer_pattern: hybrid models", 0), 0u);
  Plan no_positions = TinyPlan({});
  no_positions.model.position_embedding = PositionEmbedding::kNone;
  EXPECT_EQ(only(no_positions).rfind("model.position_embedding: none", 0), 0u);
}

}  // namespace
}  // namespace ptdp
