// Mixed precision in the backend (bf16 and fp16 data computed in fp32, as Megatron-LM runs
// them): the 16-bit formats bit for bit on their edge cases (executor/backend/half.h), and every
// CPU kernel on 16-bit data against its fp32 form on the same values (executor/backend/backend.h's
// contract). Training in 16 bits: tests/executor/train/mixed_precision_test.cc.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>

#include "core/error.h"
#include "executor/backend/cpu.h"
#include "executor/backend/half.h"
#include "executor/model/rng.h"

namespace ptdp {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: the tie goes to the even 1; above it, up.
  EXPECT_EQ(FloatToBf16(F(0x3f808000)), 0x3f80);
  EXPECT_EQ(FloatToBf16(F(0x3f808001)), 0x3f81);
  EXPECT_EQ(FloatToBf16(F(0x3f818000)), 0x3f82);  // a tie above the odd 0x3f81: up to even
  EXPECT_EQ(FloatToBf16(F(0x3f817fff)), 0x3f81);
  // fp32's largest finite value rounds up to infinity; bf16's own largest stays.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(F(0x7f7f0000)), 0x7f7f);
  EXPECT_EQ(FloatToBf16(kInf), 0x7f80);
  EXPECT_EQ(FloatToBf16(-kInf), 0xff80);
  // NaN stays a quiet NaN with its sign, even one whose payload is all in the dropped bits.
  EXPECT_EQ(FloatToBf16(F(0x7f800001)), 0x7fc0);
  EXPECT_EQ(FloatToBf16(F(0xffc00000)), 0xffc0);
  // Subnormals round as everything else does.
  EXPECT_EQ(FloatToBf16(F(0x00000001)), 0x0000);
  EXPECT_EQ(FloatToBf16(F(0x00010000)), 0x0001);  // bf16's smallest subnormal, exact
  EXPECT_EQ(FloatToBf16(F(0x00008000)), 0x0000);  // half of it: a tie, to the even 0
  EXPECT_EQ(FloatToBf16(F(0x00018000)), 0x0002);  // 1.5 of it: a tie, to the even 2
  EXPECT_EQ(FloatToBf16(F(0x807fffff)), 0x8080);  // -(largest subnormal) up to -(smallest normal)
  // Widening is exact and every pattern but NaN comes back unchanged.
  int wrong = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (Bits(f) != b << 16) ++wrong;
    if (std::isnan(f) ? !std::isnan(Bf16ToFloat(FloatToBf16(f))) : FloatToBf16(f) != b) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
  // Against rounding done in fp64 (the nearer of the two neighbours, ties to the even one) on
  // 2^20 fp32 patterns spread over every exponent.
  wrong = 0;
  const RngStream rng(1, "bf16");
  for (uint64_t i = 0; i < (1u << 20); ++i) {
    const auto bits = static_cast<uint32_t>(rng.Uniform(i) * 4294967296.0);
    const float f = F(bits);
    if (std::isnan(f) || std::isinf(f)) continue;
    const uint32_t lo = bits & 0xffff0000u, hi = lo + 0x10000u;
    const double dl = std::abs(static_cast<double>(f) - F(lo));
    // hi beyond the largest finite value is infinity, the next value of the format.
    const double dh = (hi & 0x7fffffffu) == 0x7f800000u ? 0x1p128 - std::abs(static_cast<double>(f))
                                                        : std::abs(static_cast<double>(f) - F(hi));
    const uint32_t want = dl < dh ? lo : dh < dl ? hi : ((lo >> 16) & 1u) == 0 ? lo : hi;
    if (FloatToBf16(f) != want >> 16) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
}

TEST(Half, Fp16RoundsToNearestEvenWithSubnormalsInfinityAndNan) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);       // the largest finite value
  EXPECT_EQ(FloatToHalf(F(0x477fefff)), 0x7bff);  // just below 65520
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);       // the tie above 65504 goes to 2^16 = inf
  EXPECT_EQ(FloatToHalf(-1e6f), 0xfc00);
  EXPECT_EQ(FloatToHalf(kInf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-kInf), 0xfc00);
  EXPECT_EQ(FloatToHalf(F(0x3f801000)), 0x3c00);  // 1 + 2^-11: a tie, to the even 1
  EXPECT_EQ(FloatToHalf(F(0x3f803000)), 0x3c02);  // 1 + 3 x 2^-11: a tie, to the even 0x3c02
  EXPECT_EQ(FloatToHalf(F(0x3f801001)), 0x3c01);
  // Normal and subnormal boundaries.
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);       // the smallest normal
  EXPECT_EQ(FloatToHalf(0x1.ff8p-15f), 0x03ff);   // the largest subnormal, 1023 x 2^-24
  EXPECT_EQ(FloatToHalf(F(0x387fe000)), 0x0400);  // 1023.5 x 2^-24: a tie, up to the normal
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);       // the smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);       // half of it: a tie, to the even 0
  EXPECT_EQ(FloatToHalf(F(0x33000001)), 0x0001);  // just above half: up
  EXPECT_EQ(FloatToHalf(0x1.8p-24f), 0x0002);     // 1.5 x 2^-24: a tie, to the even 2
  EXPECT_EQ(FloatToHalf(-0x1.4p-24f), 0x8001);    // -1.25 x 2^-24: down in magnitude
  EXPECT_EQ(FloatToHalf(0x1p-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(F(0x00000001)), 0x0000);  // an fp32 subnormal
  // NaN: quiet, signed, even with the payload only in the dropped bits.
  EXPECT_EQ(FloatToHalf(F(0x7fc00000)), 0x7e00);
  EXPECT_EQ(FloatToHalf(F(0x7f800001)), 0x7e00);
  EXPECT_EQ(FloatToHalf(F(0xffc00000)), 0xfe00);
  EXPECT_EQ(HalfToFloat(0x7c00), kInf);
  EXPECT_EQ(HalfToFloat(0xfc00), -kInf);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(Bits(HalfToFloat(0x8000)), 0x80000000u);
  // Every pattern widens to its value (ldexp of its fields) and comes back unchanged.
  int wrong = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = HalfToFloat(h);
    const int e = static_cast<int>((b >> 10) & 0x1f), m = static_cast<int>(b & 0x3ff);
    const double magnitude = e == 0    ? std::ldexp(m, -24)
                             : e == 31 ? (m == 0 ? kInf : std::nan(""))
                                       : std::ldexp(1024 + m, e - 25);
    const double want = (b & 0x8000) != 0 ? -magnitude : magnitude;
    if (std::isnan(want) ? !std::isnan(f) : static_cast<double>(f) != want) ++wrong;
    if (std::isnan(f) ? !std::isnan(HalfToFloat(FloatToHalf(f))) : FloatToHalf(f) != h) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
#ifdef __FLT16_MAX__
  // Against the compiler's _Float16 conversion (IEEE round to nearest even) on 2^20 patterns.
  wrong = 0;
  const RngStream rng(2, "fp16");
  for (uint64_t i = 0; i < (1u << 20); ++i) {
    const float f = F(static_cast<uint32_t>(rng.Uniform(i) * 4294967296.0));
    if (std::isnan(f)) continue;
    if (FloatToHalf(f) != std::bit_cast<uint16_t>(static_cast<_Float16>(f))) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
#endif
}

// --- kernels: a 16-bit call against the fp32 call on the same values ---

// One argument of a kernel call. kData: the call's data (16-bit in the mixed call); kF32: one of
// executor/backend/backend.h's fp32 spans (statistics, fp32 outputs); kIndex: int32 values in [0,
// limit).
struct Arg {
  enum Kind { kData, kF32, kIndex };
  int64_t numel = 0;
  Kind kind = kData;
  int32_t limit = 0;
  bool positive = false;  // values in (0.5, 1.5) (an rstd)
};
using KernelCall = std::function<void(Backend&, const std::vector<Span>&)>;

uint16_t Round(DType half, float f) {
  return half == DType::kBF16 ? FloatToBf16(f) : FloatToHalf(f);
}
float Widen(DType half, uint16_t b) {
  return half == DType::kBF16 ? Bf16ToFloat(b) : HalfToFloat(b);
}

// Runs `call` on 16-bit data and on fp32 copies of the same values: every argument, input or
// output, must then hold the fp32 run's values rounded to its dtype, bit for bit (the CPU backend
// computes a 16-bit call exactly as its fp32 form; another backend may differ by one ulp).
void ExpectLikeFp32(DType half, const std::vector<Arg>& args, const KernelCall& call) {
  auto b = MakeCpuBackend();
  std::vector<Tensor> mixed, wide;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    const RngStream rng(3, "arg" + std::to_string(i));
    if (a.kind == Arg::kIndex) {
      std::vector<int32_t> v(static_cast<size_t>(a.numel));
      for (size_t j = 0; j < v.size(); ++j) {
        v[j] = static_cast<int32_t>(rng.Uniform(j) * a.limit);
      }
      for (auto* list : {&mixed, &wide}) {
        list->emplace_back(*b, DType::kI32, std::vector<int64_t>{a.numel}, MemCategory::kWorkspace);
        b->Upload(list->back().span(), v.data());
      }
      continue;
    }
    std::vector<float> v(static_cast<size_t>(a.numel));
    std::vector<uint16_t> bits(v.size());
    for (size_t j = 0; j < v.size(); ++j) {
      v[j] = static_cast<float>(a.positive ? 0.5 + rng.Uniform(j) : rng.Normal(j));
      if (a.kind == Arg::kData) bits[j] = Round(half, v[j]), v[j] = Widen(half, bits[j]);
    }
    mixed.emplace_back(*b, a.kind == Arg::kData ? half : DType::kF32, std::vector<int64_t>{a.numel},
                       MemCategory::kWorkspace);
    b->Upload(mixed.back().span(),
              a.kind == Arg::kData ? static_cast<void*>(bits.data()) : v.data());
    wide.emplace_back(*b, DType::kF32, std::vector<int64_t>{a.numel}, MemCategory::kWorkspace);
    b->Upload(wide.back().span(), v.data());
  }
  std::vector<Span> mixed_spans, wide_spans;
  for (size_t i = 0; i < args.size(); ++i) {
    mixed_spans.push_back(mixed[i].span());
    wide_spans.push_back(wide[i].span());
  }
  call(*b, mixed_spans);
  call(*b, wide_spans);
  for (size_t i = 0; i < args.size(); ++i) {
    const int64_t n = args[i].numel;
    int wrong = 0;
    if (args[i].kind == Arg::kIndex) {
      std::vector<int32_t> x(static_cast<size_t>(n)), y(x.size());
      b->Download(mixed_spans[i], x.data());
      b->Download(wide_spans[i], y.data());
      wrong = x == y ? 0 : 1;
    } else {
      std::vector<float> want(static_cast<size_t>(n));
      b->Download(wide_spans[i], want.data());
      if (args[i].kind == Arg::kData) {
        std::vector<uint16_t> got(want.size());
        b->Download(mixed_spans[i], got.data());
        for (size_t j = 0; j < got.size(); ++j) wrong += got[j] != Round(half, want[j]) ? 1 : 0;
      } else {
        std::vector<float> got(want.size());
        b->Download(mixed_spans[i], got.data());
        for (size_t j = 0; j < got.size(); ++j) wrong += Bits(got[j]) != Bits(want[j]) ? 1 : 0;
      }
    }
    EXPECT_EQ(wrong, 0) << "argument " << i;
  }
}

constexpr Arg D(int64_t n) { return {n}; }
constexpr Arg F32(int64_t n, bool positive = false) { return {n, Arg::kF32, 0, positive}; }
constexpr Arg Index(int64_t n, int32_t limit) { return {n, Arg::kIndex, limit}; }

class MixedKernels : public ::testing::TestWithParam<DType> {};

TEST_P(MixedKernels, GemmInFp32WithA16BitOrFp32Result) {
  const DType h = GetParam();
  // C (3, 4) = 1.5 A (3, 5) B^T + 0.5 C, all 16-bit; then dW (3, 4) += A^T B into fp32.
  ExpectLikeFp32(h, {D(15), D(20), D(12)}, [](Backend& b, const std::vector<Span>& s) {
    b.Gemm(false, true, 3, 4, 5, 1.5, s[0], 5, s[1], 5, 0.5, s[2], 4);
  });
  ExpectLikeFp32(h, {D(15), D(20), F32(12)}, [](Backend& b, const std::vector<Span>& s) {
    b.Gemm(true, false, 3, 4, 5, 1.0, s[0], 3, s[1], 4, 1.0, s[2], 4);
  });
}

TEST_P(MixedKernels, NormsWithFp32StatisticsAndParameterGradients) {
  const DType h = GetParam();
  const int64_t n = 6, c = 8;
  ExpectLikeFp32(h, {D(n * c), F32(n), F32(n), D(n * c), D(c), D(c)},
                 [&](Backend& b, const std::vector<Span>& s) {
                   b.LayerNormForward(s[0], s[1], s[2], s[3], s[4], s[5], n, c, 1e-5);
                 });
  ExpectLikeFp32(h, {D(n * c), D(n * c), D(n * c), F32(n), F32(n, true), D(c)},
                 [&](Backend& b, const std::vector<Span>& s) {
                   b.LayerNormBackwardInput(s[0], s[1], s[2], s[3], s[4], s[5], n, c);
                 });
  ExpectLikeFp32(h, {F32(c), F32(c), D(n * c), D(n * c), F32(n), F32(n, true)},
                 [&](Backend& b, const std::vector<Span>& s) {
                   b.LayerNormBackwardParams(s[0], s[1], s[2], s[3], s[4], s[5], n, c);
                 });
  ExpectLikeFp32(h, {D(n * c), F32(n), D(n * c), D(c)},
                 [&](Backend& b, const std::vector<Span>& s) {
                   b.RmsNormForward(s[0], s[1], s[2], s[3], n, c, 1e-5);
                 });
  ExpectLikeFp32(h, {D(n * c), D(n * c), D(n * c), F32(n, true), D(c)},
                 [&](Backend& b, const std::vector<Span>& s) {
                   b.RmsNormBackwardInput(s[0], s[1], s[2], s[3], s[4], n, c);
                 });
  ExpectLikeFp32(h, {F32(c), D(n * c), D(n * c), F32(n, true)},
                 [&](Backend& b, const std::vector<Span>& s) {
                   b.RmsNormBackwardParams(s[0], s[1], s[2], s[3], n, c);
                 });
  // The same parameter gradients may also be 16-bit themselves.
  ExpectLikeFp32(h, {D(c), D(n * c), D(n * c), F32(n, true)},
                 [&](Backend& b, const std::vector<Span>& s) {
                   b.RmsNormBackwardParams(s[0], s[1], s[2], s[3], n, c);
                 });
}

TEST_P(MixedKernels, ElementWiseBiasesAndActivations) {
  const DType h = GetParam();
  const int64_t n = 6, c = 8;
  auto run = [&](std::vector<Arg> args, const KernelCall& call) { ExpectLikeFp32(h, args, call); };
  run({D(n * c), D(c)}, [&](Backend& b, const auto& s) { b.AddBias(s[0], s[1], n, c); });
  run({F32(c), D(n * c)}, [&](Backend& b, const auto& s) { b.BiasGrad(s[0], s[1], n, c); });
  run({D(n * c), D(n * c)}, [&](Backend& b, const auto& s) { b.Gelu(s[0], s[1]); });
  run({D(n * c), D(n * c), D(n * c)},
      [&](Backend& b, const auto& s) { b.GeluBackward(s[0], s[1], s[2]); });
  run({D(n * 4), D(n * 8)}, [&](Backend& b, const auto& s) { b.SwiGlu(s[0], s[1], n, 4); });
  run({D(n * 8), D(n * 8), D(n * 4)},
      [&](Backend& b, const auto& s) { b.SwiGluBackward(s[0], s[1], s[2], n, 4); });
  run({D(n * c), D(n * c)}, [&](Backend& b, const auto& s) { b.Add(s[0], s[1]); });
  run({D(n * c)}, [&](Backend& b, const auto& s) { b.Scale(s[0], 0.37); });
  run({D(n * c)}, [&](Backend& b, const auto& s) { b.Fill(s[0], 0.1); });
  run({D(n * c), D(n)}, [&](Backend& b, const auto& s) { b.ScaleRows(s[0], s[1], n, c); });
  run({D(n), D(n * c), D(n * c)},
      [&](Backend& b, const auto& s) { b.RowDots(s[0], s[1], s[2], n, c); });
  run({D(5 * c), D(n * c), Index(n, 5)},
      [&](Backend& b, const auto& s) { b.ScatterAddRows(s[0], s[1], s[2], n, c); });
  run({D(n * c), D(5 * c), Index(n, 5)},
      [&](Backend& b, const auto& s) { b.GatherRows(s[0], s[1], s[2], n, c); });
  // Sums in fp64 over the widened values: the same numbers.
  auto b = MakeCpuBackend();
  Tensor x(*b, h, {5}, MemCategory::kWorkspace), y(*b, DType::kF32, {5}, MemCategory::kWorkspace);
  const float values[5] = {1.5f, -0.25f, 3.0f, 1024.0f, 0.125f};
  uint16_t bits[5];
  for (int i = 0; i < 5; ++i) bits[i] = Round(h, values[i]);
  b->Upload(x.span(), bits);
  b->Upload(y.span(), values);
  EXPECT_EQ(b->Sum(x.span()), b->Sum(y.span()));
  EXPECT_EQ(b->SumSquares(x.span()), b->SumSquares(y.span()));
}

TEST_P(MixedKernels, EmbeddingsAndPositionsWithFp32Gradients) {
  const DType h = GetParam();
  const int64_t n = 6, c = 8;
  // Vocabulary shard [3, 8) of tokens in [0, 10): some rows outside it.
  ExpectLikeFp32(h, {D(n * c), Index(n, 10), D(5 * c)}, [&](Backend& b, const auto& s) {
    b.EmbeddingForward(s[0], s[1], s[2], 3, 5, n, c);
  });
  ExpectLikeFp32(h, {F32(5 * c), Index(n, 10), D(n * c)}, [&](Backend& b, const auto& s) {
    b.EmbeddingBackward(s[0], s[1], s[2], 3, 5, n, c);
  });
  // 3 local positions from 2 of a table of 6, batch 2.
  ExpectLikeFp32(h, {D(3 * 2 * c), D(6 * c)},
                 [&](Backend& b, const auto& s) { b.AddPositions(s[0], s[1], 2, 3, 2, c); });
  ExpectLikeFp32(h, {F32(6 * c), D(3 * 2 * c)},
                 [&](Backend& b, const auto& s) { b.PositionsBackward(s[0], s[1], 2, 3, 2, c); });
}

TEST_P(MixedKernels, AttentionRotaryAndRouting) {
  const DType h = GetParam();
  // S 4, B 2, H 2 query heads in G 1 group, D 4: qkv (8, 16), ctx (8, 8), probs (2, 2, 4, 4).
  const int64_t s = 4, bt = 2, hh = 2, g = 1, d = 4;
  const int64_t qkv = s * bt * (hh + 2 * g) * d, ctx = s * bt * hh * d, kv = s * bt * 2 * g * d;
  ExpectLikeFp32(h, {D(ctx), D(bt * hh * s * s), D(qkv)}, [&](Backend& b, const auto& x) {
    b.AttentionForward(x[0], x[1], x[2], s, bt, hh, g, d);
  });
  ExpectLikeFp32(h, {D(qkv), D(ctx), D(qkv), D(bt * hh * s * s)}, [&](Backend& b, const auto& x) {
    b.AttentionBackward(x[0], x[1], x[2], x[3], s, bt, hh, g, d);
  });
  // Context parallelism's blocks: the log-sum-exp is fp32.
  ExpectLikeFp32(h, {D(ctx), F32(s * bt * hh), D(qkv), D(kv)}, [&](Backend& b, const auto& x) {
    b.AttentionBlockForward(x[0], x[1], x[2], x[3], s, s, bt, hh, g, d, true);
  });
  ExpectLikeFp32(h, {D(qkv), D(kv), D(ctx), D(ctx), F32(s * bt * hh), D(qkv), D(kv)},
                 [&](Backend& b, const auto& x) {
                   b.AttentionBlockBackward(x[0], x[1], x[2], x[3], x[4], x[5], x[6], s, s, bt, hh,
                                            g, d, false);
                 });
  ExpectLikeFp32(h, {D(qkv)}, [&](Backend& b, const auto& x) {
    b.Rotary(x[0], s, bt, hh, g, d, 10000, 1, false);
  });
  // Top-2 of 4 experts for 6 tokens, in the model's dtype (Megatron's default router dtype).
  ExpectLikeFp32(h, {D(12), Index(12, 4), D(24)},
                 [&](Backend& b, const auto& x) { b.RouterTopK(x[0], x[1], x[2], 6, 4, 2); });
  ExpectLikeFp32(h, {D(24), D(12), D(12), Index(12, 4)}, [&](Backend& b, const auto& x) {
    b.RouterTopKBackward(x[0], x[1], x[2], x[3], 6, 4, 2);
  });
}

TEST_P(MixedKernels, RefusesSpansOutsideTheContract) {
  const DType h = GetParam();
  auto b = MakeCpuBackend();
  Tensor x(*b, h, {4, 2}, MemCategory::kWorkspace), w(*b, h, {2}, MemCategory::kWorkspace);
  Tensor stat16(*b, h, {4}, MemCategory::kWorkspace);
  Tensor stat32(*b, DType::kF32, {4}, MemCategory::kWorkspace);
  Tensor f32(*b, DType::kF32, {4, 2}, MemCategory::kWorkspace);
  // Statistics must be fp32; a GEMM's a and b share a dtype; the cross entropy is fp32 only.
  EXPECT_THROW(b->RmsNormForward(x.span(), stat16.span(), x.span(), w.span(), 4, 2, 1e-5),
               InternalError);
  EXPECT_NO_THROW(b->RmsNormForward(x.span(), stat32.span(), x.span(), w.span(), 4, 2, 1e-5));
  EXPECT_THROW(b->Gemm(false, true, 4, 2, 2, 1, x.span(), 2, f32.span(), 2, 0, f32.span(), 2),
               InternalError);
  EXPECT_THROW(b->Gelu(f32.span(), x.span()), InternalError);
  EXPECT_THROW(b->CrossEntropyMax(stat32.span(), x.span(), 4, 2, 2), InternalError);
}

TEST_P(MixedKernels, ConvertRoundsToNearestEvenBetweenEveryPair) {
  const DType h = GetParam();
  auto b = MakeCpuBackend();
  const std::vector<double> values = {1.0, -2.5, 1e-3, 3.0e4, 1e6, -0.0, 1.0 + 0x1p-40};
  const auto n = static_cast<int64_t>(values.size());
  Tensor f64(*b, DType::kF64, {n}, MemCategory::kWorkspace);
  Tensor f32(*b, DType::kF32, {n}, MemCategory::kWorkspace);
  Tensor half(*b, h, {n}, MemCategory::kWorkspace),
      back(*b, DType::kF64, {n}, MemCategory::kWorkspace);
  b->Upload(f64.span(), values.data());
  b->Convert(f32.span(), f64.span());
  b->Convert(half.span(), f64.span());
  std::vector<float> as_f32(values.size());
  std::vector<uint16_t> as_half(values.size());
  b->Download(f32.span(), as_f32.data());
  b->Download(half.span(), as_half.data());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(Bits(as_f32[i]), Bits(static_cast<float>(values[i])));
    EXPECT_EQ(as_half[i], Round(h, static_cast<float>(values[i]))) << values[i];
  }
  // 16-bit -> fp64 is exact, and back gives the same bits; fp32 -> 16 bits as
  // executor/backend/half.h.
  b->Convert(back.span(), half.span());
  std::vector<double> widened(values.size());
  b->Download(back.span(), widened.data());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(widened[i], static_cast<double>(Widen(h, as_half[i])));
  }
  Tensor again(*b, h, {n}, MemCategory::kWorkspace);
  b->Convert(again.span(), f32.span());
  std::vector<uint16_t> again_bits(values.size());
  b->Download(again.span(), again_bits.data());
  EXPECT_EQ(again_bits, as_half);
  // bf16 <-> fp16 goes through fp32: 1e6 is finite in bf16 and infinite in fp16.
  const DType other = h == DType::kBF16 ? DType::kF16 : DType::kBF16;
  Tensor crossed(*b, other, {n}, MemCategory::kWorkspace);
  b->Convert(crossed.span(), half.span());
  std::vector<uint16_t> crossed_bits(values.size());
  b->Download(crossed.span(), crossed_bits.data());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(crossed_bits[i], Round(other, Widen(h, as_half[i])));
  }
}

INSTANTIATE_TEST_SUITE_P(Bf16AndFp16, MixedKernels, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(Name(info.param)); });

}  // namespace
}  // namespace ptdp
