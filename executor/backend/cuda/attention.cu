// Attention. Layouts (executor/backend/backend.h): qkv rows in (sequence, batch) order, each G
// groups of [q of its H/G heads | k | v], D wide; kv rows G groups of [k | v]; ctx rows H
// heads of D.
//
// The unfused path (AttentionForward / AttentionBackward, which save probs (B, H, S, S)) runs the
// CPU reference's products with cuBLAS, one strided-batched call per head over the batch, plus a
// masked-softmax kernel and a dS kernel (one block per row).
// On 16-bit data it runs that fp32 path on fp32 copies of its inputs and rounds its outputs once
// (the CPU's rounding points exactly: scores, softmax and P V stay fp32; probs and ctx are
// rounded on store), at the cost of fp32 temporaries of qkv, ctx and probs for the call.
//
// The block path (AttentionBlockForward / AttentionBlockBackward, context parallelism's flash
// attention) never forms S x S. One warp owns one query (or one key), its D <= 256 values split
// over the lanes (lane l holds dims l, l + 32, ...); blocks hold kWarpsMax or fewer warps and
// stream tiles of 32 keys (or queries) through shared memory, where lane t scores the tile's
// t-th row against the warp's own row (rows padded to D + 1 so the lanes hit distinct banks).
//  - forward: per key tile, the tile's max and sum by warp butterflies, the running output
//    rescaled once per tile (online softmax), then merged into (ctx, lse) as the CPU does;
//  - backward, with FlashAttention's Delta_i = dctx_i . ctx_i precomputed: one kernel owns keys
//    (dK, dV over all query tiles and the group's heads), another owns queries (dQ over key
//    tiles). Each output element has one owning thread that adds in a fixed order: no atomics,
//    the same bits on every run.
// On 16-bit data the block kernels load q, k, v, ctx and dctx as fp32 into the shared tiles,
// compute in fp32 with fp32 lse (and Delta), and round ctx, dq and dkv once on store.
#include <climits>
#include <cmath>

#include "executor/backend/cuda/backend.cuh"
#include "executor/backend/cuda/common.cuh"

namespace ptdp::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kTile = 32;         // keys (or queries) per shared-memory tile: one per lane
constexpr int kMaxHeadDim = 256;  // head_dim limit of the block kernels
constexpr int kPerLane = kMaxHeadDim / 32;
constexpr int kWarpsMax = 8;

// Causal softmax of each row of probs (rows = B * H * S, each S long; row r is query r % S).
template <typename T>
__global__ void CausalSoftmaxKernel(T* probs, int64_t seq) {
  const int64_t r = blockIdx.x, i = r % seq;
  T* row = probs + r * seq;
  T mx = NegInf<T>();
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) mx = Max(mx, row[j]);
  mx = BlockMax(mx);
  T sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const T e = Exp(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const T inv = T(1) / BlockSum(sum);
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) row[j] = j <= i ? row[j] * inv : T(0);
}

// dS = P (dP - rowsum(P dP)) in place in dp (B * S rows of S), causal; P of one head: batch b's
// (S, S) matrix at probs + b * probs_stride.
template <typename T>
__global__ void SoftmaxBackwardKernel(T* dp, const T* probs, int64_t probs_stride, int64_t seq) {
  const int64_t r = blockIdx.x, b = r / seq, i = r % seq;
  const T* prow = probs + b * probs_stride + i * seq;
  T* drow = dp + r * seq;
  T dot = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += prow[j] * drow[j];
  dot = BlockSum(dot);
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
    drow[j] = j <= i ? prow[j] * (drow[j] - dot) : T(0);
  }
}

struct BlockShape {
  int64_t sq, sk, batch, heads, groups, d;
  bool causal;
  // Heads per group and the row widths of q and kv.
  __host__ __device__ int64_t hpg() const { return heads / groups; }
  __host__ __device__ int64_t wq() const { return (heads + 2 * groups) * d; }
  __host__ __device__ int64_t wkv() const { return 2 * groups * d; }
};

// Keys [0, limit) that query i of the block may attend (the causal mask is aligned bottom right).
__device__ inline int64_t KeyLimit(const BlockShape& s, int64_t i) {
  if (!s.causal) return s.sk;
  const int64_t limit = i + s.sk - s.sq + 1;
  return limit < 0 ? 0 : (limit > s.sk ? s.sk : limit);
}

template <typename T>
__device__ inline T* SharedArray() {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  return reinterpret_cast<T*>(shared_raw);
}

// Grid (ceil(Sq / warps), B * H); warp w of block x owns query x * warps + w.
// Shared: q rows (warps x D) | k tile (32 x (D + 1)) | v tile (32 x D).
template <typename T>
__global__ void BlockForwardKernel(T* ctx, Acc<T>* lse, const T* q, const T* kv, BlockShape s,
                                   Acc<T> scale) {
  using A = Acc<T>;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t d = s.d, dpad = d + 1;
  A* qs = SharedArray<A>();
  A* ks = qs + warps * d;
  A* vs = ks + kTile * dpad;
  const int64_t bi = blockIdx.y / s.heads, hi = blockIdx.y % s.heads, gi = hi / s.hpg();
  const int64_t ld_q = s.batch * s.wq(), ld_kv = s.batch * s.wkv();
  const T* k_base = kv + bi * s.wkv() + gi * 2 * d;  // key j's row at + j * ld_kv
  const T* v_base = k_base + d;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps;
  const int64_t i = first + warp;
  const bool active = i < s.sq;
  const int64_t limit = active ? KeyLimit(s, i) : 0;
  const int64_t last =
      first + warps < s.sq ? first + warps - 1 : s.sq - 1;  // the block's last query
  const int64_t block_limit = KeyLimit(s, last);
  A* qw = qs + warp * d;
  if (active) {
    const T* q_row = q + i * ld_q + bi * s.wq() + (gi * (s.hpg() + 2) + hi % s.hpg()) * d;
    for (int64_t e = lane; e < d; e += 32) qw[e] = Wide(q_row[e]);
  }
  A m = NegInf<A>(), l = 0;
  A acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0;
  for (int64_t k0 = 0; k0 < block_limit; k0 += kTile) {
    __syncthreads();  // the previous tile is read (and, the first time, qw is written)
    for (int64_t idx = threadIdx.x; idx < kTile * d; idx += blockDim.x) {
      const int64_t r = idx / d, e = idx % d, j = k0 + r;
      ks[r * dpad + e] = j < s.sk ? Wide(k_base[j * ld_kv + e]) : A(0);
      vs[r * d + e] = j < s.sk ? Wide(v_base[j * ld_kv + e]) : A(0);
    }
    __syncthreads();
    if (active && k0 < limit) {  // uniform over the warp: every lane takes part below
      const int64_t j = k0 + lane;
      A score = NegInf<A>();
      if (j < limit) {
        A dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += qw[e] * ks[lane * dpad + e];
        score = dot * scale;
      }
      // Key k0 < limit is valid, so the tile max is finite.
      const A m_new = Max(m, WarpMax(score));
      const A p = j < limit ? Exp(score - m_new) : A(0);
      const A corr = Exp(m - m_new);  // 0 on the first tile (m = -inf)
      l = l * corr + WarpSum(p);
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) acc[t] *= corr;
      for (int jj = 0; jj < kTile; ++jj) {
        const A pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) {
          const int64_t e = lane + 32 * t;
          if (e < d) acc[t] += pj * vs[jj * d + e];
        }
      }
      m = m_new;
    }
  }
  if (active && limit > 0) {  // uniform over the warp
    // Transformer Engine's correction, as executor/backend/cpu.cc merges: both parts rescaled to
    // the merged denominator.
    A* l_out = lse + (i * s.batch + bi) * s.heads + hi;
    const A lb = m + Log(l);
    const A old = *l_out;
    const A mx = Max(old, lb);
    const A merged = mx + Log(Exp(old - mx) + Exp(lb - mx));
    const A old_w = Exp(old - merged), new_w = Exp(lb - merged);
    T* c = ctx + i * s.batch * s.heads * d + bi * s.heads * d + hi * d;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int64_t e = lane + 32 * t;
      if (e < d) c[e] = Narrow<T>(Wide(c[e]) * old_w + (acc[t] / l) * new_w);
    }
    __syncwarp();  // every lane has read the old lse before lane 0 replaces it
    if (lane == 0) *l_out = merged;
  }
}

// delta[r * H + h] = dctx . ctx over head h's D values of row r (FlashAttention's D_i), summed
// in order as the CPU does.
template <typename T>
__global__ void DeltaKernel(Acc<T>* delta, const T* dctx, const T* ctx, int64_t n, int64_t d) {
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    Acc<T> dot = 0;
    for (int64_t e = 0; e < d; ++e) dot += Wide(dctx[idx * d + e]) * Wide(ctx[idx * d + e]);
    delta[idx] = dot;
  }
}

// dK and dV: grid (ceil(Sk / warps), B * G); warp w of block x owns key x * warps + w of its
// group and sums over the group's heads, then over query tiles, in order.
// Shared: k rows (warps x D) | v rows (warps x D) | q tile (32 x (D + 1)) |
// dctx tile (32 x (D + 1)) | lse (32) | delta (32).
template <typename T>
__global__ void BlockBackwardKvKernel(T* dkv, const T* dctx, const Acc<T>* lse, const Acc<T>* delta,
                                      const T* q, const T* kv, BlockShape s, Acc<T> scale) {
  using A = Acc<T>;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t d = s.d, dpad = d + 1, hpg = s.hpg();
  A* kw_all = SharedArray<A>();
  A* vw_all = kw_all + warps * d;
  A* qs = vw_all + warps * d;
  A* dos = qs + kTile * dpad;
  A* lse_s = dos + kTile * dpad;
  A* delta_s = lse_s + kTile;
  const int64_t bi = blockIdx.y / s.groups, gi = blockIdx.y % s.groups;
  const int64_t ld_q = s.batch * s.wq(), ld_kv = s.batch * s.wkv(), ld_ctx = s.batch * s.heads * d;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps;
  const int64_t j = first + warp;
  const bool active = j < s.sk;
  const int64_t kv_off = j * ld_kv + bi * s.wkv() + gi * 2 * d;  // key j's k; its v at + d
  A* kw = kw_all + warp * d;
  A* vw = vw_all + warp * d;
  if (active) {
    for (int64_t e = lane; e < d; e += 32) {
      kw[e] = Wide(kv[kv_off + e]);
      vw[e] = Wide(kv[kv_off + d + e]);
    }
  }
  // Queries that may see the block's first key (and so any of its keys): i >= j - (Sk - Sq).
  const int64_t i_start = s.causal && first - (s.sk - s.sq) > 0 ? first - (s.sk - s.sq) : 0;
  A dk[kPerLane], dv[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) dk[t] = dv[t] = 0;
  for (int64_t t_head = 0; t_head < hpg; ++t_head) {
    const int64_t hi = gi * hpg + t_head;
    const int64_t q_col = bi * s.wq() + (gi * (hpg + 2) + t_head) * d;
    const int64_t c_col = bi * s.heads * d + hi * d;
    for (int64_t i0 = i_start; i0 < s.sq; i0 += kTile) {
      __syncthreads();  // the previous tile is read (and, the first time, kw and vw written)
      for (int64_t idx = threadIdx.x; idx < kTile * d; idx += blockDim.x) {
        const int64_t r = idx / d, e = idx % d, i = i0 + r;
        qs[r * dpad + e] = i < s.sq ? Wide(q[i * ld_q + q_col + e]) : A(0);
        dos[r * dpad + e] = i < s.sq ? Wide(dctx[i * ld_ctx + c_col + e]) : A(0);
      }
      for (int64_t r = threadIdx.x; r < kTile; r += blockDim.x) {
        const int64_t i = i0 + r;
        lse_s[r] = i < s.sq ? lse[(i * s.batch + bi) * s.heads + hi] : A(0);
        delta_s[r] = i < s.sq ? delta[(i * s.batch + bi) * s.heads + hi] : A(0);
      }
      __syncthreads();
      if (!active) continue;  // uniform over the warp; the loop bounds are the block's
      const int64_t i = i0 + lane;
      A p = 0, ds = 0;
      if (i < s.sq && (!s.causal || j <= i + s.sk - s.sq)) {
        A dot_qk = 0, dot_dv = 0;
        for (int64_t e = 0; e < d; ++e) {
          dot_qk += qs[lane * dpad + e] * kw[e];
          dot_dv += dos[lane * dpad + e] * vw[e];
        }
        p = Exp(dot_qk * scale - lse_s[lane]);
        ds = p * (dot_dv - delta_s[lane]);
      }
      for (int ii = 0; ii < kTile; ++ii) {
        const A pi = __shfl_sync(0xffffffffu, p, ii);
        const A dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) {
          const int64_t e = lane + 32 * t;
          if (e < d) {
            dv[t] += pi * dos[ii * dpad + e];
            dk[t] += dsi * qs[ii * dpad + e];
          }
        }
      }
    }
  }
  if (active) {
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int64_t e = lane + 32 * t;
      if (e < d) {
        dkv[kv_off + e] = Narrow<T>(Wide(dkv[kv_off + e]) + scale * dk[t]);
        dkv[kv_off + d + e] = Narrow<T>(Wide(dkv[kv_off + d + e]) + dv[t]);
      }
    }
  }
}

// dQ: grid (ceil(Sq / warps), B * H); warp w of block x owns query x * warps + w.
// Shared: q rows (warps x D) | dctx rows (warps x D) | k tile (32 x (D + 1)) |
// v tile (32 x (D + 1)).
template <typename T>
__global__ void BlockBackwardQKernel(T* dq, const T* dctx, const Acc<T>* lse, const Acc<T>* delta,
                                     const T* q, const T* kv, BlockShape s, Acc<T> scale) {
  using A = Acc<T>;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t d = s.d, dpad = d + 1;
  A* qw_all = SharedArray<A>();
  A* dow_all = qw_all + warps * d;
  A* ks = dow_all + warps * d;
  A* vs = ks + kTile * dpad;
  const int64_t bi = blockIdx.y / s.heads, hi = blockIdx.y % s.heads, gi = hi / s.hpg();
  const int64_t ld_q = s.batch * s.wq(), ld_kv = s.batch * s.wkv(), ld_ctx = s.batch * s.heads * d;
  const T* k_base = kv + bi * s.wkv() + gi * 2 * d;
  const T* v_base = k_base + d;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps;
  const int64_t i = first + warp;
  const bool active = i < s.sq;
  const int64_t limit = active ? KeyLimit(s, i) : 0;
  const int64_t last =
      first + warps < s.sq ? first + warps - 1 : s.sq - 1;  // the block's last query
  const int64_t block_limit = KeyLimit(s, last);
  const int64_t q_off = i * ld_q + bi * s.wq() + (gi * (s.hpg() + 2) + hi % s.hpg()) * d;
  A* qw = qw_all + warp * d;
  A* dow = dow_all + warp * d;
  A l_i = 0, delta_i = 0;
  if (active) {
    for (int64_t e = lane; e < d; e += 32) {
      qw[e] = Wide(q[q_off + e]);
      dow[e] = Wide(dctx[i * ld_ctx + bi * s.heads * d + hi * d + e]);
    }
    l_i = lse[(i * s.batch + bi) * s.heads + hi];
    delta_i = delta[(i * s.batch + bi) * s.heads + hi];
  }
  A acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0;
  for (int64_t k0 = 0; k0 < block_limit; k0 += kTile) {
    __syncthreads();  // the previous tile is read (and, the first time, qw and dow written)
    for (int64_t idx = threadIdx.x; idx < kTile * d; idx += blockDim.x) {
      const int64_t r = idx / d, e = idx % d, j = k0 + r;
      ks[r * dpad + e] = j < s.sk ? Wide(k_base[j * ld_kv + e]) : A(0);
      vs[r * dpad + e] = j < s.sk ? Wide(v_base[j * ld_kv + e]) : A(0);
    }
    __syncthreads();
    if (!(active && k0 < limit)) continue;  // uniform over the warp
    const int64_t j = k0 + lane;
    A ds = 0;
    if (j < limit) {
      A dot_qk = 0, dot_dv = 0;
      for (int64_t e = 0; e < d; ++e) {
        dot_qk += qw[e] * ks[lane * dpad + e];
        dot_dv += dow[e] * vs[lane * dpad + e];
      }
      const A p = Exp(dot_qk * scale - l_i);
      ds = p * (dot_dv - delta_i);
    }
    for (int jj = 0; jj < kTile; ++jj) {
      const A dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int64_t e = lane + 32 * t;
        if (e < d) acc[t] += dsj * ks[jj * dpad + e];
      }
    }
  }
  if (active) {
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int64_t e = lane + 32 * t;
      if (e < d) dq[q_off + e] = Narrow<T>(Wide(dq[q_off + e]) + scale * acc[t]);
    }
  }
}

unsigned ToGrid(int64_t v) {
  PTDP_CHECK(v > 0 && v <= INT_MAX);
  return static_cast<unsigned>(v);
}

}  // namespace

void CudaBackend::AttentionForward(Span ctx, Span probs, Span qkv, int64_t seq, int64_t batch,
                                   int64_t heads, int64_t groups, int64_t head_dim) {
  PTDP_CHECK(groups > 0 && heads % groups == 0);
  PTDP_CHECK(qkv.numel == seq * batch * (heads + 2 * groups) * head_dim);
  PTDP_CHECK(ctx.numel == seq * batch * heads * head_dim);
  PTDP_CHECK(probs.numel == batch * heads * seq * seq);
  CheckSpan("AttentionForward", "ctx", qkv.dtype, ctx, SpanRule::kData);
  CheckSpan("AttentionForward", "probs", qkv.dtype, probs, SpanRule::kData);
  if (Is16Bit(qkv.dtype)) {
    // The fp32 call on fp32 copies, its outputs rounded once: the CPU's rounding points exactly
    // (scores, softmax and P V in fp32; probs and ctx rounded to 16 bits on store).
    Scratch wide_qkv(*this, qkv.numel * 4), wide_ctx(*this, ctx.numel * 4);
    Scratch wide_probs(*this, probs.numel * 4);
    const Span fq{wide_qkv.get(), DType::kF32, qkv.numel};
    const Span fc{wide_ctx.get(), DType::kF32, ctx.numel};
    const Span fp{wide_probs.get(), DType::kF32, probs.numel};
    Convert(fq, qkv);
    AttentionForward(fc, fp, fq, seq, batch, heads, groups, head_dim);
    Convert(ctx, fc);
    Convert(probs, fp);
    return;
  }
  DispatchFloat(ctx, "AttentionForward", [&](auto zero) {
    using T = decltype(zero);
    if (seq == 0 || batch == 0 || heads == 0 || head_dim == 0) return;
    const int64_t s = seq, b = batch, h = heads, d = head_dim, hpg = h / groups;
    const int64_t width = (h + 2 * groups) * d, ld_qkv = b * width, ld_ctx = b * h * d;
    const double scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
    const T* x = Ptr<T>(qkv);
    T* p = Ptr<T>(probs);
    T* c = Ptr<T>(ctx);
    for (int64_t hi = 0; hi < h; ++hi) {  // scores, batched over the sequences
      const int64_t group = (hi / hpg) * (hpg + 2) * d;
      const int64_t q_off = group + (hi % hpg) * d, k_off = group + hpg * d;
      GemmBatched(ctx.dtype, false, true, s, s, d, scale, x + q_off, ld_qkv, width, x + k_off,
                  ld_qkv, width, 0, p + hi * s * s, s, h * s * s, b);
    }
    PTDP_CUDA_LAUNCH(CausalSoftmaxKernel<T>, ToGrid(b * h * s), kRowThreads, 0, stream_, p, s);
    for (int64_t hi = 0; hi < h; ++hi) {  // ctx = P V
      const int64_t v_off = (hi / hpg) * (hpg + 2) * d + (hpg + 1) * d;
      GemmBatched(ctx.dtype, false, false, s, d, s, 1, p + hi * s * s, s, h * s * s, x + v_off,
                  ld_qkv, width, 0, c + hi * d, ld_ctx, h * d, b);
    }
  });
}

void CudaBackend::AttentionBackward(Span dqkv, Span dctx, Span qkv, Span probs, int64_t seq,
                                    int64_t batch, int64_t heads, int64_t groups,
                                    int64_t head_dim) {
  PTDP_CHECK(groups > 0 && heads % groups == 0);
  PTDP_CHECK(qkv.numel == seq * batch * (heads + 2 * groups) * head_dim);
  PTDP_CHECK(dqkv.numel == qkv.numel && dctx.numel == seq * batch * heads * head_dim);
  PTDP_CHECK(probs.numel == batch * heads * seq * seq);
  CheckSpan("AttentionBackward", "dqkv", qkv.dtype, dqkv, SpanRule::kData);
  CheckSpan("AttentionBackward", "dctx", qkv.dtype, dctx, SpanRule::kData);
  CheckSpan("AttentionBackward", "probs", qkv.dtype, probs, SpanRule::kData);
  if (Is16Bit(qkv.dtype)) {  // as AttentionForward: the fp32 call on fp32 copies, rounded once
    Scratch wide_dqkv(*this, dqkv.numel * 4), wide_dctx(*this, dctx.numel * 4);
    Scratch wide_qkv(*this, qkv.numel * 4), wide_probs(*this, probs.numel * 4);
    const Span fdq{wide_dqkv.get(), DType::kF32, dqkv.numel};
    const Span fdc{wide_dctx.get(), DType::kF32, dctx.numel};
    const Span fq{wide_qkv.get(), DType::kF32, qkv.numel};
    const Span fp{wide_probs.get(), DType::kF32, probs.numel};
    Convert(fdc, dctx);
    Convert(fq, qkv);
    Convert(fp, probs);
    AttentionBackward(fdq, fdc, fq, fp, seq, batch, heads, groups, head_dim);  // overwrites fdq
    Convert(dqkv, fdq);
    return;
  }
  DispatchFloat(dqkv, "AttentionBackward", [&](auto zero) {
    using T = decltype(zero);
    if (seq == 0 || batch == 0 || heads == 0 || head_dim == 0) return;
    const int64_t s = seq, b = batch, h = heads, d = head_dim, hpg = h / groups;
    const int64_t width = (h + 2 * groups) * d, ld_qkv = b * width, ld_ctx = b * h * d;
    const double scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
    const T* x = Ptr<T>(qkv);
    const T* p = Ptr<T>(probs);
    const T* dc = Ptr<T>(dctx);
    T* dx = Ptr<T>(dqkv);
    Scratch dp_buf(*this, b * s * s * static_cast<int64_t>(sizeof(T)));
    T* dp = static_cast<T*>(dp_buf.get());
    const DType dt = dqkv.dtype;
    for (int64_t hi = 0; hi < h; ++hi) {
      const int64_t group = (hi / hpg) * (hpg + 2) * d;
      const int64_t q_off = group + (hi % hpg) * d, k_off = group + hpg * d, v_off = k_off + d;
      // The group's k and v gradients sum over its query heads: the first one writes.
      const double beta = hi % hpg == 0 ? 0 : 1;
      const T* ph = p + hi * s * s;
      const T* dch = dc + hi * d;
      GemmBatched(dt, false, true, s, s, d, 1, dch, ld_ctx, h * d, x + v_off, ld_qkv, width, 0, dp,
                  s, s * s, b);  // dP = dctx V^T
      GemmBatched(dt, true, false, s, d, s, 1, ph, s, h * s * s, dch, ld_ctx, h * d, beta,
                  dx + v_off, ld_qkv, width, b);  // dV (+)= P^T dctx
      PTDP_CUDA_LAUNCH(SoftmaxBackwardKernel<T>, ToGrid(b * s), kRowThreads, 0, stream_, dp, ph,
                       h * s * s, s);
      GemmBatched(dt, false, false, s, d, s, scale, dp, s, s * s, x + k_off, ld_qkv, width, 0,
                  dx + q_off, ld_qkv, width, b);  // dQ = dS K / sqrt(D)
      GemmBatched(dt, true, false, s, d, s, scale, dp, s, s * s, x + q_off, ld_qkv, width, beta,
                  dx + k_off, ld_qkv, width, b);  // dK (+)= dS^T Q / sqrt(D)
    }
  });
}

namespace {

// Warps per block for a kernel needing shared(warps) bytes: kWarpsMax, halved until it fits.
template <typename F>
int WarpsFitting(F shared, int64_t max_bytes) {
  int warps = kWarpsMax;
  while (warps > 1 && shared(warps) > max_bytes) warps /= 2;
  return warps;
}

}  // namespace

void CudaBackend::AttentionBlockForward(Span ctx, Span lse, Span q, Span kv, int64_t seq_q,
                                        int64_t seq_k, int64_t batch, int64_t heads, int64_t groups,
                                        int64_t head_dim, bool causal) {
  PTDP_CHECK(groups > 0 && heads % groups == 0);
  PTDP_CHECK(head_dim > 0 && head_dim <= kMaxHeadDim);
  PTDP_CHECK(q.numel == seq_q * batch * (heads + 2 * groups) * head_dim);
  PTDP_CHECK(kv.numel == seq_k * batch * 2 * groups * head_dim);
  PTDP_CHECK(ctx.numel == seq_q * batch * heads * head_dim && lse.numel == seq_q * batch * heads);
  const char* kname = "AttentionBlockForward";
  CheckSpan(kname, "ctx", q.dtype, ctx, SpanRule::kData);
  CheckSpan(kname, "lse", q.dtype, lse, SpanRule::kStats);
  CheckSpan(kname, "kv", q.dtype, kv, SpanRule::kData);
  DispatchData(q, kname, [&](auto zero) {
    using T = decltype(zero);
    using A = Acc<T>;  // shared tiles, lse and arithmetic
    if (seq_q == 0 || seq_k == 0 || batch == 0 || heads == 0) return;
    const BlockShape shape{seq_q, seq_k, batch, heads, groups, head_dim, causal};
    const A scale = static_cast<A>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const int64_t d = head_dim;
    auto shared = [&](int warps) {
      return (warps * d + kTile * (d + 1) + kTile * d) * static_cast<int64_t>(sizeof(A));
    };
    const int warps = WarpsFitting(shared, max_shared_bytes_);
    AllowSharedMemory(reinterpret_cast<const void*>(&BlockForwardKernel<T>), shared(warps));
    PTDP_CHECK(batch * heads <= 65535);
    const dim3 grid(ToGrid((seq_q + warps - 1) / warps), static_cast<unsigned>(batch * heads));
    PTDP_CUDA_LAUNCH(BlockForwardKernel<T>, grid, warps * 32, static_cast<size_t>(shared(warps)),
                     stream_, Ptr<T>(ctx), Ptr<A>(lse), Ptr<T>(q), Ptr<T>(kv), shape, scale);
  });
}

void CudaBackend::AttentionBlockBackward(Span dq, Span dkv, Span dctx, Span ctx, Span lse, Span q,
                                         Span kv, int64_t seq_q, int64_t seq_k, int64_t batch,
                                         int64_t heads, int64_t groups, int64_t head_dim,
                                         bool causal) {
  PTDP_CHECK(groups > 0 && heads % groups == 0);
  PTDP_CHECK(head_dim > 0 && head_dim <= kMaxHeadDim);
  PTDP_CHECK(q.numel == seq_q * batch * (heads + 2 * groups) * head_dim && dq.numel == q.numel);
  PTDP_CHECK(kv.numel == seq_k * batch * 2 * groups * head_dim && dkv.numel == kv.numel);
  PTDP_CHECK(ctx.numel == seq_q * batch * heads * head_dim && dctx.numel == ctx.numel);
  PTDP_CHECK(lse.numel == seq_q * batch * heads);
  const char* kname = "AttentionBlockBackward";
  CheckSpan(kname, "dq", q.dtype, dq, SpanRule::kData);
  CheckSpan(kname, "dkv", q.dtype, dkv, SpanRule::kData);
  CheckSpan(kname, "dctx", q.dtype, dctx, SpanRule::kData);
  CheckSpan(kname, "ctx", q.dtype, ctx, SpanRule::kData);
  CheckSpan(kname, "lse", q.dtype, lse, SpanRule::kStats);
  CheckSpan(kname, "kv", q.dtype, kv, SpanRule::kData);
  DispatchData(q, kname, [&](auto zero) {
    using T = decltype(zero);
    using A = Acc<T>;  // shared tiles, lse, delta and arithmetic
    if (seq_q == 0 || seq_k == 0 || batch == 0 || heads == 0) return;
    const BlockShape shape{seq_q, seq_k, batch, heads, groups, head_dim, causal};
    const A scale = static_cast<A>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const int64_t d = head_dim, rows = seq_q * batch * heads;
    Scratch delta_buf(*this, rows * static_cast<int64_t>(sizeof(A)));
    A* delta = static_cast<A*>(delta_buf.get());
    PTDP_CUDA_LAUNCH(DeltaKernel<T>, Blocks(rows), kThreads, 0, stream_, delta, Ptr<T>(dctx),
                     Ptr<T>(ctx), rows, d);
    PTDP_CHECK(batch * heads <= 65535);
    auto shared_kv = [&](int warps) {
      return (2 * warps * d + 2 * kTile * (d + 1) + 2 * kTile) * static_cast<int64_t>(sizeof(A));
    };
    const int warps_kv = WarpsFitting(shared_kv, max_shared_bytes_);
    AllowSharedMemory(reinterpret_cast<const void*>(&BlockBackwardKvKernel<T>),
                      shared_kv(warps_kv));
    const dim3 grid_kv(ToGrid((seq_k + warps_kv - 1) / warps_kv),
                       static_cast<unsigned>(batch * groups));
    PTDP_CUDA_LAUNCH(BlockBackwardKvKernel<T>, grid_kv, warps_kv * 32,
                     static_cast<size_t>(shared_kv(warps_kv)), stream_, Ptr<T>(dkv), Ptr<T>(dctx),
                     Ptr<A>(lse), delta, Ptr<T>(q), Ptr<T>(kv), shape, scale);
    auto shared_q = [&](int warps) {
      return (2 * warps * d + 2 * kTile * (d + 1)) * static_cast<int64_t>(sizeof(A));
    };
    const int warps_q = WarpsFitting(shared_q, max_shared_bytes_);
    AllowSharedMemory(reinterpret_cast<const void*>(&BlockBackwardQKernel<T>), shared_q(warps_q));
    const dim3 grid_q(ToGrid((seq_q + warps_q - 1) / warps_q),
                      static_cast<unsigned>(batch * heads));
    PTDP_CUDA_LAUNCH(BlockBackwardQKernel<T>, grid_q, warps_q * 32,
                     static_cast<size_t>(shared_q(warps_q)), stream_, Ptr<T>(dq), Ptr<T>(dctx),
                     Ptr<A>(lse), delta, Ptr<T>(q), Ptr<T>(kv), shape, scale);
  });
}

}  // namespace ptdp::cuda
