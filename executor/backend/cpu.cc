// CPU kernels, templated on the floating-point type and dispatched on the span's dtype. Loops
// follow llm.c's train_gpt2.c (layernorm, gelu, attention), with the matrix products in cblas.
#include "executor/backend/cpu.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "core/error.h"
#include "executor/backend/half.h"

namespace ptdp {
namespace {

template <typename T>
T* P(Span s) {
  PTDP_CHECK(s.dtype == (sizeof(T) == 8 ? DType::kF64 : DType::kF32));
  return static_cast<T*>(s.data);
}
const int32_t* Tokens(Span s) {
  PTDP_CHECK(s.dtype == DType::kI32);
  return static_cast<const int32_t*>(s.data);
}

template <typename T>
void GemmT(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
           const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(T) == 8) {
    cblas_dgemm(CblasRowMajor, tra, trb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
  } else {
    cblas_sgemm(CblasRowMajor, tra, trb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
  }
}

template <typename T>
void LayerNormForwardT(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t n,
                       int64_t c, double eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * c;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += xi[j];
    const double mu = sum / c;
    double var = 0;
    for (int64_t j = 0; j < c; ++j) var += (xi[j] - mu) * (xi[j] - mu);
    const double rs = 1.0 / std::sqrt(var / c + eps);
    T* oi = out + i * c;
    for (int64_t j = 0; j < c; ++j) oi[j] = static_cast<T>((xi[j] - mu) * rs) * w[j] + b[j];
    mean[i] = static_cast<T>(mu);
    rstd[i] = static_cast<T>(rs);
  }
}

template <typename T>
void LayerNormBackwardInputT(T* dx, const T* dout, const T* x, const T* mean, const T* rstd,
                             const T* w, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* dy = dout + i * c;
    const T* xi = x + i * c;
    double dnorm_mean = 0, dnorm_xhat_mean = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = (xi[j] - mean[i]) * rstd[i];
      const double dnorm = static_cast<double>(w[j]) * dy[j];
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean /= c;
    dnorm_xhat_mean /= c;
    T* dxi = dx + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = (xi[j] - mean[i]) * rstd[i];
      const double dnorm = static_cast<double>(w[j]) * dy[j];
      dxi[j] += static_cast<T>((dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * rstd[i]);
    }
  }
}

template <typename T>
void LayerNormBackwardParamsT(T* dw, T* db, const T* dout, const T* x, const T* mean, const T* rstd,
                              int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* dy = dout + i * c;
    const T* xi = x + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const T xhat = (xi[j] - mean[i]) * rstd[i];
      dw[j] += dy[j] * xhat;
      db[j] += dy[j];
    }
  }
}

// qkv rows hold G groups of [hpg q heads | k | v], each D wide (backend.h).
template <typename T>
void AttentionForwardT(T* ctx, T* probs, const T* qkv, int64_t s, int64_t b, int64_t h, int64_t g,
                       int64_t d) {
  const int64_t hpg = h / g, width = (h + 2 * g) * d;
  const int64_t ld_qkv = b * width, ld_ctx = b * h * d;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const int64_t gi = hi / hpg;
      const T* group = qkv + bi * width + gi * (hpg + 2) * d;
      const T* q = group + (hi % hpg) * d;
      const T* k = group + hpg * d;
      const T* v = k + d;
      T* p = probs + (bi * h + hi) * s * s;
      GemmT<T>(false, true, s, s, d, scale, q, ld_qkv, k, ld_qkv, T(0), p, s);
      for (int64_t i = 0; i < s; ++i) {
        T* row = p + i * s;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
        T sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const T inv = T(1) / sum;
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < s; ++j) row[j] = 0;
      }
      GemmT<T>(false, false, s, d, s, T(1), p, s, v, ld_qkv, T(0), ctx + bi * h * d + hi * d,
               ld_ctx);
    }
  }
}

template <typename T>
void AttentionBackwardT(T* dqkv, const T* dctx, const T* qkv, const T* probs, int64_t s, int64_t b,
                        int64_t h, int64_t g, int64_t d) {
  const int64_t hpg = h / g, width = (h + 2 * g) * d;
  const int64_t ld_qkv = b * width, ld_ctx = b * h * d;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<T> dp(static_cast<size_t>(s * s));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const int64_t gi = hi / hpg;
      // The group's k and v gradients sum over its query heads: the first one writes.
      const T beta = hi % hpg == 0 ? T(0) : T(1);
      const int64_t group = bi * width + gi * (hpg + 2) * d;
      const int64_t q_off = group + (hi % hpg) * d, k_off = group + hpg * d, v_off = k_off + d;
      const T* q = qkv + q_off;
      const T* k = qkv + k_off;
      const T* v = qkv + v_off;
      const T* p = probs + (bi * h + hi) * s * s;
      const T* dc = dctx + bi * h * d + hi * d;
      GemmT<T>(false, true, s, s, d, T(1), dc, ld_ctx, v, ld_qkv, T(0), dp.data(), s);     // dP
      GemmT<T>(true, false, s, d, s, T(1), p, s, dc, ld_ctx, beta, dqkv + v_off, ld_qkv);  // dV
      for (int64_t i = 0; i < s; ++i) {  // dS = P (dP - rowsum(P dP)), in place in dp
        T* row = dp.data() + i * s;
        const T* prow = p + i * s;
        T dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += prow[j] * row[j];
        for (int64_t j = 0; j <= i; ++j) row[j] = prow[j] * (row[j] - dot);
        for (int64_t j = i + 1; j < s; ++j) row[j] = 0;
      }
      GemmT<T>(false, false, s, d, s, scale, dp.data(), s, k, ld_qkv, T(0), dqkv + q_off,
               ld_qkv);  // dQ
      GemmT<T>(true, false, s, d, s, scale, dp.data(), s, q, ld_qkv, beta, dqkv + k_off,
               ld_qkv);  // dK
    }
  }
}

// One key/value block of context-parallel attention, merged into (ctx, lse) (backend.h).
template <typename T>
void AttentionBlockForwardT(T* ctx, T* lse, const T* q, const T* kv, int64_t sq, int64_t sk,
                            int64_t b, int64_t h, int64_t g, int64_t d, bool causal) {
  const int64_t hpg = h / g, wq = (h + 2 * g) * d, wkv = 2 * g * d;
  const int64_t ld_q = b * wq, ld_kv = b * wkv, ld_ctx = b * h * d;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<T> p(static_cast<size_t>(sq * sk)), o(static_cast<size_t>(sq * d));
  std::vector<T> block_lse(static_cast<size_t>(sq));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const int64_t gi = hi / hpg;
      const T* qh = q + bi * wq + (gi * (hpg + 2) + hi % hpg) * d;
      const T* k = kv + bi * wkv + gi * 2 * d;
      const T* v = k + d;
      GemmT<T>(false, true, sq, sk, d, scale, qh, ld_q, k, ld_kv, T(0), p.data(), sk);
      for (int64_t i = 0; i < sq; ++i) {
        T* row = p.data() + i * sk;
        const int64_t keys = causal ? std::clamp<int64_t>(i + sk - sq + 1, 0, sk) : sk;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < keys; ++j) mx = std::max(mx, row[j]);
        T sum = 0;
        for (int64_t j = 0; j < keys; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const T inv = keys > 0 ? T(1) / sum : T(0);
        for (int64_t j = 0; j < keys; ++j) row[j] *= inv;
        for (int64_t j = keys; j < sk; ++j) row[j] = 0;
        block_lse[static_cast<size_t>(i)] =
            keys > 0 ? mx + std::log(sum) : -std::numeric_limits<T>::infinity();
      }
      GemmT<T>(false, false, sq, d, sk, T(1), p.data(), sk, v, ld_kv, T(0), o.data(), d);
      // Transformer Engine's output correction: rescale both parts to the merged denominator.
      for (int64_t i = 0; i < sq; ++i) {
        const T lb = block_lse[static_cast<size_t>(i)];
        if (lb == -std::numeric_limits<T>::infinity()) continue;  // no key for this query
        T& l = lse[(i * b + bi) * h + hi];
        const T mx = std::max(l, lb);
        const T merged = mx + std::log(std::exp(l - mx) + std::exp(lb - mx));
        const T old_w = std::exp(l - merged), new_w = std::exp(lb - merged);
        T* c = ctx + i * ld_ctx + bi * h * d + hi * d;
        const T* oi = o.data() + i * d;
        for (int64_t e = 0; e < d; ++e) c[e] = c[e] * old_w + oi[e] * new_w;
        l = merged;
      }
    }
  }
}

template <typename T>
void AttentionBlockBackwardT(T* dq, T* dkv, const T* dctx, const T* ctx, const T* lse, const T* q,
                             const T* kv, int64_t sq, int64_t sk, int64_t b, int64_t h, int64_t g,
                             int64_t d, bool causal) {
  const int64_t hpg = h / g, wq = (h + 2 * g) * d, wkv = 2 * g * d;
  const int64_t ld_q = b * wq, ld_kv = b * wkv, ld_ctx = b * h * d;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<T> p(static_cast<size_t>(sq * sk)), dp(p.size());
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const int64_t gi = hi / hpg;
      const int64_t q_off = bi * wq + (gi * (hpg + 2) + hi % hpg) * d;
      const int64_t k_off = bi * wkv + gi * 2 * d, v_off = k_off + d;
      const int64_t c_off = bi * h * d + hi * d;
      // P = exp(q k^T / sqrt(D) - lse): the final softmax restricted to this block.
      GemmT<T>(false, true, sq, sk, d, scale, q + q_off, ld_q, kv + k_off, ld_kv, T(0), p.data(),
               sk);
      GemmT<T>(false, true, sq, sk, d, T(1), dctx + c_off, ld_ctx, kv + v_off, ld_kv, T(0),
               dp.data(), sk);  // dP = dO V^T
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t keys = causal ? std::clamp<int64_t>(i + sk - sq + 1, 0, sk) : sk;
        const T l = lse[(i * b + bi) * h + hi];
        // rowsum(P dP) over all the query's keys is dO . O (FlashAttention's D).
        T dot = 0;
        for (int64_t e = 0; e < d; ++e)
          dot += dctx[i * ld_ctx + c_off + e] * ctx[i * ld_ctx + c_off + e];
        T* row = p.data() + i * sk;
        T* drow = dp.data() + i * sk;
        for (int64_t j = 0; j < keys; ++j) {
          row[j] = std::exp(row[j] - l);
          drow[j] = row[j] * (drow[j] - dot);  // dS
        }
        for (int64_t j = keys; j < sk; ++j) row[j] = drow[j] = 0;
      }
      GemmT<T>(true, false, sk, d, sq, T(1), p.data(), sk, dctx + c_off, ld_ctx, T(1), dkv + v_off,
               ld_kv);  // dV += P^T dO
      GemmT<T>(false, false, sq, d, sk, scale, dp.data(), sk, kv + k_off, ld_kv, T(1), dq + q_off,
               ld_q);  // dQ += dS K / sqrt(D)
      GemmT<T>(true, false, sk, d, sq, scale, dp.data(), sk, q + q_off, ld_q, T(1), dkv + k_off,
               ld_kv);  // dK += dS^T Q / sqrt(D)
    }
  }
}

template <typename T>
void RotaryT(T* qkv, int64_t s, int64_t b, int64_t h, int64_t g, int64_t d, double base,
             int64_t seq_begin, bool inverse) {
  const int64_t hpg = h / g, width = (h + 2 * g) * d, half = d / 2;
  std::vector<T> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t k = 0; k < half; ++k) {
      const double angle = static_cast<double>(seq_begin + i) *
                           std::pow(base, -2.0 * static_cast<double>(k) / static_cast<double>(d));
      cos_t[static_cast<size_t>(k)] = static_cast<T>(std::cos(angle));
      sin_t[static_cast<size_t>(k)] = static_cast<T>((inverse ? -1 : 1) * std::sin(angle));
    }
    for (int64_t j = 0; j < b; ++j) {
      T* row = qkv + (i * b + j) * width;
      for (int64_t gi = 0; gi < g; ++gi) {
        for (int64_t part = 0; part <= hpg; ++part) {  // the group's q heads, then its k
          T* x = row + gi * (hpg + 2) * d + part * d;
          for (int64_t k = 0; k < half; ++k) {
            const T x1 = x[k], x2 = x[k + half];
            const T c = cos_t[static_cast<size_t>(k)], sn = sin_t[static_cast<size_t>(k)];
            x[k] = x1 * c - x2 * sn;
            x[k + half] = x2 * c + x1 * sn;
          }
        }
      }
    }
  }
}

// 16-bit spans to and from fp32 on the host (half.h).
void Widen(Span s, float* out) {
  const auto* bits = static_cast<const uint16_t*>(s.data);
  for (int64_t i = 0; i < s.numel; ++i) {
    out[i] = s.dtype == DType::kBF16 ? Bf16ToFloat(bits[i]) : HalfToFloat(bits[i]);
  }
}
void Narrow(Span s, const float* in) {
  auto* bits = static_cast<uint16_t*>(s.data);
  for (int64_t i = 0; i < s.numel; ++i) {
    bits[i] = s.dtype == DType::kBF16 ? FloatToBf16(in[i]) : FloatToHalf(in[i]);
  }
}

// One kernel call on 16-bit data (backend.h's mixed precision): each 16-bit span as an fp32
// copy, converted on load; the outputs rounded back on Store. The fp32 kernel then runs on the
// copies, so a 16-bit call is exactly the fp32 call on the rounded inputs, rounded.
class Widened {
 public:
  // What dtype a span may have in a call whose data are `data`: the data's, fp32 or the
  // data's (Gemm's c, parameter gradients), or fp32 (per-row statistics).
  enum class Rule { kData, kF32OrData, kF32 };

  explicit Widened(DType data) : data_(data) {}
  Span In(Span s, Rule rule = Rule::kData) {
    if (s.data == nullptr) return s;  // an absent optional argument
    const bool ok = s.dtype == DType::kF32 ? rule != Rule::kData || data_ == DType::kF32
                                           : s.dtype == data_ && rule != Rule::kF32;
    if (!ok) {
      throw InternalError(
          fmt::format("cpu backend: a {} span in a call on {} data (backend.h "
                      "lists the spans that may differ)",
                      Name(s.dtype), Name(data_)));
    }
    if (!Is16Bit(s.dtype)) return s;
    buffers_.emplace_back(static_cast<size_t>(s.numel));
    Widen(s, buffers_.back().data());
    return {buffers_.back().data(), DType::kF32, s.numel};
  }
  Span Out(Span s, Rule rule = Rule::kData) {
    const Span wide = In(s, rule);
    if (wide.data != s.data) outputs_.push_back({s, wide});
    return wide;
  }
  void Store() {
    for (const auto& [narrow, wide] : outputs_)
      Narrow(narrow, static_cast<const float*>(wide.data));
  }

 private:
  DType data_;
  std::vector<std::vector<float>> buffers_;  // the copies (their storage never moves)
  std::vector<std::pair<Span, Span>> outputs_;
};
using Rule = Widened::Rule;

// Runs `call(widened)` on a call's 16-bit data, then stores its outputs.
template <typename F>
void Mixed(DType data, F&& call) {
  Widened widened(data);
  call(widened);
  widened.Store();
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int blas_threads) { openblas_set_num_threads(blas_threads); }
  std::string_view name() const override { return "cpu"; }

  void Upload(Span dst, const void* host) override {
    std::memcpy(dst.data, host, static_cast<size_t>(dst.bytes()));
  }
  void Download(Span src, void* host) override {
    std::memcpy(host, src.data, static_cast<size_t>(src.bytes()));
  }

  void Fill(Span x, double value) override {
    if (Is16Bit(x.dtype)) return Mixed(x.dtype, [&](Widened& w) { Fill(w.Out(x), value); });
    Dispatch(x, [&]<typename T>(T* p) {
      for (int64_t i = 0; i < x.numel; ++i) p[i] = static_cast<T>(value);
    });
  }
  void Copy(Span dst, Span src) override {
    PTDP_CHECK(dst.numel == src.numel && dst.dtype == src.dtype);
    std::memmove(dst.data, src.data, static_cast<size_t>(dst.bytes()));
  }
  void Convert(Span dst, Span src) override {
    PTDP_CHECK(dst.numel == src.numel && dst.dtype != DType::kI32 && src.dtype != DType::kI32);
    if (dst.dtype == src.dtype) return Copy(dst, src);
    std::vector<float> wide;
    const float* from = nullptr;  // src as fp32 (fp64 rounded), unless src is fp64 into fp64
    if (Is16Bit(src.dtype)) {
      wide.resize(static_cast<size_t>(src.numel));
      Widen(src, wide.data());
      from = wide.data();
    } else if (src.dtype == DType::kF64 && dst.dtype != DType::kF64) {
      const auto* d = static_cast<const double*>(src.data);
      wide.assign(d, d + src.numel);
      from = wide.data();
    } else {
      from = static_cast<const float*>(src.data);
    }
    if (Is16Bit(dst.dtype)) return Narrow(dst, from);
    if (dst.dtype == DType::kF32) {
      std::memcpy(dst.data, from, static_cast<size_t>(dst.bytes()));
    } else {
      std::copy(from, from + src.numel, static_cast<double*>(dst.data));
    }
  }
  void Copy2D(Span dst, int64_t ld_dst, Span src, int64_t ld_src, int64_t rows,
              int64_t cols) override {
    PTDP_CHECK(dst.dtype == src.dtype && rows >= 0 && cols >= 0);
    if (rows == 0 || cols == 0) return;
    PTDP_CHECK(dst.numel >= ld_dst * (rows - 1) + cols && src.numel >= ld_src * (rows - 1) + cols);
    const int64_t size = SizeOf(dst.dtype);
    for (int64_t i = 0; i < rows; ++i) {
      std::memmove(static_cast<char*>(dst.data) + i * ld_dst * size,
                   static_cast<const char*>(src.data) + i * ld_src * size,
                   static_cast<size_t>(cols * size));
    }
  }
  void Scale(Span x, double alpha) override {
    if (Is16Bit(x.dtype)) return Mixed(x.dtype, [&](Widened& w) { Scale(w.Out(x), alpha); });
    Dispatch(x, [&]<typename T>(T* p) {
      const T a = static_cast<T>(alpha);
      for (int64_t i = 0; i < x.numel; ++i) p[i] *= a;
    });
  }
  void Add(Span y, Span x) override {
    if (Is16Bit(y.dtype)) return Mixed(y.dtype, [&](Widened& w) { Add(w.Out(y), w.In(x)); });
    PTDP_CHECK(y.numel == x.numel);
    Dispatch(y, [&]<typename T>(T* py) {
      const T* px = P<T>(x);
      for (int64_t i = 0; i < y.numel; ++i) py[i] += px[i];
    });
  }
  double SumSquares(Span x) override {
    if (Is16Bit(x.dtype)) return SumSquares(Widened(x.dtype).In(x));
    double sum = 0;
    Dispatch(x, [&]<typename T>(T* p) {
      for (int64_t i = 0; i < x.numel; ++i) sum += static_cast<double>(p[i]) * p[i];
    });
    return sum;
  }
  double Sum(Span x) override {
    if (Is16Bit(x.dtype)) return Sum(Widened(x.dtype).In(x));
    double sum = 0;
    Dispatch(x, [&]<typename T>(T* p) {
      for (int64_t i = 0; i < x.numel; ++i) sum += p[i];
    });
    return sum;
  }

  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, Span a, int64_t lda,
            Span b, int64_t ldb, double beta, Span c, int64_t ldc) override {
    if (Is16Bit(a.dtype)) {
      return Mixed(a.dtype, [&](Widened& w) {
        Gemm(ta, tb, m, n, k, alpha, w.In(a), lda, w.In(b), ldb, beta, w.Out(c, Rule::kF32OrData),
             ldc);
      });
    }
    // Every operand must reach its last element: ld * (rows - 1) + cols.
    PTDP_CHECK(a.numel >= lda * ((ta ? k : m) - 1) + (ta ? m : k));
    PTDP_CHECK(b.numel >= ldb * ((tb ? n : k) - 1) + (tb ? k : n));
    PTDP_CHECK(c.numel >= ldc * (m - 1) + n);
    Dispatch(c, [&]<typename T>(T* pc) {
      GemmT<T>(ta, tb, m, n, k, static_cast<T>(alpha), P<T>(a), lda, P<T>(b), ldb,
               static_cast<T>(beta), pc, ldc);
    });
  }

  void AddBias(Span out, Span bias, int64_t rows, int64_t cols) override {
    if (Is16Bit(out.dtype)) {
      return Mixed(out.dtype, [&](Widened& w) { AddBias(w.Out(out), w.In(bias), rows, cols); });
    }
    PTDP_CHECK(out.numel == rows * cols && bias.numel == cols);
    Dispatch(out, [&]<typename T>(T* o) {
      const T* pb = P<T>(bias);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) o[i * cols + j] += pb[j];
      }
    });
  }
  void BiasGrad(Span dbias, Span dout, int64_t rows, int64_t cols) override {
    if (Is16Bit(dout.dtype)) {
      return Mixed(dout.dtype, [&](Widened& w) {
        BiasGrad(w.Out(dbias, Rule::kF32OrData), w.In(dout), rows, cols);
      });
    }
    PTDP_CHECK(dout.numel == rows * cols && dbias.numel == cols);
    Dispatch(dbias, [&]<typename T>(T* db) {
      const T* dy = P<T>(dout);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) db[j] += dy[i * cols + j];
      }
    });
  }

  void LayerNormForward(Span out, Span mean, Span rstd, Span x, Span weight, Span bias,
                        int64_t rows, int64_t cols, double eps) override {
    if (Is16Bit(x.dtype)) {
      return Mixed(x.dtype, [&](Widened& w) {
        LayerNormForward(w.Out(out), w.Out(mean, Rule::kF32), w.Out(rstd, Rule::kF32), w.In(x),
                         w.In(weight), w.In(bias), rows, cols, eps);
      });
    }
    PTDP_CHECK(out.numel == rows * cols && x.numel == rows * cols && mean.numel == rows);
    Dispatch(out, [&]<typename T>(T* o) {
      LayerNormForwardT<T>(o, P<T>(mean), P<T>(rstd), P<T>(x), P<T>(weight), P<T>(bias), rows, cols,
                           eps);
    });
  }
  void LayerNormBackwardInput(Span dx, Span dout, Span x, Span mean, Span rstd, Span weight,
                              int64_t rows, int64_t cols) override {
    if (Is16Bit(dx.dtype)) {
      return Mixed(dx.dtype, [&](Widened& w) {
        LayerNormBackwardInput(w.Out(dx), w.In(dout), w.In(x), w.In(mean, Rule::kF32),
                               w.In(rstd, Rule::kF32), w.In(weight), rows, cols);
      });
    }
    PTDP_CHECK(dx.numel == rows * cols && dout.numel == rows * cols);
    Dispatch(dx, [&]<typename T>(T* pdx) {
      LayerNormBackwardInputT<T>(pdx, P<T>(dout), P<T>(x), P<T>(mean), P<T>(rstd), P<T>(weight),
                                 rows, cols);
    });
  }
  void LayerNormBackwardParams(Span dweight, Span dbias, Span dout, Span x, Span mean, Span rstd,
                               int64_t rows, int64_t cols) override {
    if (Is16Bit(dout.dtype)) {
      return Mixed(dout.dtype, [&](Widened& w) {
        LayerNormBackwardParams(w.Out(dweight, Rule::kF32OrData), w.Out(dbias, Rule::kF32OrData),
                                w.In(dout), w.In(x), w.In(mean, Rule::kF32), w.In(rstd, Rule::kF32),
                                rows, cols);
      });
    }
    PTDP_CHECK(dweight.numel == cols && dout.numel == rows * cols);
    Dispatch(dweight, [&]<typename T>(T* dw) {
      LayerNormBackwardParamsT<T>(dw, P<T>(dbias), P<T>(dout), P<T>(x), P<T>(mean), P<T>(rstd),
                                  rows, cols);
    });
  }

  void Gelu(Span out, Span in) override {
    if (Is16Bit(out.dtype))
      return Mixed(out.dtype, [&](Widened& w) { Gelu(w.Out(out), w.In(in)); });
    PTDP_CHECK(out.numel == in.numel);
    Dispatch(out, [&]<typename T>(T* o) {
      const T* x = P<T>(in);
      for (int64_t i = 0; i < in.numel; ++i) {
        o[i] = static_cast<T>(0.5) * x[i] * (T(1) + std::erf(x[i] * static_cast<T>(M_SQRT1_2)));
      }
    });
  }
  void GeluBackward(Span din, Span in, Span dout) override {
    if (Is16Bit(din.dtype)) {
      return Mixed(din.dtype, [&](Widened& w) { GeluBackward(w.Out(din), w.In(in), w.In(dout)); });
    }
    PTDP_CHECK(din.numel == in.numel && dout.numel == in.numel);
    Dispatch(din, [&]<typename T>(T* dx) {
      const T* x = P<T>(in);
      const T* dy = P<T>(dout);
      const T inv_sqrt_2pi = static_cast<T>(0.3989422804014327);
      for (int64_t i = 0; i < in.numel; ++i) {
        const T cdf = static_cast<T>(0.5) * (T(1) + std::erf(x[i] * static_cast<T>(M_SQRT1_2)));
        const T pdf = inv_sqrt_2pi * std::exp(static_cast<T>(-0.5) * x[i] * x[i]);
        dx[i] = (cdf + x[i] * pdf) * dy[i];
      }
    });
  }

  void EmbeddingForward(Span out, Span tokens, Span table, int64_t vocab_begin, int64_t vocab_rows,
                        int64_t rows, int64_t cols) override {
    if (Is16Bit(out.dtype)) {
      return Mixed(out.dtype, [&](Widened& w) {
        EmbeddingForward(w.Out(out), tokens, w.In(table), vocab_begin, vocab_rows, rows, cols);
      });
    }
    PTDP_CHECK(out.numel == rows * cols && tokens.numel == rows &&
               table.numel == vocab_rows * cols);
    Dispatch(out, [&]<typename T>(T* o) {
      const int32_t* tok = Tokens(tokens);
      const T* tab = P<T>(table);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t r = tok[i] - vocab_begin;
        T* oi = o + i * cols;
        if (r >= 0 && r < vocab_rows) {
          std::memcpy(oi, tab + r * cols, sizeof(T) * cols);
        } else {
          std::memset(oi, 0, sizeof(T) * cols);
        }
      }
    });
  }
  void EmbeddingBackward(Span dtable, Span tokens, Span dout, int64_t vocab_begin,
                         int64_t vocab_rows, int64_t rows, int64_t cols) override {
    if (Is16Bit(dout.dtype)) {
      return Mixed(dout.dtype, [&](Widened& w) {
        EmbeddingBackward(w.Out(dtable, Rule::kF32OrData), tokens, w.In(dout), vocab_begin,
                          vocab_rows, rows, cols);
      });
    }
    PTDP_CHECK(dout.numel == rows * cols && tokens.numel == rows &&
               dtable.numel == vocab_rows * cols);
    Dispatch(dtable, [&]<typename T>(T* dt) {
      const int32_t* tok = Tokens(tokens);
      const T* dy = P<T>(dout);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t r = tok[i] - vocab_begin;
        if (r < 0 || r >= vocab_rows) continue;
        for (int64_t j = 0; j < cols; ++j) dt[r * cols + j] += dy[i * cols + j];
      }
    });
  }
  void AddPositions(Span x, Span pos, int64_t seq_begin, int64_t seq_rows, int64_t batch,
                    int64_t cols) override {
    if (Is16Bit(x.dtype)) {
      return Mixed(x.dtype, [&](Widened& w) {
        AddPositions(w.Out(x), w.In(pos), seq_begin, seq_rows, batch, cols);
      });
    }
    PTDP_CHECK(x.numel == seq_rows * batch * cols && pos.numel >= (seq_begin + seq_rows) * cols);
    Dispatch(x, [&]<typename T>(T* px) {
      const T* pp = P<T>(pos);
      for (int64_t i = 0; i < seq_rows; ++i) {
        for (int64_t j = 0; j < batch; ++j) {
          T* row = px + (i * batch + j) * cols;
          const T* prow = pp + (seq_begin + i) * cols;
          for (int64_t c = 0; c < cols; ++c) row[c] += prow[c];
        }
      }
    });
  }
  void PositionsBackward(Span dpos, Span dx, int64_t seq_begin, int64_t seq_rows, int64_t batch,
                         int64_t cols) override {
    if (Is16Bit(dx.dtype)) {
      return Mixed(dx.dtype, [&](Widened& w) {
        PositionsBackward(w.Out(dpos, Rule::kF32OrData), w.In(dx), seq_begin, seq_rows, batch,
                          cols);
      });
    }
    PTDP_CHECK(dx.numel == seq_rows * batch * cols && dpos.numel >= (seq_begin + seq_rows) * cols);
    Dispatch(dpos, [&]<typename T>(T* dp) {
      const T* dy = P<T>(dx);
      for (int64_t i = 0; i < seq_rows; ++i) {
        for (int64_t j = 0; j < batch; ++j) {
          const T* row = dy + (i * batch + j) * cols;
          T* prow = dp + (seq_begin + i) * cols;
          for (int64_t c = 0; c < cols; ++c) prow[c] += row[c];
        }
      }
    });
  }

  void AttentionForward(Span ctx, Span probs, Span qkv, int64_t seq, int64_t batch, int64_t heads,
                        int64_t groups, int64_t head_dim) override {
    if (Is16Bit(qkv.dtype)) {
      return Mixed(qkv.dtype, [&](Widened& w) {
        AttentionForward(w.Out(ctx), w.Out(probs), w.In(qkv), seq, batch, heads, groups, head_dim);
      });
    }
    PTDP_CHECK(groups > 0 && heads % groups == 0);
    PTDP_CHECK(qkv.numel == seq * batch * (heads + 2 * groups) * head_dim);
    PTDP_CHECK(ctx.numel == seq * batch * heads * head_dim);
    PTDP_CHECK(probs.numel == batch * heads * seq * seq);
    Dispatch(ctx, [&]<typename T>(T* c) {
      AttentionForwardT<T>(c, P<T>(probs), P<T>(qkv), seq, batch, heads, groups, head_dim);
    });
  }
  void AttentionBackward(Span dqkv, Span dctx, Span qkv, Span probs, int64_t seq, int64_t batch,
                         int64_t heads, int64_t groups, int64_t head_dim) override {
    if (Is16Bit(qkv.dtype)) {
      return Mixed(qkv.dtype, [&](Widened& w) {
        AttentionBackward(w.Out(dqkv), w.In(dctx), w.In(qkv), w.In(probs), seq, batch, heads,
                          groups, head_dim);
      });
    }
    PTDP_CHECK(groups > 0 && heads % groups == 0);
    PTDP_CHECK(dqkv.numel == qkv.numel && dctx.numel == seq * batch * heads * head_dim);
    Dispatch(dqkv, [&]<typename T>(T* dq) {
      AttentionBackwardT<T>(dq, P<T>(dctx), P<T>(qkv), P<T>(probs), seq, batch, heads, groups,
                            head_dim);
    });
  }
  void AttentionBlockForward(Span ctx, Span lse, Span q, Span kv, int64_t seq_q, int64_t seq_k,
                             int64_t batch, int64_t heads, int64_t groups, int64_t head_dim,
                             bool causal) override {
    if (Is16Bit(q.dtype)) {
      return Mixed(q.dtype, [&](Widened& w) {
        AttentionBlockForward(w.Out(ctx), w.Out(lse, Rule::kF32), w.In(q), w.In(kv), seq_q, seq_k,
                              batch, heads, groups, head_dim, causal);
      });
    }
    PTDP_CHECK(groups > 0 && heads % groups == 0);
    PTDP_CHECK(q.numel == seq_q * batch * (heads + 2 * groups) * head_dim);
    PTDP_CHECK(kv.numel == seq_k * batch * 2 * groups * head_dim);
    PTDP_CHECK(ctx.numel == seq_q * batch * heads * head_dim && lse.numel == seq_q * batch * heads);
    Dispatch(ctx, [&]<typename T>(T* c) {
      AttentionBlockForwardT<T>(c, P<T>(lse), P<T>(q), P<T>(kv), seq_q, seq_k, batch, heads, groups,
                                head_dim, causal);
    });
  }
  void AttentionBlockBackward(Span dq, Span dkv, Span dctx, Span ctx, Span lse, Span q, Span kv,
                              int64_t seq_q, int64_t seq_k, int64_t batch, int64_t heads,
                              int64_t groups, int64_t head_dim, bool causal) override {
    if (Is16Bit(q.dtype)) {
      return Mixed(q.dtype, [&](Widened& w) {
        AttentionBlockBackward(w.Out(dq), w.Out(dkv), w.In(dctx), w.In(ctx), w.In(lse, Rule::kF32),
                               w.In(q), w.In(kv), seq_q, seq_k, batch, heads, groups, head_dim,
                               causal);
      });
    }
    PTDP_CHECK(groups > 0 && heads % groups == 0);
    PTDP_CHECK(q.numel == seq_q * batch * (heads + 2 * groups) * head_dim && dq.numel == q.numel);
    PTDP_CHECK(kv.numel == seq_k * batch * 2 * groups * head_dim && dkv.numel == kv.numel);
    PTDP_CHECK(ctx.numel == seq_q * batch * heads * head_dim && dctx.numel == ctx.numel);
    PTDP_CHECK(lse.numel == seq_q * batch * heads);
    Dispatch(dq, [&]<typename T>(T* pdq) {
      AttentionBlockBackwardT<T>(pdq, P<T>(dkv), P<T>(dctx), P<T>(ctx), P<T>(lse), P<T>(q),
                                 P<T>(kv), seq_q, seq_k, batch, heads, groups, head_dim, causal);
    });
  }
  void Rotary(Span qkv, int64_t seq, int64_t batch, int64_t heads, int64_t groups, int64_t head_dim,
              double base, int64_t seq_begin, bool inverse) override {
    if (Is16Bit(qkv.dtype)) {
      return Mixed(qkv.dtype, [&](Widened& w) {
        Rotary(w.Out(qkv), seq, batch, heads, groups, head_dim, base, seq_begin, inverse);
      });
    }
    PTDP_CHECK(groups > 0 && heads % groups == 0 && head_dim % 2 == 0 && seq_begin >= 0);
    PTDP_CHECK(qkv.numel == seq * batch * (heads + 2 * groups) * head_dim);
    Dispatch(qkv, [&]<typename T>(T* x) {
      RotaryT<T>(x, seq, batch, heads, groups, head_dim, base, seq_begin, inverse);
    });
  }

  void RmsNormForward(Span out, Span rstd, Span x, Span weight, int64_t rows, int64_t cols,
                      double eps) override {
    if (Is16Bit(x.dtype)) {
      return Mixed(x.dtype, [&](Widened& w) {
        RmsNormForward(w.Out(out), w.Out(rstd, Rule::kF32), w.In(x), w.In(weight), rows, cols, eps);
      });
    }
    PTDP_CHECK(out.numel == rows * cols && x.numel == rows * cols && rstd.numel == rows);
    Dispatch(out, [&]<typename T>(T* o) {
      const T* px = P<T>(x);
      const T* w = P<T>(weight);
      T* rs = P<T>(rstd);
      for (int64_t i = 0; i < rows; ++i) {
        double sq = 0;
        for (int64_t j = 0; j < cols; ++j)
          sq += static_cast<double>(px[i * cols + j]) * px[i * cols + j];
        const double r = 1.0 / std::sqrt(sq / cols + eps);
        for (int64_t j = 0; j < cols; ++j) {
          o[i * cols + j] = static_cast<T>(px[i * cols + j] * r) * w[j];
        }
        rs[i] = static_cast<T>(r);
      }
    });
  }
  void RmsNormBackwardInput(Span dx, Span dout, Span x, Span rstd, Span weight, int64_t rows,
                            int64_t cols) override {
    if (Is16Bit(dx.dtype)) {
      return Mixed(dx.dtype, [&](Widened& w) {
        RmsNormBackwardInput(w.Out(dx), w.In(dout), w.In(x), w.In(rstd, Rule::kF32), w.In(weight),
                             rows, cols);
      });
    }
    PTDP_CHECK(dx.numel == rows * cols && dout.numel == rows * cols);
    Dispatch(dx, [&]<typename T>(T* pdx) {
      const T* dy = P<T>(dout);
      const T* px = P<T>(x);
      const T* rs = P<T>(rstd);
      const T* w = P<T>(weight);
      for (int64_t i = 0; i < rows; ++i) {
        // y = x r w with r = (mean x^2 + eps)^(-1/2): dx = r (w dy - xhat mean(w dy xhat)).
        double dot = 0;
        for (int64_t j = 0; j < cols; ++j) {
          dot += static_cast<double>(w[j]) * dy[i * cols + j] * px[i * cols + j] * rs[i];
        }
        dot /= cols;
        for (int64_t j = 0; j < cols; ++j) {
          const double xhat = static_cast<double>(px[i * cols + j]) * rs[i];
          pdx[i * cols + j] +=
              static_cast<T>(rs[i] * (static_cast<double>(w[j]) * dy[i * cols + j] - xhat * dot));
        }
      }
    });
  }
  void RmsNormBackwardParams(Span dweight, Span dout, Span x, Span rstd, int64_t rows,
                             int64_t cols) override {
    if (Is16Bit(dout.dtype)) {
      return Mixed(dout.dtype, [&](Widened& w) {
        RmsNormBackwardParams(w.Out(dweight, Rule::kF32OrData), w.In(dout), w.In(x),
                              w.In(rstd, Rule::kF32), rows, cols);
      });
    }
    PTDP_CHECK(dweight.numel == cols && dout.numel == rows * cols);
    Dispatch(dweight, [&]<typename T>(T* dw) {
      const T* dy = P<T>(dout);
      const T* px = P<T>(x);
      const T* rs = P<T>(rstd);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) dw[j] += dy[i * cols + j] * px[i * cols + j] * rs[i];
      }
    });
  }

  void SwiGlu(Span out, Span in, int64_t rows, int64_t cols) override {
    if (Is16Bit(out.dtype)) {
      return Mixed(out.dtype, [&](Widened& w) { SwiGlu(w.Out(out), w.In(in), rows, cols); });
    }
    PTDP_CHECK(out.numel == rows * cols && in.numel == 2 * rows * cols);
    Dispatch(out, [&]<typename T>(T* o) {
      const T* x = P<T>(in);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const T gate = x[i * 2 * cols + j], up = x[i * 2 * cols + cols + j];
          o[i * cols + j] = gate / (T(1) + std::exp(-gate)) * up;
        }
      }
    });
  }
  void SwiGluBackward(Span din, Span in, Span dout, int64_t rows, int64_t cols) override {
    if (Is16Bit(din.dtype)) {
      return Mixed(din.dtype, [&](Widened& w) {
        SwiGluBackward(w.Out(din), w.In(in), w.In(dout), rows, cols);
      });
    }
    PTDP_CHECK(din.numel == 2 * rows * cols && in.numel == din.numel && dout.numel == rows * cols);
    Dispatch(din, [&]<typename T>(T* dx) {
      const T* x = P<T>(in);
      const T* dy = P<T>(dout);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const T gate = x[i * 2 * cols + j], up = x[i * 2 * cols + cols + j];
          const T sig = T(1) / (T(1) + std::exp(-gate));
          const T g = dy[i * cols + j];
          dx[i * 2 * cols + j] = g * up * sig * (T(1) + gate * (T(1) - sig));
          dx[i * 2 * cols + cols + j] = g * gate * sig;
        }
      }
    });
  }

  void RouterTopK(Span probs, Span choice, Span logits, int64_t rows, int64_t experts,
                  int64_t topk) override {
    if (Is16Bit(logits.dtype)) {
      return Mixed(logits.dtype, [&](Widened& w) {
        RouterTopK(w.Out(probs), choice, w.In(logits), rows, experts, topk);
      });
    }
    PTDP_CHECK(logits.numel == rows * experts && probs.numel == rows * topk);
    PTDP_CHECK(choice.dtype == DType::kI32 && choice.numel == rows * topk && topk <= experts);
    Dispatch(probs, [&]<typename T>(T* p) {
      const T* l = P<T>(logits);
      auto* c = static_cast<int32_t*>(choice.data);
      std::vector<bool> taken(static_cast<size_t>(experts));
      for (int64_t i = 0; i < rows; ++i) {
        const T* li = l + i * experts;
        std::fill(taken.begin(), taken.end(), false);
        for (int64_t j = 0; j < topk; ++j) {
          // The largest logit not yet taken; strictly greater keeps the lower index on ties.
          int64_t best = -1;
          for (int64_t e = 0; e < experts; ++e) {
            if (!taken[static_cast<size_t>(e)] && (best < 0 || li[e] > li[best])) best = e;
          }
          taken[static_cast<size_t>(best)] = true;
          c[i * topk + j] = static_cast<int32_t>(best);
        }
        // Softmax over the chosen logits; the first is the largest.
        const T mx = li[c[i * topk]];
        T sum = 0;
        for (int64_t j = 0; j < topk; ++j) {
          p[i * topk + j] = std::exp(li[c[i * topk + j]] - mx);
          sum += p[i * topk + j];
        }
        for (int64_t j = 0; j < topk; ++j) p[i * topk + j] /= sum;
      }
    });
  }
  void RouterTopKBackward(Span dlogits, Span dprobs, Span probs, Span choice, int64_t rows,
                          int64_t experts, int64_t topk) override {
    if (Is16Bit(dlogits.dtype)) {
      return Mixed(dlogits.dtype, [&](Widened& w) {
        RouterTopKBackward(w.Out(dlogits), w.In(dprobs), w.In(probs), choice, rows, experts, topk);
      });
    }
    PTDP_CHECK(dlogits.numel == rows * experts && dprobs.numel == rows * topk);
    PTDP_CHECK(probs.numel == rows * topk && choice.numel == rows * topk);
    Dispatch(dlogits, [&]<typename T>(T* dl) {
      const T* dp = P<T>(dprobs);
      const T* p = P<T>(probs);
      const int32_t* c = Tokens(choice);
      for (int64_t i = 0; i < rows; ++i) {
        T* row = dl + i * experts;
        std::fill(row, row + experts, T(0));
        T dot = 0;  // softmax backward: dl_j = p_j (dp_j - sum_i p_i dp_i)
        for (int64_t j = 0; j < topk; ++j) dot += p[i * topk + j] * dp[i * topk + j];
        for (int64_t j = 0; j < topk; ++j) {
          row[c[i * topk + j]] = p[i * topk + j] * (dp[i * topk + j] - dot);
        }
      }
    });
  }
  void GatherRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) override {
    PTDP_CHECK(dst.numel == rows * cols && index.numel == rows && src.dtype == dst.dtype);
    const int32_t* at = Tokens(index);
    const int64_t size = SizeOf(dst.dtype);
    for (int64_t r = 0; r < rows; ++r) {
      PTDP_CHECK(at[r] >= 0 && (at[r] + 1) * cols <= src.numel);
      std::memcpy(static_cast<char*>(dst.data) + r * cols * size,
                  static_cast<const char*>(src.data) + at[r] * cols * size,
                  static_cast<size_t>(cols * size));
    }
  }
  void ScatterAddRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) override {
    if (Is16Bit(dst.dtype)) {
      return Mixed(dst.dtype,
                   [&](Widened& w) { ScatterAddRows(w.Out(dst), w.In(src), index, rows, cols); });
    }
    PTDP_CHECK(src.numel == rows * cols && index.numel == rows);
    Dispatch(dst, [&]<typename T>(T* d) {
      const T* s = P<T>(src);
      const int32_t* at = Tokens(index);
      for (int64_t r = 0; r < rows; ++r) {
        PTDP_CHECK(at[r] >= 0 && (at[r] + 1) * cols <= dst.numel);
        for (int64_t j = 0; j < cols; ++j) d[at[r] * cols + j] += s[r * cols + j];
      }
    });
  }
  void ScaleRows(Span x, Span scale, int64_t rows, int64_t cols) override {
    if (Is16Bit(x.dtype)) {
      return Mixed(x.dtype, [&](Widened& w) { ScaleRows(w.Out(x), w.In(scale), rows, cols); });
    }
    PTDP_CHECK(x.numel == rows * cols && scale.numel == rows);
    Dispatch(x, [&]<typename T>(T* px) {
      const T* s = P<T>(scale);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) px[r * cols + j] *= s[r];
      }
    });
  }
  void RowDots(Span out, Span a, Span b, int64_t rows, int64_t cols) override {
    if (Is16Bit(a.dtype)) {
      return Mixed(a.dtype, [&](Widened& w) { RowDots(w.Out(out), w.In(a), w.In(b), rows, cols); });
    }
    PTDP_CHECK(out.numel == rows && a.numel == rows * cols && b.numel == rows * cols);
    Dispatch(out, [&]<typename T>(T* o) {
      const T* pa = P<T>(a);
      const T* pb = P<T>(b);
      for (int64_t r = 0; r < rows; ++r) {
        double dot = 0;
        for (int64_t j = 0; j < cols; ++j)
          dot += static_cast<double>(pa[r * cols + j]) * pb[r * cols + j];
        o[r] = static_cast<T>(dot);
      }
    });
  }

  void CrossEntropyMax(Span row_max, Span logits, int64_t rows, int64_t cols,
                       int64_t valid_cols) override {
    PTDP_CHECK(logits.numel == rows * cols && row_max.numel == rows && valid_cols <= cols);
    Dispatch(row_max, [&]<typename T>(T* mx) {
      const T* l = P<T>(logits);
      for (int64_t i = 0; i < rows; ++i) {
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < valid_cols; ++j) m = std::max(m, l[i * cols + j]);
        mx[i] = m;
      }
    });
  }
  void CrossEntropyExp(Span logits, Span sum_exp, Span target_logit, Span row_max, Span targets,
                       int64_t vocab_begin, int64_t rows, int64_t cols,
                       int64_t valid_cols) override {
    PTDP_CHECK(logits.numel == rows * cols && targets.numel == rows);
    Dispatch(logits, [&]<typename T>(T* l) {
      const T* mx = P<T>(row_max);
      T* se = P<T>(sum_exp);
      T* tl = P<T>(target_logit);
      const int32_t* tgt = Tokens(targets);
      for (int64_t i = 0; i < rows; ++i) {
        T* li = l + i * cols;
        const int64_t t = tgt[i] - vocab_begin;
        tl[i] = (t >= 0 && t < valid_cols) ? li[t] : T(0);
        T sum = 0;
        for (int64_t j = 0; j < valid_cols; ++j) {
          li[j] = std::exp(li[j] - mx[i]);
          sum += li[j];
        }
        for (int64_t j = valid_cols; j < cols; ++j) li[j] = 0;
        se[i] = sum;
      }
    });
  }
  void CrossEntropyFinish(Span logits, Span losses, Span sum_exp, Span row_max, Span target_logit,
                          int64_t rows, int64_t cols) override {
    PTDP_CHECK(logits.numel == rows * cols && losses.numel == rows);
    Dispatch(logits, [&]<typename T>(T* l) {
      const T* se = P<T>(sum_exp);
      const T* mx = P<T>(row_max);
      const T* tl = P<T>(target_logit);
      T* loss = P<T>(losses);
      for (int64_t i = 0; i < rows; ++i) {
        const T inv = T(1) / se[i];
        for (int64_t j = 0; j < cols; ++j) l[i * cols + j] *= inv;
        loss[i] = std::log(se[i]) + mx[i] - tl[i];
      }
    });
  }
  void CrossEntropyBackward(Span probs, Span targets, int64_t vocab_begin, int64_t rows,
                            int64_t cols, double scale) override {
    PTDP_CHECK(probs.numel == rows * cols && targets.numel == rows);
    Dispatch(probs, [&]<typename T>(T* p) {
      const int32_t* tgt = Tokens(targets);
      const T s = static_cast<T>(scale);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = tgt[i] - vocab_begin;
        if (t >= 0 && t < cols) p[i * cols + t] -= T(1);
        for (int64_t j = 0; j < cols; ++j) p[i * cols + j] *= s;
      }
    });
  }

  void AdamStep(Span param, Span grad, Span m, Span v, const AdamArgs& a) override {
    PTDP_CHECK(grad.numel == param.numel && m.numel == param.numel && v.numel == param.numel);
    Dispatch(param, [&]<typename T>(T* p) {
      const T* g = P<T>(grad);
      T* pm = P<T>(m);
      T* pv = P<T>(v);
      const T b1 = static_cast<T>(a.beta1), b2 = static_cast<T>(a.beta2);
      const T c1 = static_cast<T>(1 - std::pow(a.beta1, static_cast<double>(a.step)));
      const T c2 = static_cast<T>(1 - std::pow(a.beta2, static_cast<double>(a.step)));
      const T lr = static_cast<T>(a.lr), eps = static_cast<T>(a.eps);
      const T wd = static_cast<T>(a.weight_decay), gs = static_cast<T>(a.grad_scale);
      for (int64_t i = 0; i < param.numel; ++i) {
        const T gi = g[i] * gs;
        pm[i] = b1 * pm[i] + (T(1) - b1) * gi;
        pv[i] = b2 * pv[i] + (T(1) - b2) * gi * gi;
        const T update = (pm[i] / c1) / (std::sqrt(pv[i] / c2) + eps);
        p[i] -= lr * (update + wd * p[i]);
      }
    });
  }
  void SgdStep(Span param, Span grad, Span momentum_buf, double lr, double momentum,
               double weight_decay, double grad_scale) override {
    Dispatch(param, [&]<typename T>(T* p) {
      const T* g = P<T>(grad);
      T* buf = P<T>(momentum_buf);
      for (int64_t i = 0; i < param.numel; ++i) {
        // torch.optim.SGD (Megatron's --optimizer sgd): coupled weight decay, no dampening.
        const T d = g[i] * static_cast<T>(grad_scale) + static_cast<T>(weight_decay) * p[i];
        buf[i] = static_cast<T>(momentum) * buf[i] + d;
        p[i] -= static_cast<T>(lr) * buf[i];
      }
    });
  }

 protected:
  void* DoAllocate(int64_t bytes) override {
    // 64-byte alignment for the vector units; calloc-like zero fill.
    const size_t size = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, size);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, size);
    return p;
  }
  void DoFree(void* data) override { std::free(data); }

 private:
  template <typename F>
  static void Dispatch(Span s, F&& f) {
    switch (s.dtype) {
      case DType::kF32:
        f.template operator()<float>(static_cast<float*>(s.data));
        return;
      case DType::kF64:
        f.template operator()<double>(static_cast<double*>(s.data));
        return;
      case DType::kI32:
      case DType::kBF16:
      case DType::kF16:
        break;
    }
    // 16-bit data reach here only in kernels that take fp32 or fp64 alone (backend.h).
    throw InternalError("cpu backend: fp32 or fp64 kernel called on " + std::string(Name(s.dtype)));
  }
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(int blas_threads) {
  return std::make_unique<CpuBackend>(blas_threads);
}

}  // namespace ptdp
