// The CUDA backend against the CPU reference, kernel by kernel: the same random inputs (fixed
// seeds) on both, the outputs downloaded and compared. Every test skips, saying why, where no
// CUDA device is usable (the build machines and CI have none).
//
// Tolerance: |gpu - cpu| <= tol * max(1, |cpu|), tol = 1e-5 for fp32 and 1e-9 for fp64 (the
// kernels compute in the dtype, as the CPU does, but sum in other orders and use the device's
// exp/erf/log). Products with a reduction of length k > 256 scale tol by k / 256: the rounding
// error of a dot product grows with its length (linearly in the worst case), and cuBLAS and
// OpenBLAS sum in different orders.
//
// 16-bit (bf16, fp16) data: inputs are random values rounded to 16 bits (the same bits on both
// sides); both backends compute the same fp32 math and round each output once, so they differ
// only where the fp32 results' last bits (summation order, device exp) move a rounding across a
// tie: one 16-bit ulp. The 16-bit tolerance is 1e-2 for bf16 (one ulp is at most 2^-7 = 7.8e-3
// relative; the bar is 1e-2) and 2e-3 for fp16 (two ulps of 2^-10). Spans the contract
// keeps in fp32 (Gemm's c, parameter gradients, norm statistics, lse) use the fp32 tolerance.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/backend/backend.h"
#include "executor/backend/cpu.h"
#include "executor/backend/cuda.h"
#include "executor/backend/device.h"
#include "executor/backend/half.h"
#include "executor/comm/comm.h"
#include "executor/comm/topology.h"
#include "executor/train/trainer.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

enum Side { kCpu = 0, kGpu = 1 };
constexpr double kInf = std::numeric_limits<double>::infinity();

double Tol(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 1e-5;
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    default:
      return 1e-9;
  }
}

// One tensor on the CPU reference and its twin on the GPU, holding the same values.
struct Twin {
  Tensor t[2];
  Span operator[](Side s) const { return t[s].span(); }
  Span Slice(Side s, int64_t offset, int64_t count) const {
    return t[s].span().Slice(offset, count);
  }
};

std::vector<double> Host(Backend& b, Span s) {
  std::vector<double> out(static_cast<size_t>(s.numel));
  if (s.dtype == DType::kF64) {
    b.Download(s, out.data());
  } else if (s.dtype == DType::kF32) {
    std::vector<float> f(out.size());
    b.Download(s, f.data());
    for (size_t i = 0; i < f.size(); ++i) out[i] = f[i];
  } else if (Is16Bit(s.dtype)) {
    std::vector<uint16_t> h(out.size());
    b.Download(s, h.data());
    for (size_t i = 0; i < h.size(); ++i) {
      out[i] = s.dtype == DType::kBF16 ? Bf16ToFloat(h[i]) : HalfToFloat(h[i]);
    }
  } else {
    std::vector<int32_t> v(out.size());
    b.Download(s, v.data());
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[i];
  }
  return out;
}

void Put(Backend& b, Span s, const std::vector<double>& values) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), s.numel);
  if (s.dtype == DType::kF64) {
    b.Upload(s, values.data());
  } else if (s.dtype == DType::kF32) {
    std::vector<float> f(values.begin(), values.end());
    b.Upload(s, f.data());
  } else if (Is16Bit(s.dtype)) {  // rounded to 16 bits (through fp32) on the host
    std::vector<uint16_t> h(values.size());
    for (size_t i = 0; i < h.size(); ++i) {
      const auto f = static_cast<float>(values[i]);
      h[i] = s.dtype == DType::kBF16 ? FloatToBf16(f) : FloatToHalf(f);
    }
    b.Upload(s, h.data());
  } else {
    std::vector<int32_t> v(values.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(values[i]);
    b.Upload(s, v.data());
  }
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaStatus status = QueryCuda();
    if (!status.usable) GTEST_SKIP() << "no usable GPU: " << status.reason;
    std::string error;
    b_[kGpu] = MakeCudaBackend(0, &error);
    ASSERT_NE(b_[kGpu], nullptr) << error;
    b_[kCpu] = MakeCpuBackend(1);
  }

  Backend& cpu() { return *b_[kCpu]; }
  Backend& gpu() { return *b_[kGpu]; }

  // Calls f(backend, side) on the CPU, then on the GPU.
  template <typename F>
  void Run(F f) {
    f(cpu(), kCpu);
    f(gpu(), kGpu);
  }

  Twin Make(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values,
            MemCategory category = MemCategory::kWorkspace) {
    Twin w;
    for (Side s : {kCpu, kGpu}) {
      w.t[s] = Tensor(*b_[s], dtype, shape, category);
      if (!values.empty()) Put(*b_[s], w[s], values);
    }
    return w;
  }
  std::vector<double> Uniform(int64_t n, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = u(rng_);
    return v;
  }
  Twin Rand(DType dtype, std::vector<int64_t> shape, double lo = -1, double hi = 1) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return Make(dtype, std::move(shape), Uniform(n, lo, hi));
  }
  Twin Zeros(DType dtype, std::vector<int64_t> shape) { return Make(dtype, std::move(shape), {}); }
  Twin Ints(const std::vector<int32_t>& values) {
    return Make(DType::kI32, {static_cast<int64_t>(values.size())},
                std::vector<double>(values.begin(), values.end()));
  }
  // Makes the GPU twin hold the CPU twin's values (a shared input computed on the CPU).
  void CpuToGpu(const Twin& w) { Put(gpu(), w[kGpu], Host(cpu(), w[kCpu])); }

  // Every element within tol * max(1, |cpu|); equal infinities match.
  void ExpectClose(const Twin& w, double tol, const std::string& what) {
    const std::vector<double> a = Host(cpu(), w[kCpu]), b = Host(gpu(), w[kGpu]);
    ASSERT_EQ(a.size(), b.size()) << what;
    int reported = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == b[i]) continue;
      const double err = std::fabs(a[i] - b[i]);
      if (!(err <= tol * std::max(1.0, std::fabs(a[i]))) && reported++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: cpu " << a[i] << ", gpu " << b[i] << " (|diff| "
                      << err << ", tol " << tol << ")";
      }
    }
  }
  void ExpectEqual(const Twin& w, const std::string& what) { ExpectClose(w, 0, what); }

  std::unique_ptr<Backend> b_[2];
  std::mt19937_64 rng_{20250611};
};

const DType kFloatTypes[] = {DType::kF32, DType::kF64};
const DType k16BitTypes[] = {DType::kBF16, DType::kF16};

// ---------------------------------------------------------------------------------------------
// Memory, copies, whole-tensor reductions

TEST_F(CudaBackendTest, FactoryRefusesADeviceThatDoesNotExist) {
  std::string error;
  EXPECT_EQ(MakeCudaBackend(QueryCuda().device_count, &error), nullptr);
  EXPECT_NE(error.find("no CUDA device"), std::string::npos) << error;
  EXPECT_EQ(MakeCudaBackend(-1, &error), nullptr);
  EXPECT_EQ(gpu().name(), "cuda");
}

TEST_F(CudaBackendTest, MemoryAccountingMatchesTheCpuAndTheCacheReusesBlocks) {
  struct Alloc {
    DType dtype;
    int64_t numel;
    MemCategory category;
  };
  const Alloc allocs[] = {
      {DType::kF32, 1000, MemCategory::kWeights},        {DType::kF64, 15, MemCategory::kGradients},
      {DType::kF32, 300000, MemCategory::kOptimizer},  // 1.2 MB: the 2 MiB buckets
      {DType::kF32, 1 << 20, MemCategory::kActivations}, {DType::kI32, 7, MemCategory::kWorkspace},
      {DType::kF32, 1, MemCategory::kCommBuffers},
  };
  std::vector<Twin> held;
  for (const Alloc& a : allocs) held.push_back(Make(a.dtype, {a.numel}, {}, a.category));
  const MemoryStats& c = cpu().memory();
  const MemoryStats& g = gpu().memory();
  EXPECT_EQ(g.current_bytes, c.current_bytes);
  EXPECT_EQ(g.peak_bytes, c.peak_bytes);
  EXPECT_EQ(g.current_total_bytes, c.current_total_bytes);
  EXPECT_EQ(g.peak_total_bytes, c.peak_total_bytes);
  CudaMemoryFigures f = CudaMemory(gpu());
  EXPECT_GE(f.reserved_bytes, g.current_total_bytes);
  EXPECT_GE(f.peak_reserved_bytes, f.reserved_bytes);
  EXPECT_EQ(CudaMemory(cpu()).reserved_bytes, 0);
  EXPECT_EQ(CudaMemory(cpu()).peak_reserved_bytes, 0);

  // Fresh memory is zero; so is a reused block that held other values.
  for (const Twin& w : held) {
    for (double v : Host(gpu(), w[kGpu])) ASSERT_EQ(v, 0);
  }
  gpu().Fill(held[3][kGpu], 3.5);
  held[3] = Twin{};  // both freed
  f = CudaMemory(gpu());
  for (int round = 0; round < 5; ++round) {
    Twin again = Make(DType::kF32, {1 << 20}, {}, MemCategory::kActivations);
    EXPECT_EQ(CudaMemory(gpu()).reserved_bytes, f.reserved_bytes);
    const std::vector<double> v = Host(gpu(), again[kGpu]);
    EXPECT_EQ(v.front(), 0);
    EXPECT_EQ(v.back(), 0);
    gpu().Fill(again[kGpu], 1.0);
  }
  EXPECT_EQ(gpu().memory().current_bytes, cpu().memory().current_bytes);
  EXPECT_EQ(gpu().memory().peak_total_bytes, cpu().memory().peak_total_bytes);
}

TEST_F(CudaBackendTest, UploadDownloadFillScaleAddCopy) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    Twin x = Rand(dt, {1001}), y = Rand(dt, {1001});
    ExpectEqual(x, "upload/download");
    Run([&](Backend& b, Side s) {
      b.Scale(x[s], -0.37);
      b.Add(y[s], x[s]);
    });
    ExpectClose(x, Tol(dt), "Scale");
    ExpectClose(y, Tol(dt), "Add");
    Twin z = Zeros(dt, {1001});
    Run([&](Backend& b, Side s) { b.Fill(z[s], 2.25); });
    ExpectEqual(z, "Fill");
    Run([&](Backend& b, Side s) { b.Fill(z[s], -kInf); });
    ExpectEqual(z, "Fill -inf");
    Run([&](Backend& b, Side s) { b.Copy(z[s], y[s]); });
    ExpectEqual(z, "Copy");
    // Overlapping ranges copy as memmove does, either direction.
    Run([&](Backend& b, Side s) {
      b.Copy(z.Slice(s, 10, 500), z.Slice(s, 0, 500));
      b.Copy(z.Slice(s, 600, 300), z.Slice(s, 650, 300));
    });
    ExpectEqual(z, "overlapping Copy");
  }
  Twin ids = Ints({3, -7, 1 << 30, 0, 42});
  ExpectEqual(ids, "int32 upload/download");
  Twin ids2 = Ints({0, 0, 0, 0, 0});
  Run([&](Backend& b, Side s) { b.Copy(ids2[s], ids[s]); });
  ExpectEqual(ids2, "int32 Copy");
}

TEST_F(CudaBackendTest, Copy2DMovesBlocksOfColumns) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    Twin src = Rand(dt, {9, 13}), dst = Rand(dt, {9, 20});
    // Columns [2, 9) of src into columns [3, 10) of dst.
    Run([&](Backend& b, Side s) {
      b.Copy2D(dst.Slice(s, 3, 9 * 20 - 3), 20, src.Slice(s, 2, 9 * 13 - 2), 13, 9, 7);
    });
    ExpectEqual(dst, "Copy2D");
    // One row: the leading dimensions are never used.
    Run([&](Backend& b, Side s) {
      b.Copy2D(dst.Slice(s, 100, 11), 0, src.Slice(s, 5, 11), 0, 1, 11);
    });
    ExpectEqual(dst, "Copy2D one row");
    // Overlapping source and destination inside one buffer.
    Run([&](Backend& b, Side s) {
      b.Copy2D(dst.Slice(s, 1, 179), 20, dst.Slice(s, 0, 180), 20, 8, 15);
    });
    ExpectEqual(dst, "overlapping Copy2D");
    Run([&](Backend& b, Side s) { b.Copy2D(dst[s], 20, src[s], 13, 0, 5); });  // nothing
    ExpectEqual(dst, "Copy2D of no rows");
  }
}

TEST_F(CudaBackendTest, SumAndSumSquaresInDouble) {
  for (DType dt : kFloatTypes) {
    for (int64_t n : {1, 255, 100003, 3000000}) {
      SCOPED_TRACE(std::string(Name(dt)) + " n=" + std::to_string(n));
      Twin x = Rand(dt, {n}, -1, 2);
      const double c = cpu().Sum(x[kCpu]), g = gpu().Sum(x[kGpu]);
      EXPECT_NEAR(g, c, 1e-9 * std::max(1.0, std::fabs(c)));
      const double cs = cpu().SumSquares(x[kCpu]), gs = gpu().SumSquares(x[kGpu]);
      EXPECT_NEAR(gs, cs, 1e-9 * std::max(1.0, cs));
      EXPECT_EQ(gpu().Sum(x[kGpu]), g);  // the same bits every time
    }
  }
  Twin empty = Zeros(DType::kF32, {0});
  EXPECT_EQ(gpu().Sum(empty[kGpu]), 0);
}

// ---------------------------------------------------------------------------------------------
// Matrix products

TEST_F(CudaBackendTest, GemmEveryTransposeOddSizesSubMatricesAndBeta) {
  struct Case {
    bool ta, tb;
    int64_t m, n, k, pad, offset;
    double alpha, beta;
  };
  const Case cases[] = {
      {false, false, 37, 19, 53, 0, 0, 1, 0},     {true, false, 37, 19, 53, 3, 1, 0.5, 1},
      {false, true, 37, 19, 53, 5, 1, 1, -0.5},   {true, true, 37, 19, 53, 1, 3, -2, 0.25},
      {false, false, 1, 1, 1, 0, 0, 1, 0},        {false, true, 1, 64, 300, 2, 1, 1, 1},
      {true, false, 129, 65, 1000, 5, 1, 1, 0.5}, {false, false, 64, 128, 32, 0, 0, 1, 0},
      {true, true, 3, 200, 7, 0, 2, 0.125, 0},
  };
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(Name(dt)) + " ta=" + std::to_string(c.ta) +
                   " tb=" + std::to_string(c.tb) + " m=" + std::to_string(c.m) +
                   " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
      // Stored shapes, with wider rows (pad) and a start `offset` elements in (misaligned).
      const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
      const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
      const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
      Twin a = Rand(dt, {c.offset + a_rows * lda});
      Twin b = Rand(dt, {c.offset + b_rows * ldb});
      Twin out = Rand(dt, {c.offset + c.m * ldc});
      Run([&](Backend& be, Side s) {
        be.Gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.Slice(s, c.offset, a_rows * lda), lda,
                b.Slice(s, c.offset, b_rows * ldb), ldb, c.beta, out.Slice(s, c.offset, c.m * ldc),
                ldc);
      });
      ExpectClose(out, Tol(dt) * std::max(1.0, c.k / 256.0), "Gemm");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bias, norms, activations

TEST_F(CudaBackendTest, AddBiasAndBiasGrad) {
  for (DType dt : kFloatTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {37, 45}, {300, 33}, {2, 1000}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      Twin out = Rand(dt, {rows, cols}), bias = Rand(dt, {cols}), dbias = Rand(dt, {cols});
      Run([&](Backend& b, Side s) {
        b.AddBias(out[s], bias[s], rows, cols);
        b.BiasGrad(dbias[s], out[s], rows, cols);
      });
      ExpectClose(out, Tol(dt), "AddBias");
      ExpectClose(dbias, Tol(dt) * std::max(1.0, rows / 64.0), "BiasGrad");
    }
  }
}

TEST_F(CudaBackendTest, LayerNormForwardAndBackward) {
  for (DType dt : kFloatTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {33, 45}, {5, 1000}, {70, 256}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      Twin x = Rand(dt, {rows, cols}, -2, 3), w = Rand(dt, {cols}), bias = Rand(dt, {cols});
      Twin out = Rand(dt, {rows, cols}), mean = Zeros(dt, {rows}), rstd = Zeros(dt, {rows});
      Run([&](Backend& b, Side s) {
        b.LayerNormForward(out[s], mean[s], rstd[s], x[s], w[s], bias[s], rows, cols, 1e-5);
      });
      ExpectClose(out, Tol(dt), "LayerNorm out");
      ExpectClose(mean, Tol(dt), "LayerNorm mean");
      ExpectClose(rstd, Tol(dt), "LayerNorm rstd");
      CpuToGpu(mean);
      CpuToGpu(rstd);
      Twin dout = Rand(dt, {rows, cols}), dx = Rand(dt, {rows, cols});
      Twin dw = Rand(dt, {cols}), db = Rand(dt, {cols});
      Run([&](Backend& b, Side s) {
        b.LayerNormBackwardInput(dx[s], dout[s], x[s], mean[s], rstd[s], w[s], rows, cols);
        b.LayerNormBackwardParams(dw[s], db[s], dout[s], x[s], mean[s], rstd[s], rows, cols);
      });
      ExpectClose(dx, Tol(dt), "LayerNorm dx");
      ExpectClose(dw, Tol(dt) * std::max(1.0, rows / 64.0), "LayerNorm dweight");
      ExpectClose(db, Tol(dt) * std::max(1.0, rows / 64.0), "LayerNorm dbias");
    }
  }
}

TEST_F(CudaBackendTest, RmsNormForwardAndBackward) {
  for (DType dt : kFloatTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {33, 45}, {5, 1000}, {70, 256}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      Twin x = Rand(dt, {rows, cols}, -2, 3), w = Rand(dt, {cols});
      Twin out = Rand(dt, {rows, cols}), rstd = Zeros(dt, {rows});
      Run([&](Backend& b, Side s) {
        b.RmsNormForward(out[s], rstd[s], x[s], w[s], rows, cols, 1e-6);
      });
      ExpectClose(out, Tol(dt), "RmsNorm out");
      ExpectClose(rstd, Tol(dt), "RmsNorm rstd");
      CpuToGpu(rstd);
      Twin dout = Rand(dt, {rows, cols}), dx = Rand(dt, {rows, cols}), dw = Rand(dt, {cols});
      Run([&](Backend& b, Side s) {
        b.RmsNormBackwardInput(dx[s], dout[s], x[s], rstd[s], w[s], rows, cols);
        b.RmsNormBackwardParams(dw[s], dout[s], x[s], rstd[s], rows, cols);
      });
      ExpectClose(dx, Tol(dt), "RmsNorm dx");
      ExpectClose(dw, Tol(dt) * std::max(1.0, rows / 64.0), "RmsNorm dweight");
    }
  }
}

TEST_F(CudaBackendTest, GeluAndSwiGlu) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    const int64_t rows = 13, cols = 37;
    Twin in = Rand(dt, {rows, 2 * cols}, -4, 4), out = Rand(dt, {rows, cols});
    Twin dout = Rand(dt, {rows, cols}), din = Rand(dt, {rows, 2 * cols});
    Run([&](Backend& b, Side s) {
      b.SwiGlu(out[s], in[s], rows, cols);
      b.SwiGluBackward(din[s], in[s], dout[s], rows, cols);
    });
    ExpectClose(out, Tol(dt), "SwiGlu");
    ExpectClose(din, Tol(dt), "SwiGluBackward");
    Twin g_out = Rand(dt, {rows, 2 * cols}), g_din = Rand(dt, {rows, 2 * cols});
    Twin g_dout = Rand(dt, {rows, 2 * cols});
    Run([&](Backend& b, Side s) {
      b.Gelu(g_out[s], in[s]);
      b.GeluBackward(g_din[s], in[s], g_dout[s]);
    });
    ExpectClose(g_out, Tol(dt), "Gelu");
    ExpectClose(g_din, Tol(dt), "GeluBackward");
  }
}

// ---------------------------------------------------------------------------------------------
// Embeddings, positions, rotary

TEST_F(CudaBackendTest, EmbeddingForwardBackwardWithRepeatsAndOtherShards) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    const int64_t vocab_begin = 100, vocab_rows = 11, cols = 37;
    // Repeated tokens (their gradients add in row order) and tokens of other shards.
    const std::vector<int32_t> tok = {100, 105, 99, 110, 105, 111, 100, 3, 105, 107, 104, 100};
    const int64_t rows = static_cast<int64_t>(tok.size());
    Twin tokens = Ints(tok), table = Rand(dt, {vocab_rows, cols}), out = Rand(dt, {rows, cols});
    Twin dout = Rand(dt, {rows, cols}), dtable = Rand(dt, {vocab_rows, cols});
    Run([&](Backend& b, Side s) {
      b.EmbeddingForward(out[s], tokens[s], table[s], vocab_begin, vocab_rows, rows, cols);
      b.EmbeddingBackward(dtable[s], tokens[s], dout[s], vocab_begin, vocab_rows, rows, cols);
    });
    ExpectEqual(out, "EmbeddingForward");
    ExpectClose(dtable, Tol(dt), "EmbeddingBackward");
  }
}

TEST_F(CudaBackendTest, AddPositionsAndPositionsBackward) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    const int64_t seq_begin = 3, seq_rows = 5, batch = 3, cols = 33, max_seq = 10;
    Twin x = Rand(dt, {seq_rows * batch, cols}), pos = Rand(dt, {max_seq, cols});
    Twin dpos = Rand(dt, {max_seq, cols});
    Run([&](Backend& b, Side s) {
      b.AddPositions(x[s], pos[s], seq_begin, seq_rows, batch, cols);
      b.PositionsBackward(dpos[s], x[s], seq_begin, seq_rows, batch, cols);
    });
    ExpectEqual(x, "AddPositions");
    ExpectEqual(dpos, "PositionsBackward");  // the CPU's order of additions
  }
}

TEST_F(CudaBackendTest, RotaryForwardAndInverse) {
  struct Case {
    int64_t seq, batch, heads, groups, d, seq_begin;
  };
  for (DType dt : kFloatTypes) {
    for (const Case& c : {Case{7, 2, 4, 2, 8, 0}, Case{5, 3, 6, 3, 16, 11}, Case{9, 1, 2, 1, 64, 4},
                          Case{3, 2, 2, 2, 128, 1000}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " d=" + std::to_string(c.d));
      const std::vector<int64_t> shape = {c.seq * c.batch, (c.heads + 2 * c.groups) * c.d};
      Twin qkv = Rand(dt, shape);
      const std::vector<double> before = Host(cpu(), qkv[kCpu]);
      Run([&](Backend& b, Side s) {
        b.Rotary(qkv[s], c.seq, c.batch, c.heads, c.groups, c.d, 10000, c.seq_begin, false);
      });
      ExpectClose(qkv, Tol(dt), "Rotary");
      Run([&](Backend& b, Side s) {
        b.Rotary(qkv[s], c.seq, c.batch, c.heads, c.groups, c.d, 10000, c.seq_begin, true);
      });
      ExpectClose(qkv, Tol(dt), "Rotary inverse");
      const std::vector<double> after = Host(gpu(), qkv[kGpu]);
      for (size_t i = 0; i < before.size(); ++i) ASSERT_NEAR(after[i], before[i], 10 * Tol(dt));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Attention

struct AttnCase {
  int64_t seq, batch, heads, groups, d;
};
std::string Describe(const AttnCase& c) {
  return "S=" + std::to_string(c.seq) + " B=" + std::to_string(c.batch) +
         " H=" + std::to_string(c.heads) + " G=" + std::to_string(c.groups) +
         " D=" + std::to_string(c.d);
}
const AttnCase kAttnCases[] = {
    {7, 2, 4, 2, 8}, {33, 1, 2, 2, 16}, {17, 3, 4, 1, 64}, {5, 1, 2, 1, 128}, {40, 2, 3, 3, 256}};

TEST_F(CudaBackendTest, AttentionForwardAndBackward) {
  for (DType dt : kFloatTypes) {
    for (const AttnCase& c : kAttnCases) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + Describe(c));
      const int64_t rows = c.seq * c.batch, width = (c.heads + 2 * c.groups) * c.d;
      Twin qkv = Rand(dt, {rows, width}), ctx = Rand(dt, {rows, c.heads * c.d});
      Twin probs = Rand(dt, {c.batch, c.heads, c.seq, c.seq});
      Run([&](Backend& b, Side s) {
        b.AttentionForward(ctx[s], probs[s], qkv[s], c.seq, c.batch, c.heads, c.groups, c.d);
      });
      ExpectClose(probs, Tol(dt), "probs");
      ExpectClose(ctx, Tol(dt), "ctx");
      CpuToGpu(probs);
      Twin dctx = Rand(dt, {rows, c.heads * c.d}), dqkv = Rand(dt, {rows, width});  // overwritten
      Run([&](Backend& b, Side s) {
        b.AttentionBackward(dqkv[s], dctx[s], qkv[s], probs[s], c.seq, c.batch, c.heads, c.groups,
                            c.d);
      });
      ExpectClose(dqkv, Tol(dt), "dqkv");
    }
  }
}

struct BlockCase {
  int64_t sq, sk, batch, heads, groups, d;
  bool causal;
};
std::string Describe(const BlockCase& c) {
  return "Sq=" + std::to_string(c.sq) + " Sk=" + std::to_string(c.sk) +
         " B=" + std::to_string(c.batch) + " H=" + std::to_string(c.heads) +
         " G=" + std::to_string(c.groups) + " D=" + std::to_string(c.d) +
         (c.causal ? " causal" : " full");
}
// Causal with Sq < Sk, Sq > Sk (early queries see no key), Sq == Sk; key counts that are not
// multiples of the 32-key tile; head dims 8 to 256; groups < heads.
const BlockCase kBlockCases[] = {
    {7, 7, 2, 4, 2, 8, true},    {9, 21, 1, 2, 1, 16, true},   {21, 9, 2, 2, 2, 16, true},
    {33, 33, 1, 4, 4, 64, true}, {17, 45, 2, 4, 2, 64, false}, {40, 70, 1, 2, 1, 128, true},
    {5, 3, 3, 2, 2, 128, false}, {35, 35, 1, 2, 1, 256, true}, {12, 40, 1, 6, 2, 256, false},
};

TEST_F(CudaBackendTest, AttentionBlockForwardMatchesTheCpuFreshAndMerged) {
  for (DType dt : kFloatTypes) {
    for (const BlockCase& c : kBlockCases) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + Describe(c));
      const int64_t qrows = c.sq * c.batch;
      Twin q = Rand(dt, {qrows, (c.heads + 2 * c.groups) * c.d});
      Twin kv = Rand(dt, {c.sk * c.batch, 2 * c.groups * c.d});
      // A fresh start (0 and -inf), then a running result to merge into.
      Twin ctx = Zeros(dt, {qrows, c.heads * c.d}), lse = Zeros(dt, {qrows, c.heads});
      Run([&](Backend& b, Side s) { b.Fill(lse[s], -kInf); });
      Run([&](Backend& b, Side s) {
        b.AttentionBlockForward(ctx[s], lse[s], q[s], kv[s], c.sq, c.sk, c.batch, c.heads, c.groups,
                                c.d, c.causal);
      });
      ExpectClose(ctx, Tol(dt), "fresh ctx");
      ExpectClose(lse, Tol(dt), "fresh lse");
      Twin ctx2 = Rand(dt, {qrows, c.heads * c.d}), lse2 = Rand(dt, {qrows, c.heads}, -1, 2);
      Run([&](Backend& b, Side s) {
        b.AttentionBlockForward(ctx2[s], lse2[s], q[s], kv[s], c.sq, c.sk, c.batch, c.heads,
                                c.groups, c.d, c.causal);
      });
      ExpectClose(ctx2, Tol(dt), "merged ctx");
      ExpectClose(lse2, Tol(dt), "merged lse");
    }
  }
}

TEST_F(CudaBackendTest, AttentionBlockBackwardMatchesTheCpu) {
  for (DType dt : kFloatTypes) {
    for (const BlockCase& c : kBlockCases) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + Describe(c));
      const int64_t qrows = c.sq * c.batch;
      Twin q = Rand(dt, {qrows, (c.heads + 2 * c.groups) * c.d});
      Twin kv = Rand(dt, {c.sk * c.batch, 2 * c.groups * c.d});
      Twin ctx = Zeros(dt, {qrows, c.heads * c.d}), lse = Zeros(dt, {qrows, c.heads});
      Run([&](Backend& b, Side s) {
        b.Fill(lse[s], -kInf);
        b.AttentionBlockForward(ctx[s], lse[s], q[s], kv[s], c.sq, c.sk, c.batch, c.heads, c.groups,
                                c.d, c.causal);
      });
      CpuToGpu(ctx);  // the backward's inputs, identical on both sides
      CpuToGpu(lse);
      Twin dctx = Rand(dt, {qrows, c.heads * c.d});
      Twin dq = Rand(dt, {qrows, (c.heads + 2 * c.groups) * c.d});  // += into these
      Twin dkv = Rand(dt, {c.sk * c.batch, 2 * c.groups * c.d});
      Run([&](Backend& b, Side s) {
        b.AttentionBlockBackward(dq[s], dkv[s], dctx[s], ctx[s], lse[s], q[s], kv[s], c.sq, c.sk,
                                 c.batch, c.heads, c.groups, c.d, c.causal);
      });
      ExpectClose(dq, Tol(dt), "dq");
      ExpectClose(dkv, Tol(dt), "dkv");
    }
  }
}

// Context parallelism's composition on the GPU: queries at positions [20, 30) of a 30-token
// sequence against key blocks [0, 10) and [10, 20) (fully visible: not causal) and [20, 30)
// (the diagonal: causal) equal one causal call with Sq = 10, Sk = 30; the non-causal split of
// the same keys into three blocks equals one non-causal call. Gradients too: dq sums over the
// blocks, each block's dkv is its slice of the one-call dkv.
TEST_F(CudaBackendTest, AttentionBlocksComposeOverKeyBlocks) {
  const int64_t sq = 10, sk = 30, batch = 2, heads = 4, groups = 2, d = 16, block = 10;
  const int64_t qrows = sq * batch, q_width = (heads + 2 * groups) * d;
  const int64_t kv_width = 2 * groups * d, kv_block = block * batch * kv_width;
  Backend& g = gpu();
  for (DType dt : kFloatTypes) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(Name(dt)) + (causal ? " causal" : " full"));
      auto tensor = [&](std::vector<int64_t> shape, const std::vector<double>& values) {
        Tensor t(g, dt, std::move(shape), MemCategory::kActivations);
        if (!values.empty()) Put(g, t.span(), values);
        return t;
      };
      const Tensor q = tensor({qrows, q_width}, Uniform(qrows * q_width));
      const Tensor kv = tensor({sk * batch, kv_width}, Uniform(sk * batch * kv_width));
      const Tensor dctx = tensor({qrows, heads * d}, Uniform(qrows * heads * d));
      // One call over all the keys, and the blocks one after another.
      Tensor ctx_one = tensor({qrows, heads * d}, {}), lse_one = tensor({qrows, heads}, {});
      Tensor ctx_many = tensor({qrows, heads * d}, {}), lse_many = tensor({qrows, heads}, {});
      g.Fill(lse_one.span(), -kInf);
      g.Fill(lse_many.span(), -kInf);
      g.AttentionBlockForward(ctx_one.span(), lse_one.span(), q.span(), kv.span(), sq, sk, batch,
                              heads, groups, d, causal);
      for (int64_t c = 0; c < sk / block; ++c) {
        const bool diagonal = causal && c == sk / block - 1;
        g.AttentionBlockForward(ctx_many.span(), lse_many.span(), q.span(),
                                kv.span().Slice(c * kv_block, kv_block), sq, block, batch, heads,
                                groups, d, diagonal);
      }
      auto compare = [&](const Tensor& one, const Tensor& many, const char* what) {
        const std::vector<double> a = Host(g, one.span()), b = Host(g, many.span());
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_NEAR(b[i], a[i], Tol(dt) * std::max(1.0, std::fabs(a[i])))
              << what << "[" << i << "]";
        }
      };
      compare(ctx_one, ctx_many, "ctx");
      compare(lse_one, lse_many, "lse");
      Tensor dq_one = tensor({qrows, q_width}, {}), dkv_one = tensor({sk * batch, kv_width}, {});
      Tensor dq_many = tensor({qrows, q_width}, {}), dkv_many = tensor({sk * batch, kv_width}, {});
      g.AttentionBlockBackward(dq_one.span(), dkv_one.span(), dctx.span(), ctx_one.span(),
                               lse_one.span(), q.span(), kv.span(), sq, sk, batch, heads, groups, d,
                               causal);
      for (int64_t c = 0; c < sk / block; ++c) {
        const bool diagonal = causal && c == sk / block - 1;
        g.AttentionBlockBackward(dq_many.span(), dkv_many.span().Slice(c * kv_block, kv_block),
                                 dctx.span(), ctx_one.span(), lse_one.span(), q.span(),
                                 kv.span().Slice(c * kv_block, kv_block), sq, block, batch, heads,
                                 groups, d, diagonal);
      }
      compare(dq_one, dq_many, "dq");
      compare(dkv_one, dkv_many, "dkv");
    }
  }
}

// The fused block kernel over the whole sequence (Sq == Sk, causal, from 0 and -inf) is the
// unfused attention's ctx.
TEST_F(CudaBackendTest, FusedBlockAttentionEqualsUnfusedAttention) {
  for (DType dt : kFloatTypes) {
    for (const AttnCase& c : kAttnCases) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + Describe(c));
      Backend& g = gpu();
      const int64_t rows = c.seq * c.batch, hpg = c.heads / c.groups;
      const int64_t width = (c.heads + 2 * c.groups) * c.d, kv_width = 2 * c.groups * c.d;
      Tensor qkv(g, dt, {rows, width}, MemCategory::kActivations);
      Put(g, qkv.span(), Uniform(rows * width));
      Tensor probs(g, dt, {c.batch, c.heads, c.seq, c.seq}, MemCategory::kActivations);
      Tensor unfused(g, dt, {rows, c.heads * c.d}, MemCategory::kActivations);
      g.AttentionForward(unfused.span(), probs.span(), qkv.span(), c.seq, c.batch, c.heads,
                         c.groups, c.d);
      // kv: each group's [k | v] columns of qkv.
      Tensor kv(g, dt, {rows, kv_width}, MemCategory::kActivations);
      for (int64_t gi = 0; gi < c.groups; ++gi) {
        const int64_t from = gi * (hpg + 2) * c.d + hpg * c.d, to = gi * 2 * c.d;
        g.Copy2D(kv.span().Slice(to, kv.numel() - to), kv_width,
                 qkv.span().Slice(from, qkv.numel() - from), width, rows, 2 * c.d);
      }
      Tensor fused(g, dt, {rows, c.heads * c.d}, MemCategory::kActivations);
      Tensor lse(g, dt, {rows, c.heads}, MemCategory::kActivations);
      g.Fill(lse.span(), -kInf);
      g.AttentionBlockForward(fused.span(), lse.span(), qkv.span(), kv.span(), c.seq, c.seq,
                              c.batch, c.heads, c.groups, c.d, true);
      const std::vector<double> a = Host(g, unfused.span()), b = Host(g, fused.span());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(b[i], a[i], Tol(dt) * std::max(1.0, std::fabs(a[i]))) << "ctx[" << i << "]";
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Mixture of experts: routing, permutation, row kernels

TEST_F(CudaBackendTest, RouterTopKWithTiesAndItsBackward) {
  for (DType dt : kFloatTypes) {
    for (auto [rows, experts, topk] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 4, 1}, {37, 13, 4}, {300, 8, 2}, {5, 64, 8}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " E=" + std::to_string(experts) +
                   " k=" + std::to_string(topk));
      std::vector<double> v = Uniform(rows * experts, -2, 2);
      for (double& x : v) x = std::round(x * 2) / 2;  // few distinct values: many ties
      Twin logits = Make(dt, {rows, experts}, v), probs = Zeros(dt, {rows, topk});
      Twin choice = Make(DType::kI32, {rows, topk}, {});
      Run([&](Backend& b, Side s) {
        b.RouterTopK(probs[s], choice[s], logits[s], rows, experts, topk);
      });
      ExpectEqual(choice, "choice");
      ExpectClose(probs, Tol(dt), "probs");
      Twin dprobs = Rand(dt, {rows, topk}), dlogits = Rand(dt, {rows, experts});
      Run([&](Backend& b, Side s) {
        b.RouterTopKBackward(dlogits[s], dprobs[s], probs[s], choice[s], rows, experts, topk);
      });
      ExpectClose(dlogits, Tol(dt), "dlogits");
    }
  }
}

TEST_F(CudaBackendTest, GatherScatterScaleRowsAndRowDots) {
  const std::vector<int32_t> index = {4, 0, 2, 2, 7, 0, 2, 1, 3};
  const int64_t rows = static_cast<int64_t>(index.size()), src_rows = 8;
  for (DType dt : {DType::kF32, DType::kF64, DType::kI32}) {
    SCOPED_TRACE(std::string(Name(dt)));
    const int64_t cols = 37;
    Twin idx = Ints(index);
    Twin src = dt == DType::kI32 ? Make(dt, {src_rows, cols}, Uniform(src_rows * cols, -1000, 1000))
                                 : Rand(dt, {src_rows, cols});
    Twin dst = Make(dt, {rows, cols}, {});
    Run([&](Backend& b, Side s) { b.GatherRows(dst[s], src[s], idx[s], rows, cols); });
    ExpectEqual(dst, "GatherRows");
    if (dt == DType::kI32) continue;
    // Rows sharing an index add up in row order, as on the CPU: bit for bit.
    Twin back = Rand(dt, {src_rows, cols}), grad = Rand(dt, {rows, cols});
    Run([&](Backend& b, Side s) { b.ScatterAddRows(back[s], grad[s], idx[s], rows, cols); });
    ExpectEqual(back, "ScatterAddRows");
    Twin scale = Rand(dt, {rows});
    Run([&](Backend& b, Side s) { b.ScaleRows(grad[s], scale[s], rows, cols); });
    ExpectEqual(grad, "ScaleRows");
    for (int64_t c : {1, 37, 1000}) {
      Twin a = Rand(dt, {rows, c}), b2 = Rand(dt, {rows, c}), dots = Zeros(dt, {rows});
      Run([&](Backend& b, Side s) { b.RowDots(dots[s], a[s], b2[s], rows, c); });
      ExpectClose(dots, Tol(dt), "RowDots");
    }
  }
}

TEST_F(CudaBackendTest, ABadIndexIsReportedAtTheNextSynchronisation) {
  Twin src = Rand(DType::kF32, {5, 3}), dst = Zeros(DType::kF32, {2, 3});
  Twin idx = Ints({1, 9});
  gpu().GatherRows(dst[kGpu], src[kGpu], idx[kGpu], 2, 3);
  try {
    Synchronize(gpu());
    ADD_FAILURE() << "no error for an index outside the source";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("GatherRows"), std::string::npos) << e.what();
  }
  Synchronize(gpu());                                               // reported once, then clear
  EXPECT_EQ(Host(gpu(), dst[kGpu])[0], Host(cpu(), src[kCpu])[3]);  // the good row moved
}

TEST_F(CudaBackendTest, CrossEntropyFourSteps) {
  for (DType dt : kFloatTypes) {
    for (auto [rows, cols, valid] : {std::tuple<int64_t, int64_t, int64_t>{7, 37, 33},
                                     {1, 5, 5},
                                     {20, 1000, 999},
                                     {3, 8, 0}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " cols=" + std::to_string(cols) +
                   " valid=" + std::to_string(valid));
      const int64_t vocab_begin = 100;
      std::vector<int32_t> tgt;
      for (int64_t i = 0; i < rows; ++i) {
        // Inside the shard, on its padding, before it and after it.
        const int32_t options[] = {static_cast<int32_t>(vocab_begin + (i * 7) % cols),
                                   static_cast<int32_t>(vocab_begin + cols - 1), 3,
                                   static_cast<int32_t>(vocab_begin + cols + 5)};
        tgt.push_back(options[i % 4]);
      }
      Twin targets = Ints(tgt), logits = Rand(dt, {rows, cols}, -5, 5);
      Twin row_max = Zeros(dt, {rows}), sum_exp = Zeros(dt, {rows});
      Twin target_logit = Zeros(dt, {rows}), losses = Zeros(dt, {rows});
      Run([&](Backend& b, Side s) { b.CrossEntropyMax(row_max[s], logits[s], rows, cols, valid); });
      ExpectEqual(row_max, "row_max");
      if (valid == 0) continue;
      Run([&](Backend& b, Side s) {
        b.CrossEntropyExp(logits[s], sum_exp[s], target_logit[s], row_max[s], targets[s],
                          vocab_begin, rows, cols, valid);
      });
      ExpectClose(logits, Tol(dt), "exp");
      ExpectClose(sum_exp, Tol(dt) * std::max(1.0, cols / 256.0), "sum_exp");
      ExpectEqual(target_logit, "target_logit");
      CpuToGpu(sum_exp);
      Run([&](Backend& b, Side s) {
        b.CrossEntropyFinish(logits[s], losses[s], sum_exp[s], row_max[s], target_logit[s], rows,
                             cols);
      });
      ExpectClose(logits, Tol(dt), "probs");
      ExpectClose(losses, Tol(dt), "losses");
      Run([&](Backend& b, Side s) {
        b.CrossEntropyBackward(logits[s], targets[s], vocab_begin, rows, cols, 0.3);
      });
      ExpectClose(logits, Tol(dt), "dlogits");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Optimizers

TEST_F(CudaBackendTest, AdamAndSgdSteps) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    const int64_t n = 1037;
    Twin p = Rand(dt, {n}), g = Rand(dt, {n}), m = Rand(dt, {n}), v = Rand(dt, {n}, 0, 1);
    AdamArgs args;
    args.lr = 1e-3;
    args.weight_decay = 0.01;
    args.step = 3;
    args.grad_scale = 0.5;
    for (int step = 0; step < 3; ++step) {
      Run([&](Backend& b, Side s) { b.AdamStep(p[s], g[s], m[s], v[s], args); });
    }
    ExpectClose(p, Tol(dt), "Adam param");
    ExpectClose(m, Tol(dt), "Adam m");
    ExpectClose(v, Tol(dt), "Adam v");
    Twin buf = Rand(dt, {n});
    for (int step = 0; step < 3; ++step) {
      Run([&](Backend& b, Side s) { b.SgdStep(p[s], g[s], buf[s], 0.01, 0.9, 1e-4, 0.7); });
    }
    ExpectClose(p, Tol(dt), "SGD param");
    ExpectClose(buf, Tol(dt), "SGD momentum");
  }
}

// Deterministic kernels: the same inputs give the same bits on a second run.
TEST_F(CudaBackendTest, GradientKernelsGiveTheSameBitsTwice) {
  const DType dt = DType::kF32;
  const int64_t rows = 513, cols = 77;
  Twin dout = Rand(dt, {rows, cols});
  std::vector<int32_t> tok(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) tok[static_cast<size_t>(i)] = static_cast<int32_t>(i % 5);
  Twin tokens = Ints(tok);
  const BlockCase c{33, 65, 2, 4, 2, 64, true};
  Twin q = Rand(dt, {c.sq * c.batch, (c.heads + 2 * c.groups) * c.d});
  Twin kv = Rand(dt, {c.sk * c.batch, 2 * c.groups * c.d});
  Twin ctx = Zeros(dt, {c.sq * c.batch, c.heads * c.d}), lse = Zeros(dt, {c.sq * c.batch, c.heads});
  Twin dctx = Rand(dt, {c.sq * c.batch, c.heads * c.d});
  Backend& g = gpu();
  g.Fill(lse[kGpu], -kInf);
  g.AttentionBlockForward(ctx[kGpu], lse[kGpu], q[kGpu], kv[kGpu], c.sq, c.sk, c.batch, c.heads,
                          c.groups, c.d, c.causal);
  std::vector<std::vector<double>> runs[2];
  for (auto& run : runs) {
    Tensor dbias(g, dt, {cols}, MemCategory::kGradients);
    Tensor dtable(g, dt, {5, cols}, MemCategory::kGradients);
    Tensor dq(g, dt, {q[kGpu].numel}, MemCategory::kGradients);
    Tensor dkv(g, dt, {kv[kGpu].numel}, MemCategory::kGradients);
    g.BiasGrad(dbias.span(), dout[kGpu], rows, cols);
    g.EmbeddingBackward(dtable.span(), tokens[kGpu], dout[kGpu], 0, 5, rows, cols);
    g.AttentionBlockBackward(dq.span(), dkv.span(), dctx[kGpu], ctx[kGpu], lse[kGpu], q[kGpu],
                             kv[kGpu], c.sq, c.sk, c.batch, c.heads, c.groups, c.d, c.causal);
    for (const Tensor* t : {&dbias, &dtable, &dq, &dkv}) run.push_back(Host(g, t->span()));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// ---------------------------------------------------------------------------------------------
// 16-bit data (executor/backend/backend.h's mixed precision): every kernel against the CPU in bf16
// and fp16, with the contract's fp32 spans where it has them. Tolerances: the file comment.

TEST_F(CudaBackendTest, Mixed16ElementwiseCopiesAndReductions) {
  for (DType dt : k16BitTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    Twin x = Rand(dt, {1001}), y = Rand(dt, {1001});
    ExpectEqual(x, "upload/download");
    Run([&](Backend& b, Side s) {
      b.Scale(x[s], -0.37);
      b.Add(y[s], x[s]);
    });
    ExpectClose(x, Tol(dt), "Scale");
    ExpectClose(y, Tol(dt), "Add");
    Twin z = Zeros(dt, {1001});
    for (double v : {2.25, -kInf, 1e-3}) {
      Run([&](Backend& b, Side s) { b.Fill(z[s], v); });
      ExpectEqual(z, "Fill " + std::to_string(v));
    }
    Run([&](Backend& b, Side s) {
      b.Copy(z[s], y[s]);
      b.Copy(z.Slice(s, 10, 500), z.Slice(s, 0, 500));
    });
    ExpectEqual(z, "Copy");
    Twin wide = Rand(dt, {9, 20});
    Run([&](Backend& b, Side s) {
      b.Copy2D(wide.Slice(s, 3, 9 * 20 - 3), 20, y.Slice(s, 2, 9 * 13 - 2), 13, 9, 7);
    });
    ExpectEqual(wide, "Copy2D");
    // Sums of exact 16-bit values in double: only the order differs.
    const double c = cpu().Sum(y[kCpu]), g = gpu().Sum(y[kGpu]);
    EXPECT_NEAR(g, c, 1e-12 * std::max(1.0, std::fabs(c)));
    const double cs = cpu().SumSquares(y[kCpu]), gs = gpu().SumSquares(y[kGpu]);
    EXPECT_NEAR(gs, cs, 1e-12 * std::max(1.0, cs));

    const int64_t rows = 37, cols = 45;
    Twin out = Rand(dt, {rows, cols}), bias = Rand(dt, {cols});
    Run([&](Backend& b, Side s) { b.AddBias(out[s], bias[s], rows, cols); });
    ExpectClose(out, Tol(dt), "AddBias");
    Twin in = Rand(dt, {rows, 2 * cols}, -4, 4), act = Zeros(dt, {rows, cols});
    Twin dact = Rand(dt, {rows, cols}), din = Zeros(dt, {rows, 2 * cols});
    Run([&](Backend& b, Side s) {
      b.SwiGlu(act[s], in[s], rows, cols);
      b.SwiGluBackward(din[s], in[s], dact[s], rows, cols);
    });
    ExpectClose(act, Tol(dt), "SwiGlu");
    ExpectClose(din, Tol(dt), "SwiGluBackward");
    Twin g_out = Zeros(dt, {rows, 2 * cols}), g_din = Zeros(dt, {rows, 2 * cols});
    Twin g_dout = Rand(dt, {rows, 2 * cols});
    Run([&](Backend& b, Side s) {
      b.Gelu(g_out[s], in[s]);
      b.GeluBackward(g_din[s], in[s], g_dout[s]);
    });
    ExpectClose(g_out, Tol(dt), "Gelu");
    ExpectClose(g_din, Tol(dt), "GeluBackward");
  }
}

TEST_F(CudaBackendTest, Mixed16RotaryEmbeddingAndPositions) {
  for (DType dt : k16BitTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    const int64_t seq = 6, batch = 2, heads = 4, groups = 2, d = 16;
    Twin qkv = Rand(dt, {seq * batch, (heads + 2 * groups) * d});
    Run([&](Backend& b, Side s) {
      b.Rotary(qkv[s], seq, batch, heads, groups, d, 10000, 3, false);
    });
    ExpectClose(qkv, Tol(dt), "Rotary");
    CpuToGpu(qkv);
    Run([&](Backend& b, Side s) {
      b.Rotary(qkv[s], seq, batch, heads, groups, d, 10000, 3, true);
    });
    ExpectClose(qkv, Tol(dt), "Rotary inverse");

    const int64_t vocab_begin = 100, vocab_rows = 11, cols = 37;
    const std::vector<int32_t> tok = {100, 105, 99, 110, 105, 111, 100, 3, 105, 107, 104, 100};
    const int64_t rows = static_cast<int64_t>(tok.size());
    Twin tokens = Ints(tok), table = Rand(dt, {vocab_rows, cols}), out = Rand(dt, {rows, cols});
    Run([&](Backend& b, Side s) {
      b.EmbeddingForward(out[s], tokens[s], table[s], vocab_begin, vocab_rows, rows, cols);
    });
    ExpectEqual(out, "EmbeddingForward");
    const int64_t seq_begin = 3, seq_rows = 5, max_seq = 10;
    Twin x = Rand(dt, {seq_rows * batch, cols}), pos = Rand(dt, {max_seq, cols});
    Run([&](Backend& b, Side s) {
      b.AddPositions(x[s], pos[s], seq_begin, seq_rows, batch, cols);
    });
    ExpectEqual(x, "AddPositions");  // one fp32 addition, rounded once
  }
}

// Parameter gradients into fp32 main_grad (or 16-bit, as the contract also allows), with
// repeated destinations summed in fp32 and rounded once.
TEST_F(CudaBackendTest, Mixed16ParameterGradientsIntoFp32OrTheirType) {
  for (DType dt : k16BitTypes) {
    for (DType gdt : {DType::kF32, dt}) {
      SCOPED_TRACE(std::string(Name(dt)) + " gradients " + std::string(Name(gdt)));
      const int64_t rows = 300, cols = 33;
      const double tol = gdt == DType::kF32 ? Tol(gdt) * rows / 64.0 : Tol(gdt);
      Twin dout = Rand(dt, {rows, cols}), dbias = Rand(gdt, {cols});
      Run([&](Backend& b, Side s) { b.BiasGrad(dbias[s], dout[s], rows, cols); });
      ExpectClose(dbias, tol, "BiasGrad");

      const int64_t vocab_begin = 100, vocab_rows = 11;
      const std::vector<int32_t> tok = {100, 105, 99, 110, 105, 111, 100, 3, 105, 107, 104, 100};
      const auto n = static_cast<int64_t>(tok.size());
      Twin tokens = Ints(tok), edout = Rand(dt, {n, cols}), dtable = Rand(gdt, {vocab_rows, cols});
      Run([&](Backend& b, Side s) {
        b.EmbeddingBackward(dtable[s], tokens[s], edout[s], vocab_begin, vocab_rows, n, cols);
      });
      ExpectClose(dtable, Tol(gdt), "EmbeddingBackward");

      const int64_t seq_begin = 3, seq_rows = 5, batch = 3, max_seq = 10;
      Twin dx = Rand(dt, {seq_rows * batch, cols}), dpos = Rand(gdt, {max_seq, cols});
      Run([&](Backend& b, Side s) {
        b.PositionsBackward(dpos[s], dx[s], seq_begin, seq_rows, batch, cols);
      });
      ExpectEqual(dpos, "PositionsBackward");  // the CPU's order of fp32 additions
    }
  }
}

TEST_F(CudaBackendTest, Mixed16NormsWithFp32Statistics) {
  for (DType dt : k16BitTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {33, 45}, {5, 1000}, {70, 256}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const DType f32 = DType::kF32;
      Twin x = Rand(dt, {rows, cols}, -2, 3), w = Rand(dt, {cols}), bias = Rand(dt, {cols});
      Twin out = Rand(dt, {rows, cols}), mean = Zeros(f32, {rows}), rstd = Zeros(f32, {rows});
      Twin rms_out = Rand(dt, {rows, cols}), rms_rstd = Zeros(f32, {rows});
      Run([&](Backend& b, Side s) {
        b.LayerNormForward(out[s], mean[s], rstd[s], x[s], w[s], bias[s], rows, cols, 1e-5);
        b.RmsNormForward(rms_out[s], rms_rstd[s], x[s], w[s], rows, cols, 1e-5);
      });
      ExpectClose(out, Tol(dt), "LayerNorm out");
      ExpectClose(mean, Tol(f32), "LayerNorm mean");
      ExpectClose(rstd, Tol(f32), "LayerNorm rstd");
      ExpectClose(rms_out, Tol(dt), "RMSNorm out");
      ExpectClose(rms_rstd, Tol(f32), "RMSNorm rstd");
      for (Twin* t : {&mean, &rstd, &rms_rstd}) CpuToGpu(*t);
      for (DType gdt : {f32, dt}) {
        SCOPED_TRACE("parameter gradients " + std::string(Name(gdt)));
        const double gtol = gdt == f32 ? Tol(f32) * std::max(1.0, rows / 64.0) : Tol(gdt);
        Twin dout = Rand(dt, {rows, cols}), dx = Rand(dt, {rows, cols}),
             rdx = Rand(dt, {rows, cols});
        Twin dw = Rand(gdt, {cols}), db = Rand(gdt, {cols}), rdw = Rand(gdt, {cols});
        Run([&](Backend& b, Side s) {
          b.LayerNormBackwardInput(dx[s], dout[s], x[s], mean[s], rstd[s], w[s], rows, cols);
          b.LayerNormBackwardParams(dw[s], db[s], dout[s], x[s], mean[s], rstd[s], rows, cols);
          b.RmsNormBackwardInput(rdx[s], dout[s], x[s], rms_rstd[s], w[s], rows, cols);
          b.RmsNormBackwardParams(rdw[s], dout[s], x[s], rms_rstd[s], rows, cols);
        });
        ExpectClose(dx, Tol(dt), "LayerNorm dx");
        ExpectClose(dw, gtol, "LayerNorm dweight");
        ExpectClose(db, gtol, "LayerNorm dbias");
        ExpectClose(rdx, Tol(dt), "RMSNorm dx");
        ExpectClose(rdw, gtol, "RMSNorm dweight");
      }
    }
  }
}

// 16-bit a and b into c of their type or fp32; beta = 1 into fp32 is the weight gradient's
// accumulation into main_grad (run three times over).
TEST_F(CudaBackendTest, Mixed16GemmIntoTheirTypeOrFp32MainGrad) {
  struct Case {
    bool ta, tb;
    int64_t m, n, k, pad, offset;
    double alpha, beta;
  };
  const Case cases[] = {
      {false, false, 37, 19, 53, 0, 0, 1, 0},     {true, false, 37, 19, 53, 3, 1, 0.5, 1},
      {false, true, 37, 19, 53, 5, 1, 1, -0.5},   {true, true, 37, 19, 53, 1, 3, -2, 0.25},
      {false, false, 1, 1, 1, 0, 0, 1, 0},        {false, true, 1, 64, 300, 2, 1, 1, 1},
      {true, false, 129, 65, 1000, 5, 1, 1, 0.5}, {false, false, 64, 128, 32, 0, 0, 1, 0},
      {true, false, 64, 96, 256, 0, 0, 1, 1},
  };
  for (DType dt : k16BitTypes) {
    for (DType cdt : {dt, DType::kF32}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(Name(dt)) + " c " + std::string(Name(cdt)) +
                     " ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) +
                     " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                     " k=" + std::to_string(c.k) + " beta=" + std::to_string(c.beta));
        const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
        const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
        const int64_t lda = std::max<int64_t>(1, a_cols + c.pad);
        const int64_t ldb = std::max<int64_t>(1, b_cols + c.pad), ldc = c.n + c.pad;
        Twin a = Rand(dt, {c.offset + std::max<int64_t>(1, a_rows * lda)});
        Twin b = Rand(dt, {c.offset + std::max<int64_t>(1, b_rows * ldb)});
        Twin out = Rand(cdt, {c.offset + c.m * ldc});
        const int repeats = c.beta == 1 && cdt == DType::kF32 ? 3 : 1;
        for (int r = 0; r < repeats; ++r) {
          Run([&](Backend& be, Side s) {
            be.Gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.Slice(s, c.offset, a[s].numel - c.offset),
                    lda, b.Slice(s, c.offset, b[s].numel - c.offset), ldb, c.beta,
                    out.Slice(s, c.offset, c.m * ldc), ldc);
          });
        }
        const double tol =
            cdt == DType::kF32 ? Tol(cdt) * std::max(1.0, c.k / 256.0) * repeats : Tol(cdt);
        ExpectClose(out, tol, "Gemm");
      }
    }
  }
}

TEST_F(CudaBackendTest, Mixed16UnfusedAttention) {
  struct Case {
    int64_t seq, batch, heads, groups, d;
  };
  for (DType dt : k16BitTypes) {
    for (const Case& c : {Case{7, 2, 4, 2, 8}, Case{13, 1, 2, 2, 16}, Case{33, 2, 4, 1, 32}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " S=" + std::to_string(c.seq) +
                   " G=" + std::to_string(c.groups) + " D=" + std::to_string(c.d));
      const int64_t rows = c.seq * c.batch, width = (c.heads + 2 * c.groups) * c.d;
      Twin qkv = Rand(dt, {rows, width}, -2, 2), ctx = Zeros(dt, {rows, c.heads * c.d});
      Twin probs = Zeros(dt, {c.batch, c.heads, c.seq, c.seq});
      Run([&](Backend& b, Side s) {
        b.AttentionForward(ctx[s], probs[s], qkv[s], c.seq, c.batch, c.heads, c.groups, c.d);
      });
      ExpectClose(probs, Tol(dt), "probs");
      ExpectClose(ctx, Tol(dt), "ctx");
      CpuToGpu(probs);  // the backward's inputs, identical on both sides
      Twin dctx = Rand(dt, {rows, c.heads * c.d}), dqkv = Rand(dt, {rows, width});
      Run([&](Backend& b, Side s) {
        b.AttentionBackward(dqkv[s], dctx[s], qkv[s], probs[s], c.seq, c.batch, c.heads, c.groups,
                            c.d);
      });
      ExpectClose(dqkv, Tol(dt), "dqkv");
    }
  }
}

TEST_F(CudaBackendTest, Mixed16BlockAttentionWithFp32Lse) {
  for (DType dt : k16BitTypes) {
    for (const BlockCase& c : kBlockCases) {
      SCOPED_TRACE(std::string(Name(dt)) + " " + Describe(c));
      const DType f32 = DType::kF32;
      const int64_t qrows = c.sq * c.batch;
      Twin q = Rand(dt, {qrows, (c.heads + 2 * c.groups) * c.d});
      Twin kv = Rand(dt, {c.sk * c.batch, 2 * c.groups * c.d});
      Twin kv2 = Rand(dt, {c.sk * c.batch, 2 * c.groups * c.d});
      Twin ctx = Zeros(dt, {qrows, c.heads * c.d}), lse = Zeros(f32, {qrows, c.heads});
      Run([&](Backend& b, Side s) {
        b.Fill(lse[s], -kInf);
        b.AttentionBlockForward(ctx[s], lse[s], q[s], kv[s], c.sq, c.sk, c.batch, c.heads, c.groups,
                                c.d, c.causal);
      });
      ExpectClose(ctx, Tol(dt), "fresh ctx");
      ExpectClose(lse, Tol(f32), "fresh lse");
      CpuToGpu(ctx);
      CpuToGpu(lse);
      Run([&](Backend& b, Side s) {  // a second key block merged in
        b.AttentionBlockForward(ctx[s], lse[s], q[s], kv2[s], c.sq, c.sk, c.batch, c.heads,
                                c.groups, c.d, c.causal);
      });
      ExpectClose(ctx, Tol(dt), "merged ctx");
      ExpectClose(lse, Tol(f32), "merged lse");
      CpuToGpu(ctx);
      CpuToGpu(lse);
      Twin dctx = Rand(dt, {qrows, c.heads * c.d});
      Twin dq = Rand(dt, {qrows, (c.heads + 2 * c.groups) * c.d});  // += into these
      Twin dkv = Rand(dt, {c.sk * c.batch, 2 * c.groups * c.d});
      Run([&](Backend& b, Side s) {
        b.AttentionBlockBackward(dq[s], dkv[s], dctx[s], ctx[s], lse[s], q[s], kv[s], c.sq, c.sk,
                                 c.batch, c.heads, c.groups, c.d, c.causal);
      });
      ExpectClose(dq, Tol(dt), "dq");
      ExpectClose(dkv, Tol(dt), "dkv");
    }
  }
}

TEST_F(CudaBackendTest, Mixed16MixtureOfExpertsKernels) {
  for (DType dt : k16BitTypes) {
    for (auto [rows, experts, topk] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 4, 1}, {37, 13, 4}, {300, 8, 2}, {5, 64, 8}}) {
      SCOPED_TRACE(std::string(Name(dt)) + " E=" + std::to_string(experts) +
                   " k=" + std::to_string(topk));
      std::vector<double> v = Uniform(rows * experts, -2, 2);
      for (double& x : v) x = std::round(x * 2) / 2;  // few distinct values: many ties
      Twin logits = Make(dt, {rows, experts}, v), probs = Zeros(dt, {rows, topk});
      Twin choice = Make(DType::kI32, {rows, topk}, {});
      Run([&](Backend& b, Side s) {
        b.RouterTopK(probs[s], choice[s], logits[s], rows, experts, topk);
      });
      ExpectEqual(choice, "choice");
      ExpectClose(probs, Tol(dt), "probs");
      CpuToGpu(probs);
      Twin dprobs = Rand(dt, {rows, topk}), dlogits = Rand(dt, {rows, experts});
      Run([&](Backend& b, Side s) {
        b.RouterTopKBackward(dlogits[s], dprobs[s], probs[s], choice[s], rows, experts, topk);
      });
      ExpectClose(dlogits, Tol(dt), "dlogits");
    }
    SCOPED_TRACE(std::string(Name(dt)) + " rows");
    const std::vector<int32_t> index = {4, 0, 2, 2, 7, 0, 2, 1, 3};
    const int64_t rows = static_cast<int64_t>(index.size()), src_rows = 8, cols = 19;
    Twin idx = Ints(index), src = Rand(dt, {src_rows, cols}), dst = Rand(dt, {rows, cols});
    Run([&](Backend& b, Side s) { b.GatherRows(dst[s], src[s], idx[s], rows, cols); });
    ExpectEqual(dst, "GatherRows");
    Twin acc = Rand(dt, {src_rows, cols});
    Run([&](Backend& b, Side s) { b.ScatterAddRows(acc[s], dst[s], idx[s], rows, cols); });
    ExpectClose(acc, Tol(dt), "ScatterAddRows");  // repeated rows summed in fp32, rounded once
    Twin scale = Rand(dt, {rows}), dots = Zeros(dt, {rows}), other = Rand(dt, {rows, cols});
    Run([&](Backend& b, Side s) {
      b.ScaleRows(dst[s], scale[s], rows, cols);
      b.RowDots(dots[s], dst[s], other[s], rows, cols);
    });
    ExpectClose(dst, Tol(dt), "ScaleRows");
    CpuToGpu(dst);
    Run([&](Backend& b, Side s) { b.RowDots(dots[s], dst[s], other[s], rows, cols); });
    ExpectClose(dots, Tol(dt), "RowDots");
  }
}

// Spans outside the contract, and 16-bit data in the fp32-or-fp64 kernels, throw naming the
// kernel and the dtypes.
TEST_F(CudaBackendTest, Mixed16RefusesWhatTheContractDoesNotAllow) {
  Backend& g = gpu();
  auto expect_refused = [](const std::function<void()>& call, const std::string& kernel,
                           const std::string& dtype) {
    try {
      call();
      ADD_FAILURE() << kernel << ": no error";
    } catch (const InternalError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(kernel), std::string::npos) << what;
      EXPECT_NE(what.find(dtype), std::string::npos) << what;
    }
  };
  Tensor bf(g, DType::kBF16, {4, 8}, MemCategory::kWorkspace);
  Tensor hf(g, DType::kF16, {4, 8}, MemCategory::kWorkspace);
  Tensor f32(g, DType::kF32, {4, 8}, MemCategory::kWorkspace);
  Tensor bf_rows(g, DType::kBF16, {4}, MemCategory::kWorkspace);
  Tensor f_rows(g, DType::kF32, {4}, MemCategory::kWorkspace);
  Tensor bf_cols(g, DType::kBF16, {8}, MemCategory::kWorkspace);
  Tensor targets(g, DType::kI32, {4}, MemCategory::kWorkspace);
  expect_refused([&] { g.CrossEntropyMax(bf_rows.span(), bf.span(), 4, 8, 8); }, "CrossEntropyMax",
                 "bf16");
  expect_refused([&] { g.CrossEntropyBackward(hf.span(), targets.span(), 0, 4, 8, 1); },
                 "CrossEntropyBackward", "fp16");
  expect_refused([&] { g.AdamStep(bf.span(), bf.span(), bf.span(), bf.span(), AdamArgs{}); },
                 "AdamStep", "bf16");
  expect_refused([&] { g.SgdStep(hf.span(), hf.span(), hf.span(), 0.1, 0.9, 0, 1); }, "SgdStep",
                 "fp16");
  // Per-row statistics must be fp32 beside 16-bit data; data spans share the data's dtype.
  expect_refused(
      [&] {
        g.LayerNormForward(bf.span(), bf_rows.span(), f_rows.span(), bf.span(), bf_cols.span(),
                           bf_cols.span(), 4, 8, 1e-5);
      },
      "LayerNormForward", "bf16");
  expect_refused([&] { g.Add(bf.span(), hf.span()); }, "Add", "fp16");
  expect_refused([&] { g.BiasGrad(bf_cols.span(), hf.span(), 4, 8); }, "BiasGrad", "bf16");
  // Gemm: a and b share a dtype; c is theirs or fp32 only beside 16-bit.
  expect_refused(
      [&] { g.Gemm(false, false, 4, 4, 8, 1, bf.span(), 8, hf.span(), 4, 0, f32.span(), 4); },
      "Gemm", "fp16");
  expect_refused(
      [&] { g.Gemm(false, false, 4, 4, 8, 1, f32.span(), 8, f32.span(), 4, 0, bf.span(), 4); },
      "Gemm", "bf16");
}

// Convert on the device rounds exactly as executor/backend/half.h does on the host: every 16-bit
// pattern widens exactly and comes back unchanged (NaNs as NaNs), and fp32 patterns over every
// exponent round to nearest even.
TEST_F(CudaBackendTest, ConvertRoundTripsEvery16BitPattern) {
  Backend& g = gpu();
  std::vector<uint16_t> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::mt19937 bits_rng(7);
  std::vector<uint32_t> f32_bits(1 << 18);
  for (uint32_t& b : f32_bits) b = static_cast<uint32_t>(bits_rng());
  for (DType dt : k16BitTypes) {
    SCOPED_TRACE(std::string(Name(dt)));
    const bool bf = dt == DType::kBF16;
    auto widen = [&](uint16_t h) { return bf ? Bf16ToFloat(h) : HalfToFloat(h); };
    auto narrow = [&](float f) { return bf ? FloatToBf16(f) : FloatToHalf(f); };
    const auto n = static_cast<int64_t>(all.size());
    Tensor h(g, dt, {n}, MemCategory::kWorkspace), f(g, DType::kF32, {n}, MemCategory::kWorkspace);
    Tensor back(g, dt, {n}, MemCategory::kWorkspace),
        d(g, DType::kF64, {n}, MemCategory::kWorkspace);
    g.Upload(h.span(), all.data());
    g.Convert(f.span(), h.span());
    g.Convert(back.span(), f.span());
    g.Convert(d.span(), h.span());
    std::vector<float> wide(all.size());
    std::vector<uint16_t> again(all.size());
    std::vector<double> dwide(all.size());
    g.Download(f.span(), wide.data());
    g.Download(back.span(), again.data());
    g.Download(d.span(), dwide.data());
    int wrong = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = widen(all[i]);
      if (std::isnan(want)) {
        wrong += std::isnan(wide[i]) && std::isnan(widen(again[i])) && std::isnan(dwide[i]) ? 0 : 1;
      } else {
        wrong += std::bit_cast<uint32_t>(wide[i]) == std::bit_cast<uint32_t>(want) &&
                         again[i] == all[i] && dwide[i] == static_cast<double>(want)
                     ? 0
                     : 1;
      }
    }
    EXPECT_EQ(wrong, 0) << "16-bit patterns that did not round-trip";
    const auto m = static_cast<int64_t>(f32_bits.size());
    Tensor src(g, DType::kF32, {m}, MemCategory::kWorkspace),
        dst(g, dt, {m}, MemCategory::kWorkspace);
    g.Upload(src.span(), f32_bits.data());
    g.Convert(dst.span(), src.span());
    std::vector<uint16_t> got(f32_bits.size());
    g.Download(dst.span(), got.data());
    wrong = 0;
    for (size_t i = 0; i < f32_bits.size(); ++i) {
      const float x = std::bit_cast<float>(f32_bits[i]);
      if (std::isnan(x)) {
        wrong += std::isnan(widen(got[i])) ? 0 : 1;
      } else {
        wrong += got[i] == narrow(x) ? 0 : 1;
      }
    }
    EXPECT_EQ(wrong, 0) << "fp32 values rounded unlike half.h";
  }
}

// End to end: the tiny GPT and Llama's architecture trained 10 steps through Execute() on the
// CUDA backend against the CPU backend, with the unfused and the flash-style attention: fp32
// losses within 1e-4 relative (the kernels agree to fp32 rounding; ten steps of Adam amplify
// little), bf16 within 2e-2 relative (the bar; 16-bit roundings of the two backends can
// differ by an ulp wherever the fp32 results straddle a tie, and training carries that on).
TEST_F(CudaBackendTest, TrainsTheTinyGptLikeTheCpu) {
  using testing_executor::TinyLayout;
  using testing_executor::TinyModel;
  using testing_executor::TinyPlan;
  auto train = [](Backend& backend, const TinyModel& model, AttentionBackend attention,
                  DType dtype) {
    TinyLayout layout;
    layout.attention = attention;
    const Plan plan = TinyPlan(layout, model);
    ProcessGroups groups = MakeProcessGroups(MakeLocalComm(backend), plan.parallel);
    ExecuteOptions options;
    options.steps = 10;
    options.dtype = dtype;
    return Execute(plan, options, groups, backend, nullptr);
  };
  const std::pair<const char*, TinyModel> models[] = {
      {"gpt", TinyModel{}}, {"llama", TinyModel{.llama = true, .groups = 2}}};
  for (const auto& [name, model] : models) {
    for (AttentionBackend attention : {AttentionBackend::kUnfused, AttentionBackend::kFlash}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(std::string(name) + " " + std::string(Name(dtype)) +
                     (attention == AttentionBackend::kFlash ? " flash" : " unfused"));
        const ExecuteResult want = train(cpu(), model, attention, dtype);
        const ExecuteResult got = train(gpu(), model, attention, dtype);
        ASSERT_EQ(got.steps.size(), want.steps.size());
        const double tol = dtype == DType::kF32 ? 1e-4 : 2e-2;
        double worst = 0;
        for (size_t i = 0; i < got.steps.size(); ++i) {
          const double rel = std::abs(got.steps[i].loss - want.steps[i].loss) / want.steps[i].loss;
          worst = std::max(worst, rel);
          EXPECT_LE(rel, tol) << "step " << i + 1 << ": cuda " << got.steps[i].loss << ", cpu "
                              << want.steps[i].loss;
        }
        std::cout << name << " " << Name(dtype) << " cuda vs cpu: worst relative " << worst << "\n";
      }
    }
  }
}

}  // namespace
}  // namespace ptdp
