// Layout equivalence under MPI: a tiny GPT (8 layers, hidden 64, 4 heads, sequence 32, global
// batch 8) trained 10 steps on GPL-3 bytes with one layout must give the per-step losses of the
// single-process (1, 1, 1) run within 1e-5 relative, and the same final parameters (gathered
// into the full model) within 1e-5.
//
// Run under mpirun with as many ranks as the layout has (tests/executor/CMakeLists.txt picks
// one test per job with --gtest_filter); a test whose layout does not match the world skips.
// Every rank trains; world rank 0 then trains the reference in-process (one-rank groups) and
// compares. The job fails when any rank fails.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <string>

#include "executor/backend/cpu.h"
#include "executor/comm/comm.h"
#include "executor/comm/mpi.h"
#include "executor/comm/topology.h"
#include "executor/train/trainer.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyLayout;
using testing_executor::TinyModel;
using testing_executor::TinyPlan;

MpiSession* g_session = nullptr;

constexpr int kSteps = 10;

ExecuteResult Train(const Plan& plan, DType dtype, ProcessGroups& groups, Backend& backend,
                    bool keep_trace = false) {
  ExecuteOptions options;
  options.steps = kSteps;
  options.gather_parameters = true;
  options.dtype = dtype;
  options.keep_trace = keep_trace;
  return Execute(plan, options, groups, backend, nullptr);
}

// fp32: the bar. fp64: the same runs agree to rounding (about 1e-16 in the losses and
// 1e-13 in the parameters), which shows that the fp32 differences are rounding, amplified in
// the parameters by Adam's normalisation of tiny gradients (about 0.02 lr after 10 steps).
// bf16 / fp16 against the single-process run in the same dtype: a layout sums in another order
// and rounds at other places (a row-parallel linear's two partial outputs are each rounded to 16
// bits before their fp32 sum, where one process rounds the whole product once), so activations
// differ by an ulp here and there (2^-8 relative in bf16, 2^-11 in fp16). Measured: the mean
// losses within 2.5e-5 relative over 10 steps; 1e-3 leaves a factor 40 and still catches a
// wrong reduction, a missing gradient or a wrong loss scale (each off by far more). The gathered
// parameters are the 16-bit weights: where two runs' fp32 main weights straddle a rounding
// boundary they differ by one ulp of the weight (2^-7 for the norms' weights in [1, 2), measured
// on final_ln.weight of the MoE model), so 1e-2 absolute: one ulp there, several elsewhere.
// With --overlap-grad-reduce every rank starts a gradient reduction during its last
// backward: before its last B ends in the last step (a split backward's W ops report per chunk,
// after the op, so this holds without them).
void ExpectOverlapped(const ExecuteResult& got) {
  std::map<int, double> step_start, last_backward_end, first_reduction;
  const std::string last_step = fmt::format("step {}", kSteps);
  for (const TraceEvent& e : got.events) {
    if (e.name == last_step) step_start[e.track] = e.start_s;
  }
  ASSERT_EQ(step_start.size(), got.ranks.size());
  for (const TraceEvent& e : got.events) {
    if (e.start_s < step_start[e.track]) continue;
    if (e.category == "backward") {
      last_backward_end[e.track] = std::max(last_backward_end[e.track], e.start_s + e.duration_s);
    }
    const bool reduction = e.category == "dp-comm" &&
                           (e.name.find("all-reduce") != std::string::npos ||
                            e.name.find("reduce-scatter") != std::string::npos) &&
                           e.name != "embedding all-reduce";
    if (reduction) {
      const auto [it, first] = first_reduction.try_emplace(e.track, e.start_s);
      it->second = std::min(it->second, e.start_s);
    }
  }
  for (const auto& [track, start] : step_start) {
    ASSERT_TRUE(first_reduction.count(track)) << "rank " << track << " reduced nothing";
    EXPECT_LT(first_reduction[track], last_backward_end[track])
        << "rank " << track << " started its first reduction after its last backward";
  }
}

void ExpectEquivalent(const TinyLayout& layout, DType dtype = DType::kF32,
                      const TinyModel& model = {}) {
  const bool mixed = Is16Bit(dtype);
  const double loss_tolerance = mixed ? 1e-3 : dtype == DType::kF32 ? 1e-5 : 1e-12;
  const double param_tolerance = mixed ? 1e-2 : dtype == DType::kF32 ? 1e-5 : 1e-10;
  const Plan plan = TinyPlan(layout, model);
  if (g_session->world_size() != plan.parallel.world_size()) {
    GTEST_SKIP() << "needs " << plan.parallel.world_size() << " ranks, the job has "
                 << g_session->world_size();
  }
  auto backend = MakeCpuBackend(1);
  ProcessGroups groups = MakeProcessGroups(g_session->World(*backend), plan.parallel);
  const ExecuteResult got =
      Train(plan, dtype, groups, *backend, /*keep_trace=*/layout.overlap_grad_reduce);
  ASSERT_EQ(got.steps.size(), static_cast<size_t>(kSteps));
  if (g_session->world_rank() != 0) return;
  if (layout.overlap_grad_reduce && layout.schedule != Schedule::kZbH1) ExpectOverlapped(got);

  const Plan reference_plan = TinyPlan({}, model);
  auto reference_backend = MakeCpuBackend(1);
  ProcessGroups local =
      MakeProcessGroups(MakeLocalComm(*reference_backend), reference_plan.parallel);
  const ExecuteResult want = Train(reference_plan, dtype, local, *reference_backend);

  double worst_loss = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double a = got.steps[static_cast<size_t>(i)].loss;
    const double b = want.steps[static_cast<size_t>(i)].loss;
    const double rel = std::abs(a - b) / std::abs(b);
    worst_loss = std::max(worst_loss, rel);
    EXPECT_LE(rel, loss_tolerance) << "step " << i + 1 << ": " << a << " vs (1,1,1) " << b;
  }
  EXPECT_LT(want.steps.back().loss, want.steps.front().loss - 0.2) << "the model did not train";

  ASSERT_EQ(got.parameters.size(), want.parameters.size());
  double worst_param = 0;
  std::string worst_name;
  for (const auto& [name, values] : want.parameters) {
    const auto it = got.parameters.find(name);
    ASSERT_NE(it, got.parameters.end()) << name;
    ASSERT_EQ(it->second.size(), values.size()) << name;
    for (size_t k = 0; k < values.size(); ++k) {
      const double diff = std::abs(it->second[k] - values[k]);
      if (diff > worst_param) worst_param = diff, worst_name = name;
    }
  }
  EXPECT_LE(worst_param, param_tolerance) << "largest difference in " << worst_name;
  std::cout << "equivalence: losses within " << worst_loss << " relative, parameters within "
            << worst_param << " (" << worst_name << "); final loss " << got.steps.back().loss
            << " (" << Name(dtype) << ")\n";
  ::testing::Test::RecordProperty("worst_loss_relative", std::to_string(worst_loss));
  ::testing::Test::RecordProperty("worst_parameter_abs", std::to_string(worst_param));
}

TEST(Equivalence, Single) { ExpectEquivalent({}); }
TEST(Equivalence, Tp2) { ExpectEquivalent({.tp = 2}); }
TEST(Equivalence, Pp2) { ExpectEquivalent({.pp = 2}); }
TEST(Equivalence, Dp2) { ExpectEquivalent({.dp = 2}); }
TEST(Equivalence, Tp2Pp2) { ExpectEquivalent({.tp = 2, .pp = 2}); }
TEST(Equivalence, Tp2Pp2Dp2) { ExpectEquivalent({.tp = 2, .pp = 2, .dp = 2}); }
TEST(Equivalence, Pp4Interleaved) {
  ExpectEquivalent({.pp = 4, .virtual_stages = 2, .schedule = Schedule::kInterleaved});
}
TEST(Equivalence, Pp2ZeroBubble) { ExpectEquivalent({.pp = 2, .schedule = Schedule::kZbH1}); }
TEST(Equivalence, Pp2Gpipe) { ExpectEquivalent({.pp = 2, .schedule = Schedule::kGpipe}); }
TEST(Equivalence, Tp2SequenceParallel) { ExpectEquivalent({.tp = 2, .sequence_parallel = true}); }
TEST(Equivalence, Dp2DistributedOptimizer) {
  ExpectEquivalent({.dp = 2, .micro_batch = 2, .distributed_optimizer = true});
}
TEST(Equivalence, Tp2Pp2FullRecompute) {
  ExpectEquivalent({.tp = 2, .pp = 2, .recompute = Recompute::kFull});
}
TEST(Equivalence, Tp2Pp2SelectiveRecompute) {
  ExpectEquivalent({.tp = 2, .pp = 2, .recompute = Recompute::kSelective});
}
// Everything at once on 8 ranks: interleaving needs pp > 2, so tp 2 x pp 4.
TEST(Equivalence, Tp2Pp4InterleavedSequenceParallelSelective) {
  ExpectEquivalent({.tp = 2,
                    .pp = 4,
                    .virtual_stages = 2,
                    .schedule = Schedule::kInterleaved,
                    .sequence_parallel = true,
                    .recompute = Recompute::kSelective});
}
TEST(Equivalence, Tp2Dp2ZeroBubbleDistributedOptimizerFullRecompute) {
  ExpectEquivalent({.tp = 2,
                    .pp = 2,
                    .dp = 2,
                    .schedule = Schedule::kZbH1,
                    .sequence_parallel = true,
                    .recompute = Recompute::kFull,
                    .distributed_optimizer = true});
}

TEST(Equivalence, Fp64Tp2Pp4InterleavedSequenceParallelSelective) {
  ExpectEquivalent({.tp = 2,
                    .pp = 4,
                    .virtual_stages = 2,
                    .schedule = Schedule::kInterleaved,
                    .sequence_parallel = true,
                    .recompute = Recompute::kSelective},
                   DType::kF64);
}
TEST(Equivalence, Fp64Tp2Dp2ZeroBubbleDistributedOptimizerFullRecompute) {
  ExpectEquivalent({.tp = 2,
                    .pp = 2,
                    .dp = 2,
                    .schedule = Schedule::kZbH1,
                    .sequence_parallel = true,
                    .recompute = Recompute::kFull,
                    .distributed_optimizer = true},
                   DType::kF64);
}

// Llama's architectural choices (SwiGLU, RMSNorm, rotary positions, untied output layer, no
// biases) with grouped-query attention: 4 heads in 2 groups, one group per tensor rank.
constexpr TinyModel kLlama{.llama = true, .groups = 2};
TEST(Equivalence, LlamaTp2Pp2) { ExpectEquivalent({.tp = 2, .pp = 2}, DType::kF32, kLlama); }
// Uneven splits: 7 layers as 1 + 2 + 2 + 2 on four stages (Megatron's
// --decoder-first-pipeline-num-layers 1); 10 layers with the embedding and the loss counted as
// layers, interleaved over 4 stages x 3 chunks of one layer, so that the first chunk holds only
// the embedding and the last only the LM head and loss; block recompute of the first layer of
// each chunk.
TEST(Equivalence, Pp4UnevenFirstStage) {
  ExpectEquivalent({.pp = 4, .first_stage_layers = 1}, DType::kF32, {.layers = 7});
}
TEST(Equivalence, LlamaPp4InterleavedEmbeddingAndLossInTheSplit) {
  TinyModel model = kLlama;
  model.layers = 10;
  ExpectEquivalent({.pp = 4,
                    .virtual_stages = 3,
                    .schedule = Schedule::kInterleaved,
                    .account_for_embedding = true,
                    .account_for_loss = true},
                   DType::kF32, model);
}
TEST(Equivalence, Tp2Pp2UnevenLastStageBlockRecompute) {
  ExpectEquivalent({.tp = 2,
                    .pp = 2,
                    .recompute = Recompute::kFull,
                    .last_stage_layers = 3,
                    .recompute_num_layers = 2});
}
TEST(Equivalence, LlamaTp2Pp2Dp2ZeroBubbleSequenceParallelSelectiveDistributedOptimizer) {
  ExpectEquivalent({.tp = 2,
                    .pp = 2,
                    .dp = 2,
                    .schedule = Schedule::kZbH1,
                    .sequence_parallel = true,
                    .recompute = Recompute::kSelective,
                    .distributed_optimizer = true},
                   DType::kF32, kLlama);
}
TEST(Equivalence, Fp64LlamaTp2Pp4InterleavedSequenceParallelFullRecompute) {
  ExpectEquivalent({.tp = 2,
                    .pp = 4,
                    .virtual_stages = 2,
                    .schedule = Schedule::kInterleaved,
                    .sequence_parallel = true,
                    .recompute = Recompute::kFull},
                   DType::kF64, kLlama);
}

// Context parallelism (cp 2): each rank holds two of the four chunks of every sequence
// (positions 0-7 and 24-31 on CP rank 0), and the attention exchanges keys and values over the
// CP group: ring attention (p2p, Megatron's default), all-gather, or all-to-all over the heads.
// The loss and the gradients are sums over the CP group's tokens, so every layout must still
// give the single-process losses and parameters.
// Flash-style attention (the log-sum-exp kept, the softmax recomputed) against the unfused
// single-process reference: the same arithmetic up to rounding.
TEST(Equivalence, FlashTp2Pp2SequenceParallelSelective) {
  ExpectEquivalent({.tp = 2,
                    .pp = 2,
                    .sequence_parallel = true,
                    .recompute = Recompute::kSelective,
                    .attention = AttentionBackend::kFlash});
}
TEST(Equivalence, FlashLlamaTp2Dp2) {
  ExpectEquivalent({.tp = 2, .dp = 2, .attention = AttentionBackend::kFlash}, DType::kF32, kLlama);
}

TEST(Equivalence, Cp2) { ExpectEquivalent({.cp = 2}); }
TEST(Equivalence, Cp2AllGather) {
  ExpectEquivalent({.micro_batch = 2, .cp = 2, .cp_comm = CpComm::kAllGather});
}
TEST(Equivalence, LlamaCp2AllToAll) {
  ExpectEquivalent({.micro_batch = 2, .cp = 2, .cp_comm = CpComm::kA2a}, DType::kF32, kLlama);
}
// cp 4: chunks of 4 tokens; the ring takes 4 steps, every rank sees blocks from both earlier and
// later ranks, and each block's gradients travel 4 hops back to their owner.
TEST(Equivalence, Cp4) { ExpectEquivalent({.micro_batch = 2, .cp = 4}); }
TEST(Equivalence, Cp4AllGather) { ExpectEquivalent({.cp = 4, .cp_comm = CpComm::kAllGather}); }
TEST(Equivalence, Cp4AllToAll) { ExpectEquivalent({.cp = 4, .cp_comm = CpComm::kA2a}); }
// Sequence parallelism splits each CP rank's 16 tokens over TP; selective recompute re-runs the
// ring in the backward.
TEST(Equivalence, LlamaTp2Cp2SequenceParallelSelective) {
  ExpectEquivalent(
      {.tp = 2, .sequence_parallel = true, .recompute = Recompute::kSelective, .cp = 2},
      DType::kF32, kLlama);
}
// Gradients reduce-scattered over dp x cp = 4 ranks, each owning a quarter of the optimizer.
TEST(Equivalence, Cp2Dp2DistributedOptimizerFullRecompute) {
  ExpectEquivalent({.dp = 2,
                    .micro_batch = 2,
                    .recompute = Recompute::kFull,
                    .distributed_optimizer = true,
                    .cp = 2});
}
TEST(Equivalence, Cp2Pp2ZeroBubbleAllToAll) {
  ExpectEquivalent({.pp = 2, .schedule = Schedule::kZbH1, .cp = 2, .cp_comm = CpComm::kA2a});
}
TEST(Equivalence, LlamaCp2Pp4InterleavedAllGather) {
  ExpectEquivalent({.pp = 4,
                    .virtual_stages = 2,
                    .schedule = Schedule::kInterleaved,
                    .cp = 2,
                    .cp_comm = CpComm::kAllGather},
                   DType::kF32, kLlama);
}
// Everything with the ring in fp64: the distributed optimizer shards over the CP ranks alone
// (dp 1), and the tied embedding's two copies live on CP-paired first and last stages.
TEST(Equivalence, Fp64Tp2Cp2Pp2SequenceParallelDistributedOptimizer) {
  ExpectEquivalent(
      {.tp = 2, .pp = 2, .sequence_parallel = true, .distributed_optimizer = true, .cp = 2},
      DType::kF64);
}

// Mixture of experts (2 layers, 4 experts of width 64, top-2 routing, no biases): the router
// and the experts' exchanges must reproduce the single-process run, where every expert is
// local. kMoe is GPT's architecture with both layers MoE; kMoeShared Llama's (SwiGLU experts),
// its first layer dense and the second with a 64-wide shared expert.
constexpr TinyModel kMoe{.layers = 2, .lr = 5e-4, .experts = 4};
constexpr TinyModel kMoeShared{.layers = 2,
                               .lr = 5e-4,
                               .llama = true,
                               .groups = 2,
                               .experts = 4,
                               .shared_ffn = 64,
                               .dense_layers = 1};
// Expert parallelism alone: each of the two DP ranks holds two experts and sends the other
// two's tokens to its peer.
TEST(Equivalence, MoeEp2) { ExpectEquivalent({.dp = 2, .ep = 2}, DType::kF32, kMoe); }
// Four DP ranks, experts over two: expert gradients reduced (and the distributed optimizer's
// expert state sharded) over the expert data-parallel pairs, the rest over all four.
TEST(Equivalence, MoeEp2Dp4DistributedOptimizer) {
  ExpectEquivalent({.dp = 4, .distributed_optimizer = true, .ep = 2}, DType::kF32, kMoe);
}
// tp 2 with sequence parallelism: each TP rank routes its half of the tokens. etp 1: the EP
// group is the TP group and every rank holds whole experts; etp 2 (tp's default): each expert
// split over the TP pair, tokens all-gathered over it after the all-to-all across DP ranks.
TEST(Equivalence, MoeTp2Ep2SequenceParallel) {
  ExpectEquivalent({.tp = 2, .dp = 2, .sequence_parallel = true, .ep = 2, .etp = 1}, DType::kF32,
                   kMoe);
}
TEST(Equivalence, MoeSharedTp2Ep2Etp2SequenceParallel) {
  ExpectEquivalent({.tp = 2, .dp = 2, .sequence_parallel = true, .ep = 2, .etp = 2}, DType::kF32,
                   kMoeShared);
}
TEST(Equivalence, Fp64MoeSharedTp2Ep2Etp2SequenceParallel) {
  ExpectEquivalent({.tp = 2, .dp = 2, .sequence_parallel = true, .ep = 2, .etp = 2}, DType::kF64,
                   kMoeShared);
}
// Pipeline: the dense layer on stage 0 (no experts there), the MoE layer on stage 1; the
// zero-bubble schedule defers the experts' weight gradients, full recompute re-runs the
// exchanges in the backward.
TEST(Equivalence, MoeSharedEp2Pp2ZeroBubbleFullRecompute) {
  ExpectEquivalent(
      {.pp = 2, .dp = 2, .schedule = Schedule::kZbH1, .recompute = Recompute::kFull, .ep = 2},
      DType::kF32, kMoeShared);
}
// Context parallelism: each CP rank routes its two chunks of every sequence. ep 2: the EP group
// is the CP group; ep 4: one expert per rank, the EP group all four (CP and DP ranks).
TEST(Equivalence, MoeEp2Cp2) { ExpectEquivalent({.dp = 2, .cp = 2, .ep = 2}, DType::kF32, kMoe); }
TEST(Equivalence, MoeSharedEp4Cp2AllToAllDistributedOptimizer) {
  ExpectEquivalent(
      {.dp = 2, .distributed_optimizer = true, .cp = 2, .cp_comm = CpComm::kA2a, .ep = 4},
      DType::kF32, kMoeShared);
}

// Mixed precision (bf16, fp16 with its loss scaler) under tensor, pipeline, data, sequence and
// context parallelism, the distributed optimizer (fp32 main weights sharded, 16-bit weights
// all-gathered) and expert parallelism: 16-bit activations cross every kind of exchange (point to
// point, all-gather, reduce-scatter and all-reduce through fp32, all-to-all).
// --overlap-grad-reduce and --overlap-param-gather with small buckets (20,000 parameters, about
// half a layer of this model): each bucket reduced (or reduce-scattered and gathered) as the
// backward completes its layers. Interleaved: buckets that straddle two chunks, the tied
// embedding's held for its sum, the next forward waiting per chunk for its gathered weights.
TEST(Equivalence, OverlapPp4InterleavedDp2DistributedOptimizer) {
  ExpectEquivalent({.pp = 4,
                    .dp = 2,
                    .virtual_stages = 2,
                    .schedule = Schedule::kInterleaved,
                    .distributed_optimizer = true,
                    .overlap_grad_reduce = true,
                    .overlap_param_gather = true,
                    .ddp_bucket_size = 20000});
}
// Sequence parallelism: its tensor-parallel sum runs on the reduce-scattered shards; in fp64
// the layout agrees with one process to rounding.
TEST(Equivalence, Fp64OverlapTp2Pp2Dp2SequenceParallelDistributedOptimizer) {
  ExpectEquivalent({.tp = 2,
                    .pp = 2,
                    .dp = 2,
                    .sequence_parallel = true,
                    .distributed_optimizer = true,
                    .overlap_grad_reduce = true,
                    .overlap_param_gather = true,
                    .ddp_bucket_size = 20000},
                   DType::kF64);
}
// All-reduced buckets (no distributed optimizer) under a split backward: a chunk's buckets
// start after its last W.
TEST(Equivalence, OverlapLlamaPp2Dp2ZeroBubble) {
  ExpectEquivalent({.pp = 2,
                    .dp = 2,
                    .schedule = Schedule::kZbH1,
                    .overlap_grad_reduce = true,
                    .ddp_bucket_size = 20000},
                   DType::kF32, kLlama);
}
// MoE: the expert range's buckets reduce-scattered over the expert data-parallel pairs.
TEST(Equivalence, OverlapMoeEp2Dp4DistributedOptimizer) {
  ExpectEquivalent({.dp = 4,
                    .distributed_optimizer = true,
                    .ep = 2,
                    .overlap_grad_reduce = true,
                    .overlap_param_gather = true,
                    .ddp_bucket_size = 5000},
                   DType::kF32, kMoe);
}

TEST(Equivalence, Bf16Tp2Pp2) { ExpectEquivalent({.tp = 2, .pp = 2}, DType::kBF16); }
TEST(Equivalence, Fp16Tp2Pp2) { ExpectEquivalent({.tp = 2, .pp = 2}, DType::kF16); }
TEST(Equivalence, Bf16LlamaTp2Dp2SequenceParallelDistributedOptimizer) {
  ExpectEquivalent({.tp = 2,
                    .dp = 2,
                    .micro_batch = 2,
                    .sequence_parallel = true,
                    .distributed_optimizer = true},
                   DType::kBF16, kLlama);
}
TEST(Equivalence, Bf16LlamaCp2Pp2) { ExpectEquivalent({.pp = 2, .cp = 2}, DType::kBF16, kLlama); }
TEST(Equivalence, Bf16MoeSharedTp2Ep2Etp2SequenceParallel) {
  ExpectEquivalent({.tp = 2, .dp = 2, .sequence_parallel = true, .ep = 2, .etp = 2}, DType::kBF16,
                   kMoeShared);
}

}  // namespace
}  // namespace ptdp

int main(int argc, char** argv) {
  ptdp::MpiSession session(&argc, &argv);
  ptdp::g_session = &session;
  ::testing::InitGoogleTest(&argc, argv);
  if (session.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  auto backend = ptdp::MakeCpuBackend(1);
  const double any = session.World(*backend)->AllReduceHost(failed, ptdp::ReduceOp::kMax);
  return any > 0 ? 1 : 0;
}
