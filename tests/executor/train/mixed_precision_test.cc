// Mixed precision in training (bf16 and fp16 data with fp32 main weights, main_grad and
// optimizer state, as Megatron-LM runs it): the dynamic loss scaler's skip / backoff / growth with
// injected inf and NaN gradients, training that tracks fp32's losses, and memory by category. The
// 16-bit formats and kernels: tests/executor/backend/mixed_precision_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>

#include "executor/backend/cpu.h"
#include "executor/backend/half.h"
#include "executor/backend/measure.h"
#include "executor/comm/comm.h"
#include "executor/comm/topology.h"
#include "executor/model/gpt_params.h"
#include "executor/train/loss_scaler.h"
#include "executor/train/optimizer.h"
#include "executor/train/trainer.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyModel;
using testing_executor::TinyPlan;

constexpr float kInf = std::numeric_limits<float>::infinity();

// --- the loss scaler ---

TEST(LossScaler, MegatronsDynamicGradScalerRule) {
  const LossScalerOptions o{.initial_scale = 1024, .min_scale = 256, .window = 3, .hysteresis = 2};
  LossScalerState s = InitialLossScaler(o);
  EXPECT_EQ(s.scale, 1024);
  EXPECT_EQ(s.hysteresis_tracker, 2);
  s = UpdateLossScaler(s, true, o);  // the first overflow spends hysteresis
  EXPECT_EQ(s.scale, 1024);
  s = UpdateLossScaler(s, true, o);  // the second halves
  EXPECT_EQ(s.scale, 512);
  s = UpdateLossScaler(s, true, o);  // and each further one, down to the minimum
  EXPECT_EQ(s.scale, 256);
  s = UpdateLossScaler(s, true, o);
  EXPECT_EQ(s.scale, 256);
  EXPECT_EQ(s.skipped_steps, 4);
  s = UpdateLossScaler(s, false, o);
  s = UpdateLossScaler(s, false, o);
  EXPECT_EQ(s.growth_tracker, 2);
  s = UpdateLossScaler(s, true, o);  // an overflow restarts the window; no hysteresis left
  EXPECT_EQ(s.growth_tracker, 0);
  EXPECT_EQ(s.scale, 256);
  for (int i = 0; i < 3; ++i) s = UpdateLossScaler(s, false, o);
  EXPECT_EQ(s.scale, 512);  // a full window of clean steps doubles and restores hysteresis
  EXPECT_EQ(s.hysteresis_tracker, 2);
  EXPECT_EQ(s.growth_tracker, 0);
  s = UpdateLossScaler(s, true, o);
  s = UpdateLossScaler(s, false, o);  // a clean step does not restore hysteresis (Megatron's)
  s = UpdateLossScaler(s, true, o);
  EXPECT_EQ(s.scale, 256);
  EXPECT_EQ(s.skipped_steps, 7);
}

std::vector<float> Download32(Backend& b, Span s) {
  std::vector<float> out(static_cast<size_t>(s.numel));
  if (s.dtype == DType::kF32) {
    b.Download(s, out.data());
    return out;
  }
  Tensor wide(b, DType::kF32, {s.numel}, MemCategory::kWorkspace);
  b.Convert(wide.span(), s);
  b.Download(wide.span(), out.data());
  return out;
}

// The optimizer with fp16 parameters and gradients set by hand: an inf or NaN anywhere skips the
// step (parameters unchanged, gradients zeroed) and backs the scale off; clean steps unscale,
// update the fp32 main weights, round them into the model's weights, and grow the scale after
// the window.
TEST(LossScaler, SkipsStepsWithInfOrNanGradientsInTheOptimizer) {
  const Plan plan = TinyPlan({}, {.layers = 1, .hidden = 16, .heads = 2, .seq = 8});
  auto b = MakeCpuBackend();
  ProcessGroups groups = MakeProcessGroups(MakeLocalComm(*b), plan.parallel);
  GptParams params(plan.model, plan.parallel, groups.coords, DType::kF16, *b);
  params.Initialize(5);
  ASSERT_EQ(params.grads().dtype, DType::kF32);
  Recorder recorder;
  TrainingSpec training = plan.training;
  training.lr = 1e-2;
  TrainingOptimizer optimizer(
      params, *b, groups, training, false, false, recorder,
      {.initial_scale = 1024, .min_scale = 1, .window = 2, .hysteresis = 1});
  // Main weights start as the fp16 weights.
  ASSERT_EQ(optimizer.state().size(), 4u);  // m, v, main weights, scaler
  EXPECT_EQ(Download32(*b, optimizer.state()[2]), Download32(*b, params.values()));
  const int64_t n = params.grads().numel;
  auto set_grads = [&](float bad) {
    std::vector<float> g(static_cast<size_t>(n), 1024 * 0.01f);  // 0.01 at scale 1024
    g[static_cast<size_t>(n / 2)] = bad;
    b->Upload(params.grads(), g.data());
  };
  const std::vector<float> before = Download32(*b, params.values());
  set_grads(kInf);
  OptimizerStepInfo info = optimizer.Step(1);
  EXPECT_TRUE(info.skipped);
  EXPECT_EQ(info.loss_scale, 1024);
  EXPECT_EQ(optimizer.loss_scale(), 512);  // hysteresis 1: the first overflow halves
  EXPECT_EQ(Download32(*b, params.values()), before);
  EXPECT_EQ(b->SumSquares(params.grads()), 0.0);
  set_grads(std::nanf(""));
  info = optimizer.Step(2);
  EXPECT_TRUE(info.skipped);
  EXPECT_EQ(optimizer.loss_scale(), 256);
  EXPECT_EQ(Download32(*b, params.values()), before);
  // A clean step at scale 256: gradients of 0.01 each after unscaling.
  std::vector<float> g(static_cast<size_t>(n), 256 * 0.01f);
  b->Upload(params.grads(), g.data());
  info = optimizer.Step(3);
  EXPECT_FALSE(info.skipped);
  EXPECT_EQ(info.loss_scale, 256);
  EXPECT_NEAR(info.grad_norm, 0.01 * std::sqrt(static_cast<double>(params.used_numel())), 1e-6);
  EXPECT_NE(Download32(*b, params.values()), before);
  EXPECT_EQ(optimizer.loss_scale(), 256);
  // The model's weights are the main weights rounded to fp16.
  const std::vector<float> main = Download32(*b, optimizer.state()[2]);
  const std::vector<float> model = Download32(*b, params.values());
  int wrong = 0;
  for (size_t i = 0; i < main.size(); ++i) wrong += model[i] != HalfToFloat(FloatToHalf(main[i]));
  EXPECT_EQ(wrong, 0);
  b->Upload(params.grads(), g.data());
  EXPECT_FALSE(optimizer.Step(4).skipped);
  EXPECT_EQ(optimizer.loss_scale(), 512);  // a window of 2 clean steps
}

// --- training ---

ExecuteResult TrainTiny(DType dtype, int64_t steps, const TinyModel& model = {}) {
  const Plan plan = TinyPlan({}, model);
  auto backend = MakeCpuBackend();
  ProcessGroups groups = MakeProcessGroups(MakeLocalComm(*backend), plan.parallel);
  ExecuteOptions options;
  options.steps = steps;
  options.dtype = dtype;
  return Execute(plan, options, groups, *backend, nullptr);
}

// 10 steps of the tiny GPT and of Llama's architecture: bf16 and fp16 (loss scale 2^16, no
// overflow) follow fp32's losses within 2e-2 relative (the bar). The losses start near
// ln 256 = 5.5 and fall by about 0.3; measured, bf16 stays within 4e-4 relative of fp32 and fp16
// (3 more mantissa bits) within 4e-5.
void ExpectTracksFp32(const TinyModel& model, const char* name) {
  const ExecuteResult fp32 = TrainTiny(DType::kF32, 10, model);
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    const ExecuteResult got = TrainTiny(dtype, 10, model);
    ASSERT_EQ(got.steps.size(), fp32.steps.size());
    double worst = 0;
    std::string line;
    for (size_t i = 0; i < got.steps.size(); ++i) {
      const double rel = std::abs(got.steps[i].loss - fp32.steps[i].loss) / fp32.steps[i].loss;
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 2e-2) << Name(dtype) << " step " << i + 1;
      EXPECT_FALSE(got.steps[i].skipped) << Name(dtype) << " step " << i + 1;
      char pair[40];
      std::snprintf(pair, sizeof(pair), " %.4f/%.4f", got.steps[i].loss, fp32.steps[i].loss);
      line += pair;
    }
    EXPECT_LT(got.steps.back().loss, got.steps.front().loss - 0.2)
        << Name(dtype) << " did not train";
    if (dtype == DType::kF16) {
      EXPECT_EQ(got.steps.back().loss_scale, 65536);
    }
    std::cout << name << " " << Name(dtype) << " vs fp32 losses:" << line << "; worst relative "
              << worst << "\n";
  }
}

TEST(MixedPrecision, Bf16AndFp16TrackFp32) { ExpectTracksFp32({}, "gpt"); }
TEST(MixedPrecision, LlamaBf16AndFp16TrackFp32) {
  ExpectTracksFp32({.llama = true, .groups = 2}, "llama");
}

// Memory by category (Megatron's accounting): the 16-bit weights are half of fp32's, main_grad
// stays fp32, and the optimizer's state adds the fp32 main weights to Adam's two moments (fp16:
// and the loss scaler's 4 values); activations shrink.
TEST(MixedPrecision, MemoryByCategory) {
  std::map<DType, MemoryStats> peak;
  int64_t numel = 0;
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const ExecuteResult r = TrainTiny(dtype, 1);
    ASSERT_EQ(r.ranks.size(), 1u);
    peak[dtype] = r.ranks[0].memory;
    numel = r.ranks[0].parameters;
  }
  auto at = [&](DType dtype, MemCategory c) {
    return peak[dtype].peak_bytes[static_cast<size_t>(c)];
  };
  using C = MemCategory;
  EXPECT_EQ(at(DType::kF32, C::kWeights), 4 * numel);
  EXPECT_EQ(at(DType::kBF16, C::kWeights), 2 * numel);
  EXPECT_EQ(at(DType::kF16, C::kWeights), 2 * numel);
  EXPECT_EQ(at(DType::kBF16, C::kGradients), at(DType::kF32, C::kGradients));
  EXPECT_EQ(at(DType::kF32, C::kOptimizer), 2 * 4 * numel);
  EXPECT_EQ(at(DType::kBF16, C::kOptimizer), 3 * 4 * numel);
  EXPECT_EQ(at(DType::kF16, C::kOptimizer), 3 * 4 * numel + 4 * 8);
  EXPECT_LT(at(DType::kBF16, C::kActivations), at(DType::kF32, C::kActivations));
  std::cout << "peak bytes fp32 / bf16: weights " << at(DType::kF32, C::kWeights) << " / "
            << at(DType::kBF16, C::kWeights) << ", optimizer " << at(DType::kF32, C::kOptimizer)
            << " / " << at(DType::kBF16, C::kOptimizer) << ", activations "
            << at(DType::kF32, C::kActivations) << " / " << at(DType::kBF16, C::kActivations)
            << "\n";
}

}  // namespace
}  // namespace ptdp
