#include "executor/model/context_parallel.h"

#include <limits>
#include <utility>

#include "core/error.h"

namespace ptdp {
namespace {

// Ring message tags (the CP group carries nothing else): keys and values, and their gradients.
constexpr int kKvTag = 0;
constexpr int kKvGradTag = 1;

}  // namespace

int64_t SequenceShard::Position(int64_t local_index) const {
  PTDP_CHECK(local_index >= 0 && local_index < local());
  if (cp == 1) return local_index;
  const int64_t c = chunk();
  return local_index < c ? rank * c + local_index : (2 * cp - 1 - rank) * c + (local_index - c);
}

std::vector<PositionRun> PositionRuns(const SequenceShard& shard, int64_t begin, int64_t count) {
  PTDP_CHECK(begin >= 0 && count >= 0 && begin + count <= shard.local());
  std::vector<PositionRun> runs;
  if (count == 0) return runs;
  if (shard.cp == 1) return {{begin, begin, count}};
  const int64_t c = shard.chunk(), end = begin + count;
  if (begin < c) runs.push_back({begin, shard.Position(begin), std::min(end, c) - begin});
  if (end > c) {
    const int64_t from = std::max(begin, c);
    runs.push_back({from, shard.Position(from), end - from});
  }
  return runs;
}

ContextAttention::ContextAttention(Backend& backend, Comm& cp, CpComm exchange, int64_t full_seq,
                                   Recorder& recorder)
    : backend_(backend), cp_(cp), exchange_(exchange), full_seq_(full_seq), recorder_(recorder) {
  PTDP_CHECK(full_seq % (2 * int64_t{cp.size()}) == 0);
}

Tensor ContextAttention::New(DType dtype, std::vector<int64_t> shape, MemCategory category) {
  return Tensor(backend_, dtype, std::move(shape), category);
}

int64_t ContextAttention::lse_rows(const AttentionShape& s) const {
  return exchange_ == CpComm::kA2a ? s.rows() * cp_.size() : s.rows();
}

int64_t ContextAttention::lse_cols(const AttentionShape& s) const {
  return exchange_ == CpComm::kA2a ? s.heads / cp_.size() : s.heads;
}

void ContextAttention::Forward(Span ctx, Span lse, Span qkv, const AttentionShape& s) {
  PTDP_CHECK(s.seq * cp_.size() == full_seq_ && qkv.numel == s.rows() * s.qkv_cols());
  PTDP_CHECK(ctx.numel == s.rows() * s.heads * s.head_dim &&
             lse.numel == lse_rows(s) * lse_cols(s));
  switch (exchange_) {
    case CpComm::kP2p:
      return RingForward(ctx, lse, qkv, s);
    case CpComm::kAllGather:
      return AllGatherForward(ctx, lse, qkv, s);
    case CpComm::kA2a:
      return AllToAllForward(ctx, lse, qkv, s);
  }
}

void ContextAttention::Backward(Span dqkv, Span dctx, Span ctx, Span lse, Span qkv,
                                const AttentionShape& s) {
  PTDP_CHECK(dqkv.numel == qkv.numel && dctx.numel == ctx.numel);
  switch (exchange_) {
    case CpComm::kP2p:
      return RingBackward(dqkv, dctx, ctx, lse, qkv, s);
    case CpComm::kAllGather:
      return AllGatherBackward(dqkv, dctx, ctx, lse, qkv, s);
    case CpComm::kA2a:
      return AllToAllBackward(dqkv, dctx, ctx, lse, qkv, s);
  }
}

// --- layout helpers ---

Tensor PackKv(Backend& backend, Span qkv, const AttentionShape& s, MemCategory category) {
  const int64_t rows = qkv.numel / s.qkv_cols(), d = s.head_dim, hpg = s.heads / s.groups;
  const int64_t wkv = 2 * s.groups * d;
  Tensor kv(backend, qkv.dtype, {rows, wkv}, category);
  for (int64_t g = 0; g < s.groups; ++g) {
    const int64_t from = (g * (hpg + 2) + hpg) * d;
    backend.Copy2D(kv.span().Slice(g * 2 * d, kv.numel() - g * 2 * d), wkv,
                   qkv.Slice(from, qkv.numel - from), s.qkv_cols(), rows, 2 * d);
  }
  return kv;
}

void UnpackKv(Backend& backend, Span dqkv, Span dkv, const AttentionShape& s) {
  const int64_t rows = dqkv.numel / s.qkv_cols(), d = s.head_dim, hpg = s.heads / s.groups;
  const int64_t wkv = 2 * s.groups * d;
  for (int64_t g = 0; g < s.groups; ++g) {
    const int64_t to = (g * (hpg + 2) + hpg) * d;
    backend.Copy2D(dqkv.Slice(to, dqkv.numel - to), s.qkv_cols(),
                   dkv.Slice(g * 2 * d, dkv.numel - g * 2 * d), wkv, rows, 2 * d);
  }
}

void FlashAttentionForward(Backend& backend, Span ctx, Span lse, Span qkv,
                           const AttentionShape& s) {
  PTDP_CHECK(qkv.numel == s.rows() * s.qkv_cols() && ctx.numel == s.rows() * s.heads * s.head_dim &&
             lse.numel == s.rows() * s.heads);
  backend.Fill(ctx, 0);
  backend.Fill(lse, -std::numeric_limits<double>::infinity());
  const Tensor kv = PackKv(backend, qkv, s, MemCategory::kWorkspace);
  backend.AttentionBlockForward(ctx, lse, qkv, kv.span(), s.seq, s.seq, s.batch, s.heads, s.groups,
                                s.head_dim, /*causal=*/true);
}

void FlashAttentionBackward(Backend& backend, Span dqkv, Span dctx, Span ctx, Span lse, Span qkv,
                            const AttentionShape& s) {
  PTDP_CHECK(dqkv.numel == qkv.numel && dctx.numel == ctx.numel);
  backend.Fill(dqkv, 0);
  const Tensor kv = PackKv(backend, qkv, s, MemCategory::kWorkspace);
  Tensor dkv(backend, qkv.dtype, {s.rows(), 2 * s.groups * s.head_dim}, MemCategory::kWorkspace);
  backend.AttentionBlockBackward(dqkv, dkv.span(), dctx, ctx, lse, qkv, kv.span(), s.seq, s.seq,
                                 s.batch, s.heads, s.groups, s.head_dim, /*causal=*/true);
  UnpackKv(backend, dqkv, dkv.span(), s);
}

void ContextAttention::SequenceOrderRows(Span full, Span local, int r, int64_t cols, int64_t batch,
                                         bool into_full) {
  const SequenceShard shard{full_seq_, cp_.size(), r};
  const int64_t row = batch * cols;  // elements of one sequence position
  for (const PositionRun& run : PositionRuns(shard, 0, shard.local())) {
    const Span in_full = full.Slice(run.position_begin * row, run.length * row);
    const Span in_local = local.Slice(run.local_begin * row, run.length * row);
    into_full ? backend_.Copy(in_full, in_local) : backend_.Copy(in_local, in_full);
  }
}

Tensor ContextAttention::GatherKv(Span qkv, const AttentionShape& s) {
  const int n = cp_.size();
  const int64_t wkv = 2 * s.groups * s.head_dim, local = s.rows() * wkv;
  Tensor kv = PackKv(backend_, qkv, s, MemCategory::kCommBuffers);
  Tensor by_rank = New(qkv.dtype, {n * s.rows(), wkv}, MemCategory::kCommBuffers);
  const double t0 = recorder_.Now();
  cp_.AllGather(kv.span(), by_rank.span());
  recorder_.Add("cp all-gather k v", "cp-comm", t0, recorder_.Now());
  Tensor full = New(qkv.dtype, {n * s.rows(), wkv}, MemCategory::kCommBuffers);
  for (int r = 0; r < n; ++r) {
    SequenceOrderRows(full.span(), by_rank.span().Slice(r * local, local), r, wkv, s.batch, true);
  }
  return full;
}

Tensor ContextAttention::AllToAll(const Tensor& send) {
  Tensor recv = New(send.dtype(), {send.numel()}, MemCategory::kCommBuffers);
  const double t0 = recorder_.Now();
  cp_.AllToAll(send.span(), recv.span());
  recorder_.Add("cp all-to-all", "cp-comm", t0, recorder_.Now());
  return recv;
}

Tensor ContextAttention::ToHeads(Span local, int64_t cols, int64_t rows_local, int64_t batch) {
  const int n = cp_.size();
  const int64_t part = cols / n, block = rows_local * part;
  Tensor send = New(local.dtype, {n * block}, MemCategory::kCommBuffers);
  for (int c = 0; c < n; ++c) {
    backend_.Copy2D(send.span().Slice(c * block, block), part,
                    local.Slice(c * part, local.numel - c * part), cols, rows_local, part);
  }
  const Tensor recv = AllToAll(send);
  Tensor out = New(local.dtype, {n * rows_local, part}, MemCategory::kCommBuffers);
  for (int r = 0; r < n; ++r) {
    SequenceOrderRows(out.span(), recv.span().Slice(r * block, block), r, part, batch, true);
  }
  return out;
}

Tensor ContextAttention::FromHeads(Span heads, int64_t cols, int64_t rows_local, int64_t batch) {
  const int n = cp_.size();
  const int64_t part = cols / n, block = rows_local * part;
  Tensor send = New(heads.dtype, {n * block}, MemCategory::kCommBuffers);
  for (int r = 0; r < n; ++r) {
    SequenceOrderRows(heads, send.span().Slice(r * block, block), r, part, batch, false);
  }
  const Tensor recv = AllToAll(send);
  Tensor out = New(heads.dtype, {rows_local, cols}, MemCategory::kWorkspace);
  for (int c = 0; c < n; ++c) {
    backend_.Copy2D(out.span().Slice(c * part, out.numel() - c * part), cols,
                    recv.span().Slice(c * block, block), part, rows_local, part);
  }
  return out;
}

// --- p2p: ring attention ---

void ContextAttention::RingForward(Span ctx, Span lse, Span qkv, const AttentionShape& s) {
  const int n = cp_.size(), me = cp_.rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const int64_t c = s.seq / 2, half = c * s.batch;  // one chunk: tokens, rows
  const int64_t w = s.qkv_cols(), hd = s.heads * s.head_dim, h = s.heads;
  const int64_t wkv = 2 * s.groups * s.head_dim;
  backend_.Fill(ctx, 0);
  backend_.Fill(lse, -std::numeric_limits<double>::infinity());
  // The queries of local tokens [first, first + tokens) against `kv`.
  auto block = [&](int64_t first, int64_t tokens, Span kv, int64_t kv_tokens, bool causal) {
    const int64_t row = first * s.batch, rows = tokens * s.batch;
    backend_.AttentionBlockForward(ctx.Slice(row * hd, rows * hd), lse.Slice(row * h, rows * h),
                                   qkv.Slice(row * w, rows * w), kv, tokens, kv_tokens, s.batch,
                                   s.heads, s.groups, s.head_dim, causal);
  };
  Tensor kv = PackKv(backend_, qkv, s, MemCategory::kCommBuffers);
  Tensor incoming = New(qkv.dtype, {s.rows(), wkv}, MemCategory::kCommBuffers);
  for (int step = 0; step < n; ++step) {
    // Pass the block on before computing with it (Transformer Engine overlaps the two).
    std::unique_ptr<CommRequest> send;
    if (step + 1 < n) send = cp_.Isend(kv.span(), next, kKvTag);
    const int owner = (me - step + n) % n;
    if (step == 0) {
      block(0, s.seq, kv.span(), s.seq, true);
    } else if (owner < me) {  // an earlier rank's block: its first chunk precedes both of ours
      block(0, s.seq, kv.span().Slice(0, half * wkv), c, false);
    } else {  // a later rank's block: all of it precedes our second chunk only
      block(c, c, kv.span(), s.seq, false);
    }
    if (send != nullptr) {
      const double t0 = recorder_.Now();
      cp_.Recv(incoming.span(), prev, kKvTag);
      send->Wait();
      recorder_.Add("cp ring k v", "cp-comm", t0, recorder_.Now());
      std::swap(kv, incoming);
    }
  }
}

void ContextAttention::RingBackward(Span dqkv, Span dctx, Span ctx, Span lse, Span qkv,
                                    const AttentionShape& s) {
  const int n = cp_.size(), me = cp_.rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const int64_t c = s.seq / 2, half = c * s.batch;
  const int64_t w = s.qkv_cols(), hd = s.heads * s.head_dim, h = s.heads;
  const int64_t wkv = 2 * s.groups * s.head_dim;
  backend_.Fill(dqkv, 0);
  auto block = [&](int64_t first, int64_t tokens, Span kv, Span dkv, int64_t kv_tokens,
                   bool causal) {
    const int64_t row = first * s.batch, rows = tokens * s.batch;
    backend_.AttentionBlockBackward(
        dqkv.Slice(row * w, rows * w), dkv, dctx.Slice(row * hd, rows * hd),
        ctx.Slice(row * hd, rows * hd), lse.Slice(row * h, rows * h), qkv.Slice(row * w, rows * w),
        kv, tokens, kv_tokens, s.batch, s.heads, s.groups, s.head_dim, causal);
  };
  // The block of rank (me - step) and the sum of its gradients over the ranks that attended it
  // so far travel together; after the last step the sum goes on to its owner, rank me + 1.
  Tensor kv = PackKv(backend_, qkv, s, MemCategory::kCommBuffers);
  Tensor dkv = New(qkv.dtype, {s.rows(), wkv}, MemCategory::kCommBuffers);
  Tensor kv_in = New(qkv.dtype, {s.rows(), wkv}, MemCategory::kCommBuffers);
  Tensor dkv_in = New(qkv.dtype, {s.rows(), wkv}, MemCategory::kCommBuffers);
  for (int step = 0; step < n; ++step) {
    std::unique_ptr<CommRequest> send_kv;
    if (step + 1 < n) send_kv = cp_.Isend(kv.span(), next, kKvTag);
    const int owner = (me - step + n) % n;
    if (step == 0) {
      block(0, s.seq, kv.span(), dkv.span(), s.seq, true);
    } else if (owner < me) {
      block(0, s.seq, kv.span().Slice(0, half * wkv), dkv.span().Slice(0, half * wkv), c, false);
    } else {
      block(c, c, kv.span(), dkv.span(), s.seq, false);
    }
    std::unique_ptr<CommRequest> send_dkv = cp_.Isend(dkv.span(), next, kKvGradTag);
    const double t0 = recorder_.Now();
    if (send_kv != nullptr) cp_.Recv(kv_in.span(), prev, kKvTag);
    cp_.Recv(dkv_in.span(), prev, kKvGradTag);
    if (send_kv != nullptr) send_kv->Wait();
    send_dkv->Wait();
    recorder_.Add("cp ring k v and their grads", "cp-comm", t0, recorder_.Now());
    std::swap(kv, kv_in);
    std::swap(dkv, dkv_in);
  }
  UnpackKv(backend_, dqkv, dkv.span(), s);  // our own block's gradients, from every rank
}

// --- allgather ---

void ContextAttention::AllGatherForward(Span ctx, Span lse, Span qkv, const AttentionShape& s) {
  const int n = cp_.size(), me = cp_.rank();
  const int64_t c = s.seq / 2, half = c * s.batch;
  const int64_t w = s.qkv_cols(), hd = s.heads * s.head_dim, h = s.heads;
  const int64_t wkv = 2 * s.groups * s.head_dim;
  Tensor kv = GatherKv(qkv, s);
  backend_.Fill(ctx, 0);
  backend_.Fill(lse, -std::numeric_limits<double>::infinity());
  for (int64_t part = 0; part < 2; ++part) {
    // Local chunk `part` is chunk x of the sequence: it attends positions [0, (x + 1) c).
    const int64_t x = part == 0 ? me : 2 * n - 1 - me, keys = (x + 1) * c;
    const int64_t row = part * half;
    backend_.AttentionBlockForward(ctx.Slice(row * hd, half * hd), lse.Slice(row * h, half * h),
                                   qkv.Slice(row * w, half * w),
                                   kv.span().Slice(0, keys * s.batch * wkv), c, keys, s.batch,
                                   s.heads, s.groups, s.head_dim, true);
  }
}

void ContextAttention::AllGatherBackward(Span dqkv, Span dctx, Span ctx, Span lse, Span qkv,
                                         const AttentionShape& s) {
  const int n = cp_.size(), me = cp_.rank();
  const int64_t c = s.seq / 2, half = c * s.batch;
  const int64_t w = s.qkv_cols(), hd = s.heads * s.head_dim, h = s.heads;
  const int64_t wkv = 2 * s.groups * s.head_dim, local = s.rows() * wkv;
  Tensor kv = GatherKv(qkv, s);
  Tensor dkv = New(qkv.dtype, {n * s.rows(), wkv}, MemCategory::kCommBuffers);
  backend_.Fill(dqkv, 0);
  for (int64_t part = 0; part < 2; ++part) {
    const int64_t x = part == 0 ? me : 2 * n - 1 - me, keys = (x + 1) * c;
    const int64_t row = part * half, kv_numel = keys * s.batch * wkv;
    backend_.AttentionBlockBackward(dqkv.Slice(row * w, half * w), dkv.span().Slice(0, kv_numel),
                                    dctx.Slice(row * hd, half * hd), ctx.Slice(row * hd, half * hd),
                                    lse.Slice(row * h, half * h), qkv.Slice(row * w, half * w),
                                    kv.span().Slice(0, kv_numel), c, keys, s.batch, s.heads,
                                    s.groups, s.head_dim, true);
  }
  // Back to rank order, and each rank's share summed over the ranks that attended it.
  Tensor by_rank = New(qkv.dtype, {n * s.rows(), wkv}, MemCategory::kCommBuffers);
  for (int r = 0; r < n; ++r) {
    SequenceOrderRows(dkv.span(), by_rank.span().Slice(r * local, local), r, wkv, s.batch, false);
  }
  Tensor mine = New(qkv.dtype, {s.rows(), wkv}, MemCategory::kCommBuffers);
  const double t0 = recorder_.Now();
  cp_.ReduceScatter(by_rank.span(), mine.span());
  recorder_.Add("cp reduce-scatter k v grads", "cp-comm", t0, recorder_.Now());
  UnpackKv(backend_, dqkv, mine.span(), s);
}

// --- a2a ---

void ContextAttention::AllToAllForward(Span ctx, Span lse, Span qkv, const AttentionShape& s) {
  const int n = cp_.size();
  const AttentionShape heads{full_seq_, s.batch, s.heads / n, s.groups / n, s.head_dim};
  PTDP_CHECK(heads.heads * n == s.heads && heads.groups * n == s.groups);
  Tensor qkv_h = ToHeads(qkv, s.qkv_cols(), s.rows(), s.batch);
  Tensor kv_h = PackKv(backend_, qkv_h.span(), heads, MemCategory::kCommBuffers);
  Tensor ctx_h = New(qkv.dtype, {heads.rows(), heads.heads * s.head_dim}, MemCategory::kWorkspace);
  backend_.Fill(lse, -std::numeric_limits<double>::infinity());
  backend_.AttentionBlockForward(ctx_h.span(), lse, qkv_h.span(), kv_h.span(), full_seq_, full_seq_,
                                 s.batch, heads.heads, heads.groups, s.head_dim, true);
  Tensor out = FromHeads(ctx_h.span(), s.heads * s.head_dim, s.rows(), s.batch);
  backend_.Copy(ctx, out.span());
}

void ContextAttention::AllToAllBackward(Span dqkv, Span dctx, Span ctx, Span lse, Span qkv,
                                        const AttentionShape& s) {
  const int n = cp_.size();
  const AttentionShape heads{full_seq_, s.batch, s.heads / n, s.groups / n, s.head_dim};
  const int64_t hd = s.heads * s.head_dim;
  Tensor qkv_h = ToHeads(qkv, s.qkv_cols(), s.rows(), s.batch);
  Tensor kv_h = PackKv(backend_, qkv_h.span(), heads, MemCategory::kCommBuffers);
  Tensor ctx_h = ToHeads(ctx, hd, s.rows(), s.batch);
  Tensor dctx_h = ToHeads(dctx, hd, s.rows(), s.batch);
  Tensor dqkv_h = New(qkv.dtype, {heads.rows(), heads.qkv_cols()}, MemCategory::kWorkspace);
  Tensor dkv_h =
      New(qkv.dtype, {heads.rows(), 2 * heads.groups * s.head_dim}, MemCategory::kWorkspace);
  backend_.AttentionBlockBackward(dqkv_h.span(), dkv_h.span(), dctx_h.span(), ctx_h.span(), lse,
                                  qkv_h.span(), kv_h.span(), full_seq_, full_seq_, s.batch,
                                  heads.heads, heads.groups, s.head_dim, true);
  UnpackKv(backend_, dqkv_h.span(), dkv_h.span(), heads);
  Tensor out = FromHeads(dqkv_h.span(), s.qkv_cols(), s.rows(), s.batch);
  backend_.Copy(dqkv, out.span());
}

}  // namespace ptdp
