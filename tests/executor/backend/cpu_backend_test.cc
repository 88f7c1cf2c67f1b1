// The CPU backend (executor/backend/cpu.h) against hand-computed values: GEMM, norms and
// activations, the vocab-parallel cross entropy's pieces, memory by category, attention blocks
// composing to causal attention, rotary embeddings and SwiGLU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "executor/backend/cpu.h"
#include "executor/model/rng.h"

namespace ptdp {
namespace {

std::vector<float> Host(Backend& b, Span s) {
  std::vector<float> out(static_cast<size_t>(s.numel));
  b.Download(s, out.data());
  return out;
}

Tensor Make(Backend& b, std::vector<int64_t> shape, std::vector<float> values,
            MemCategory category = MemCategory::kWorkspace) {
  Tensor t(b, DType::kF32, std::move(shape), category);
  if (!values.empty()) b.Upload(t.span(), values.data());
  return t;
}

TEST(CpuBackend, GemmHonoursTransposesAndLeadingDimensions) {
  auto b = MakeCpuBackend();
  // A (2, 3) inside rows of 4; B^T given as (2, 3).
  Tensor a = Make(*b, {8}, {1, 2, 3, 0, 4, 5, 6, 0});
  Tensor bt = Make(*b, {6}, {1, 0, 1, 0, 1, 0});
  Tensor c = Make(*b, {4}, {});
  b->Gemm(false, true, 2, 2, 3, 1.0, a.span(), 4, bt.span(), 3, 0.0, c.span(), 2);
  EXPECT_EQ(Host(*b, c.span()), (std::vector<float>{4, 2, 10, 5}));
}

TEST(CpuBackend, LayerNormAndGelu) {
  auto b = MakeCpuBackend();
  Tensor x = Make(*b, {2, 2}, {1, 3, -2, 2});
  Tensor w = Make(*b, {2}, {2, 1}), bias = Make(*b, {2}, {0, 1});
  Tensor out = Make(*b, {2, 2}, {}), mean = Make(*b, {2}, {}), rstd = Make(*b, {2}, {});
  b->LayerNormForward(out.span(), mean.span(), rstd.span(), x.span(), w.span(), bias.span(), 2, 2,
                      0.0);
  // Row 0: mean 2, std 1 -> xhat (-1, 1); row 1: mean 0, std 2 -> (-1, 1).
  EXPECT_EQ(Host(*b, out.span()), (std::vector<float>{-2, 2, -2, 2}));
  EXPECT_EQ(Host(*b, mean.span()), (std::vector<float>{2, 0}));
  Tensor g = Make(*b, {3}, {});
  Tensor in = Make(*b, {3}, {0, 1, -1});
  b->Gelu(g.span(), in.span());
  const auto gv = Host(*b, g.span());
  EXPECT_FLOAT_EQ(gv[0], 0.0f);
  EXPECT_NEAR(gv[1], 0.8413447, 1e-6);  // x Phi(x)
  EXPECT_NEAR(gv[2], -0.1586553, 1e-6);
}

TEST(CpuBackend, VocabParallelCrossEntropyPieces) {
  auto b = MakeCpuBackend();
  // One row, local vocabulary [2, 5) of which 2 entries are real (the last is padding).
  Tensor logits = Make(*b, {1, 3}, {1, 2, 100});
  Tensor mx = Make(*b, {1}, {}), se = Make(*b, {1}, {}), tl = Make(*b, {1}, {});
  Tensor loss = Make(*b, {1}, {});
  Tensor target(*b, DType::kI32, {1}, MemCategory::kWorkspace);
  const int32_t t = 3;
  b->Upload(target.span(), &t);
  b->CrossEntropyMax(mx.span(), logits.span(), 1, 3, 2);
  EXPECT_EQ(Host(*b, mx.span())[0], 2.0f);  // padding (100) is not a candidate
  b->CrossEntropyExp(logits.span(), se.span(), tl.span(), mx.span(), target.span(), 2, 1, 3, 2);
  EXPECT_EQ(Host(*b, tl.span())[0], 2.0f);
  b->CrossEntropyFinish(logits.span(), loss.span(), se.span(), mx.span(), tl.span(), 1, 3);
  EXPECT_NEAR(Host(*b, loss.span())[0], std::log(std::exp(1.0) + std::exp(2.0)) - 2.0, 1e-6);
  b->CrossEntropyBackward(logits.span(), target.span(), 2, 1, 3, 1.0);
  const auto d = Host(*b, logits.span());
  const double p0 = std::exp(1.0) / (std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(d[0], p0, 1e-6);
  EXPECT_NEAR(d[1], (1 - p0) - 1, 1e-6);
  EXPECT_EQ(d[2], 0.0f);
}

TEST(CpuBackend, AccountsMemoryByCategory) {
  auto b = MakeCpuBackend();
  {
    Tensor w(*b, DType::kF32, {100}, MemCategory::kWeights);
    Tensor a(*b, DType::kF64, {10}, MemCategory::kActivations);
    EXPECT_EQ(b->memory().current_bytes[0], 400);
    EXPECT_EQ(b->memory().current_total_bytes, 480);
  }
  EXPECT_EQ(b->memory().current_total_bytes, 0);
  EXPECT_EQ(b->memory().peak_total_bytes, 480);
  EXPECT_EQ(b->memory().peak_bytes[static_cast<size_t>(MemCategory::kActivations)], 80);
}

// The context-parallel attention kernels against the single-block ones, in fp64: blocks of
// keys merged through their log-sum-exp (in either order) give the causal attention, and the
// blocks' backward passes sum to its gradients.
TEST(CpuBackend, AttentionBlocksComposeToCausalAttention) {
  auto b = MakeCpuBackend();
  const int64_t S = 8, B = 2, H = 4, G = 2, D = 4, W = (H + 2 * G) * D, Wkv = 2 * G * D;
  const int64_t half = S / 2 * B;  // rows of four positions
  auto random = [&](std::vector<int64_t> shape, const char* name) {
    Tensor t(*b, DType::kF64, std::move(shape), MemCategory::kWorkspace);
    std::vector<double> v(static_cast<size_t>(t.numel()));
    const RngStream rng(3, name);
    for (size_t i = 0; i < v.size(); ++i) v[i] = rng.Normal(i);
    b->Upload(t.span(), v.data());
    return t;
  };
  auto zeros = [&](std::vector<int64_t> shape) {
    return Tensor(*b, DType::kF64, std::move(shape), MemCategory::kWorkspace);
  };
  auto host = [&](Span s) {
    std::vector<double> v(static_cast<size_t>(s.numel));
    b->Download(s, v.data());
    return v;
  };
  const Tensor qkv = random({S * B, W}, "qkv"), dctx = random({S * B, H * D}, "dctx");
  Tensor kv = zeros({S * B, Wkv});
  for (int64_t g = 0; g < G; ++g) {  // each group's [k | v] after its two query heads
    b->Copy2D(kv.span().Slice(g * 2 * D, kv.numel() - g * 2 * D), Wkv,
              qkv.span().Slice((g * 4 + 2) * D, qkv.numel() - (g * 4 + 2) * D), W, S * B, 2 * D);
  }
  Tensor ctx = zeros({S * B, H * D}), probs = zeros({B, H, S, S}), dqkv = zeros({S * B, W});
  b->AttentionForward(ctx.span(), probs.span(), qkv.span(), S, B, H, G, D);
  b->AttentionBackward(dqkv.span(), dctx.span(), qkv.span(), probs.span(), S, B, H, G, D);

  auto rows = [](const Tensor& t, int64_t first, int64_t count) {
    const int64_t cols = t.numel() / t.dim(0);
    return t.span().Slice(first * cols, count * cols);
  };
  Tensor bctx = zeros({S * B, H * D}), lse = zeros({S * B, H});
  b->Fill(lse.span(), -std::numeric_limits<double>::infinity());
  // Ring-style: queries 0-3 against keys 0-3 (causal); queries 4-7 against keys 4-7 (causal)
  // and then keys 0-3 (in full).
  b->AttentionBlockForward(rows(bctx, 0, half), rows(lse, 0, half), rows(qkv, 0, half),
                           rows(kv, 0, half), 4, 4, B, H, G, D, true);
  b->AttentionBlockForward(rows(bctx, half, half), rows(lse, half, half), rows(qkv, half, half),
                           rows(kv, half, half), 4, 4, B, H, G, D, true);
  b->AttentionBlockForward(rows(bctx, half, half), rows(lse, half, half), rows(qkv, half, half),
                           rows(kv, 0, half), 4, 4, B, H, G, D, false);
  // All-gather-style: queries 4-7 against keys 0-7 at once, the mask aligned bottom right.
  Tensor gctx = zeros({half, H * D}), glse = zeros({half, H});
  b->Fill(glse.span(), -std::numeric_limits<double>::infinity());
  b->AttentionBlockForward(gctx.span(), glse.span(), rows(qkv, half, half), kv.span(), 4, 8, B, H,
                           G, D, true);
  const auto want = host(ctx.span()), got = host(bctx.span()), gathered = host(gctx.span());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-12) << i;
    if (i >= want.size() / 2) {
      ASSERT_NEAR(gathered[i - want.size() / 2], want[i], 1e-12) << i;
    }
  }

  Tensor dq = zeros({S * B, W}), dkv = zeros({S * B, Wkv});
  b->AttentionBlockBackward(rows(dq, 0, half), rows(dkv, 0, half), rows(dctx, 0, half),
                            rows(bctx, 0, half), rows(lse, 0, half), rows(qkv, 0, half),
                            rows(kv, 0, half), 4, 4, B, H, G, D, true);
  b->AttentionBlockBackward(rows(dq, half, half), rows(dkv, half, half), rows(dctx, half, half),
                            rows(bctx, half, half), rows(lse, half, half), rows(qkv, half, half),
                            rows(kv, half, half), 4, 4, B, H, G, D, true);
  b->AttentionBlockBackward(rows(dq, half, half), rows(dkv, 0, half), rows(dctx, half, half),
                            rows(bctx, half, half), rows(lse, half, half), rows(qkv, half, half),
                            rows(kv, 0, half), 4, 4, B, H, G, D, false);
  const auto full = host(dqkv.span()), q = host(dq.span()), k = host(dkv.span());
  for (int64_t r = 0; r < S * B; ++r) {
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t c = 0; c < 4 * D; ++c) {  // the group's two q heads, then its k and v
        const double want_g = full[static_cast<size_t>(r * W + g * 4 * D + c)];
        const double got_g = c < 2 * D ? q[static_cast<size_t>(r * W + g * 4 * D + c)]
                                       : k[static_cast<size_t>(r * Wkv + g * 2 * D + c - 2 * D)];
        ASSERT_NEAR(got_g, want_g, 1e-12) << "row " << r << " group " << g << " column " << c;
      }
    }
  }
}

TEST(CpuBackend, RotaryAndSwiGluAgainstHandValues) {
  auto b = MakeCpuBackend();
  // One group of one head, D = 4, two positions; q = k = [1, 0, 0, 0], v = 0. At position 1 the
  // first frequency turns by 1 rad: rotate-half pairs element 0 with element 2.
  Tensor qkv = Make(*b, {2, 12}, {1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,  //
                                  1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0});
  b->Rotary(qkv.span(), 2, 1, 1, 1, 4, 10000, 0, false);
  const auto r = Host(*b, qkv.span());
  EXPECT_EQ(r[0], 1.0f);  // position 0 is not rotated
  EXPECT_NEAR(r[12], std::cos(1.0), 1e-6);
  EXPECT_NEAR(r[14], std::sin(1.0), 1e-6);
  EXPECT_NEAR(r[16], std::cos(1.0), 1e-6);  // k too
  EXPECT_EQ(r[20], 0.0f);                   // v untouched
  b->Rotary(qkv.span(), 2, 1, 1, 1, 4, 10000, 0, true);
  EXPECT_NEAR(Host(*b, qkv.span())[12], 1.0, 1e-6);
  // seq_begin shifts the positions (a context-parallel rank's chunk): one token at position 1.
  Tensor one = Make(*b, {1, 12}, {1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0});
  b->Rotary(one.span(), 1, 1, 1, 1, 4, 10000, 1, false);
  EXPECT_NEAR(Host(*b, one.span())[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(Host(*b, one.span())[2], std::sin(1.0), 1e-6);
  Tensor in = Make(*b, {1, 2}, {1, 2}), out = Make(*b, {1, 1}, {});
  b->SwiGlu(out.span(), in.span(), 1, 1);
  EXPECT_NEAR(Host(*b, out.span())[0], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);  // silu(1) * 2
}

}  // namespace
}  // namespace ptdp
