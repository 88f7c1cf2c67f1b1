// Gradient check: the (1, 1, 1) model's backward in fp64 against central finite differences of
// its loss, element by element, for every parameter of the model (a few elements of each), for
// a GPT, a model with Llama's architectural choices and mixtures of experts of each.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/schedule.h"
#include "executor/backend/cpu.h"
#include "executor/comm/comm.h"
#include "executor/model/gpt.h"
#include "executor/model/gpt_params.h"
#include "executor/model/rng.h"
#include "executor/train/data.h"
#include "executor/train/pipeline.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyLayout;
using testing_executor::TinyModel;
using testing_executor::TinyPlan;

struct CheckedModel {
  const char* name;
  bool llama;   // else GPT
  int experts;  // 0: dense
  int tensors;  // parameter tensors of the two layers and the ends
};

void PrintTo(const CheckedModel& m, std::ostream* out) { *out << m.name; }

// GPT (GeLU, LayerNorm, learned positions, tied embeddings, biases) and Llama's choices
// (SwiGLU, RMSNorm, rotary positions, untied output layer, no biases, 4 heads in 2 groups);
// with experts, both layers MoE: 4 experts of width 8, top-2, an 8-wide shared expert, no
// biases (router, shared expert, 4 experts: 2 + 2 x 4 tensors per layer instead of the MLP's).
class GradientCheck : public ::testing::TestWithParam<CheckedModel> {
 protected:
  void SetUp() override {
    TinyModel m;
    m.layers = 2, m.hidden = 16, m.heads = 2, m.seq = 8, m.vocab = 256, m.global_batch = 2;
    if (GetParam().llama) m.llama = true, m.heads = 4, m.groups = 2, m.ffn = 32;
    if (GetParam().experts > 0) {
      m.experts = GetParam().experts, m.topk = 2, m.expert_ffn = 8, m.shared_ffn = 8;
    }
    plan_ = TinyPlan(TinyLayout{}, m);
    backend_ = MakeCpuBackend(1);
    groups_ = MakeProcessGroups(MakeLocalComm(*backend_), plan_.parallel);
    params_ = std::make_unique<GptParams>(plan_.model, plan_.parallel, groups_.coords, DType::kF64,
                                          *backend_);
    params_->Initialize(7);
    // Move every parameter off its initialisation (biases 0, LayerNorm weights 1) so that no
    // term of the backward hides behind a zero or a one.
    std::vector<double> v(static_cast<size_t>(params_->values().numel));
    backend_->Download(params_->values(), v.data());
    const RngStream rng(99, "perturb");
    for (size_t i = 0; i < v.size(); ++i) v[i] += 0.1 * rng.Normal(i);
    backend_->Upload(params_->values(), v.data());
    model_ = std::make_unique<GptModel>(*params_, *backend_, groups_, GptOptions{}, recorder_);
    model_->set_micro_batch_size(1);
    schedule_ = MakeSchedule(Schedule::k1F1B, 1, 2, 1);
    runner_ =
        std::make_unique<PipelineRunner>(*model_, *backend_, *groups_.pp, schedule_, recorder_);
    data_ = std::make_unique<TokenData>(TokenData::FromFile(kDefaultDataFile, 8, 3));
  }

  // The step objective: mean token loss over two sequences; gradients accumulate in grads().
  double Loss() {
    auto batch = [&](int i) {
      std::vector<int32_t> tokens(9);
      data_->TrainSequence(static_cast<uint64_t>(i), 8, tokens.data());
      MicroBatch mb;
      mb.inputs = std::make_shared<Tensor>(*backend_, DType::kI32, std::vector<int64_t>{8},
                                           MemCategory::kActivations);
      mb.targets = std::make_shared<Tensor>(*backend_, DType::kI32, std::vector<int64_t>{8},
                                            MemCategory::kActivations);
      backend_->Upload(mb.inputs->span(), tokens.data());
      backend_->Upload(mb.targets->span(), tokens.data() + 1);
      return mb;
    };
    return runner_->RunStep(batch, 1.0 / 16).loss;
  }

  Plan plan_;
  std::unique_ptr<Backend> backend_;
  ProcessGroups groups_;
  Recorder recorder_;
  std::unique_ptr<GptParams> params_;
  std::unique_ptr<GptModel> model_;
  PipelineSchedule schedule_;
  std::unique_ptr<PipelineRunner> runner_;
  std::unique_ptr<TokenData> data_;
};

TEST_P(GradientCheck, BackwardMatchesFiniteDifferencesInFp64) {
  backend_->Fill(params_->grads(), 0);
  const double loss = Loss();
  EXPECT_NEAR(loss, std::log(256.0), 1.5);  // a perturbed but untrained byte model
  std::vector<double> grads(static_cast<size_t>(params_->grads().numel));
  backend_->Download(params_->grads(), grads.data());

  const double eps = 1e-5;
  int checked = 0;
  double worst = 0;
  const RngStream pick(5, "elements");
  for (const ParamInfo& p : params_->infos()) {
    // Four elements per parameter; for the word embedding, rows of tokens that occur (the
    // others have gradients only through the tied LM head) and padded rows (exactly 0).
    for (int k = 0; k < 4; ++k) {
      const int64_t local = static_cast<int64_t>(
          pick.Below(static_cast<uint64_t>(checked * 7 + k), static_cast<uint64_t>(p.numel)));
      const int64_t flat = p.offset + local;
      const Span one = params_->values().Slice(flat, 1);
      double x = 0;
      backend_->Download(one, &x);
      const double up = x + eps, down = x - eps;
      backend_->Upload(one, &up);
      const double lp = Loss();
      backend_->Upload(one, &down);
      const double lm = Loss();
      backend_->Upload(one, &x);
      const double fd = (lp - lm) / (2 * eps);
      const double g = grads[static_cast<size_t>(flat)];
      const double err = std::abs(fd - g) / std::max({std::abs(fd), std::abs(g), 1e-4});
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-5) << p.name << " element " << local << ": backward " << g
                           << ", finite difference " << fd;
      if (local / p.local_cols >= p.model_rows) {
        EXPECT_EQ(g, 0.0) << p.name << " padding row";
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(params_->infos().size()));
  EXPECT_EQ(checked, GetParam().tensors);  // every parameter tensor of the two layers and ends
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::cout << "gradient check: " << 4 * checked << " elements of " << checked
            << " parameters, worst relative error " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(Models, GradientCheck,
                         ::testing::Values(CheckedModel{"Gpt", false, 0, 28},
                                           CheckedModel{"LlamaStyle", true, 0, 15},
                                           CheckedModel{"GptMoe", false, 4, 38},
                                           CheckedModel{"LlamaStyleMoe", true, 4, 33}),
                         [](const ::testing::TestParamInfo<CheckedModel>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ptdp
