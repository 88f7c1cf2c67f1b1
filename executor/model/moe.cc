#include "executor/model/moe.h"

#include <numeric>

#include "core/error.h"

namespace ptdp {
namespace {

// Elements of each block of `rows` rows of `cols` columns.
std::vector<int64_t> Elements(const std::vector<int64_t>& rows, int64_t cols) {
  std::vector<int64_t> out;
  for (const int64_t r : rows) out.push_back(r * cols);
  return out;
}

int64_t Total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// Rows [begin, begin + n) of a (rows, cols) tensor.
Span Rows(const Tensor& t, int64_t begin, int64_t n, int64_t cols) {
  return t.span().Slice(begin * cols, n * cols);
}

void UploadIndex(Backend& backend, Tensor* t, const std::vector<int32_t>& host) {
  *t = Tensor(backend, DType::kI32, {static_cast<int64_t>(host.size())}, MemCategory::kActivations);
  if (!host.empty()) backend.Upload(t->span(), host.data());
}

}  // namespace

DispatchLayout PermuteByExpert(std::span<const int32_t> choice, int64_t topk, int64_t experts,
                               int64_t ep) {
  PTDP_CHECK(topk >= 1 && choice.size() % static_cast<size_t>(topk) == 0 && experts % ep == 0);
  DispatchLayout l;
  l.expert_counts.assign(static_cast<size_t>(experts), 0);
  for (const int32_t e : choice) {
    PTDP_CHECK(e >= 0 && e < experts);
    ++l.expert_counts[static_cast<size_t>(e)];
  }
  // A counting sort by expert, stable in token order (permute's masked_select over the routing
  // map's columns).
  std::vector<int64_t> at(l.expert_counts.size());
  std::exclusive_scan(l.expert_counts.begin(), l.expert_counts.end(), at.begin(), int64_t{0});
  l.send_token.resize(choice.size());
  l.send_slot.resize(choice.size());
  for (size_t c = 0; c < choice.size(); ++c) {
    const auto pos = static_cast<size_t>(at[static_cast<size_t>(choice[c])]++);
    l.send_token[pos] = static_cast<int32_t>(c / static_cast<size_t>(topk));
    l.send_slot[pos] = static_cast<int32_t>(c);
  }
  const int64_t local = experts / ep;
  l.send_rows.assign(static_cast<size_t>(ep), 0);
  for (int64_t e = 0; e < experts; ++e) {
    l.send_rows[static_cast<size_t>(e / local)] += l.expert_counts[static_cast<size_t>(e)];
  }
  return l;
}

void SortByLocalExpert(std::vector<int64_t> counts, int64_t etp_rank, int64_t ep, int64_t etp,
                       int64_t experts_local, DispatchLayout* l) {
  PTDP_CHECK(static_cast<int64_t>(counts.size()) == etp * ep * experts_local);
  PTDP_CHECK(etp_rank >= 0 && etp_rank < etp);
  auto count = [&](int64_t s, int64_t i, int64_t e) {
    return counts[static_cast<size_t>((s * ep + i) * experts_local + e)];
  };
  l->recv_rows.assign(static_cast<size_t>(ep), 0);
  l->gather_rows.assign(static_cast<size_t>(etp), 0);
  l->expert_rows.assign(static_cast<size_t>(experts_local), 0);
  // Where each (ETP rank, EP rank, expert) chunk starts among the gathered rows.
  std::vector<int64_t> begin(counts.size());
  int64_t at = 0;
  for (int64_t s = 0; s < etp; ++s) {
    for (int64_t i = 0; i < ep; ++i) {
      for (int64_t e = 0; e < experts_local; ++e) {
        const int64_t n = count(s, i, e);
        begin[static_cast<size_t>((s * ep + i) * experts_local + e)] = at;
        at += n;
        l->gather_rows[static_cast<size_t>(s)] += n;
        l->expert_rows[static_cast<size_t>(e)] += n;
        if (s == etp_rank) l->recv_rows[static_cast<size_t>(i)] += n;
      }
    }
  }
  l->sort_index.clear();
  for (int64_t e = 0; e < experts_local; ++e) {
    for (int64_t s = 0; s < etp; ++s) {
      for (int64_t i = 0; i < ep; ++i) {
        const int64_t first = begin[static_cast<size_t>((s * ep + i) * experts_local + e)];
        for (int64_t j = 0; j < count(s, i, e); ++j) {
          l->sort_index.push_back(static_cast<int32_t>(first + j));
        }
      }
    }
  }
  l->unsort_index.assign(l->sort_index.size(), 0);
  for (size_t r = 0; r < l->sort_index.size(); ++r) {
    l->unsort_index[static_cast<size_t>(l->sort_index[r])] = static_cast<int32_t>(r);
  }
  l->counts = std::move(counts);
}

MoeLayer::MoeLayer(const GptDims& dims, DType dtype, Backend& backend, Comm& ep, Comm& etp,
                   Recorder& recorder)
    : d_(dims), dtype_(dtype), backend_(backend), ep_(ep), etp_(etp), recorder_(recorder) {
  PTDP_CHECK(ep.size() == d_.ep && etp.size() == d_.etp && d_.experts > 0);
}

Tensor MoeLayer::New(std::vector<int64_t> shape, MemCategory category) {
  return Tensor(backend_, dtype_, std::move(shape), category);
}

std::shared_ptr<Tensor> MoeLayer::Shared(std::vector<int64_t> shape, MemCategory category) {
  return std::make_shared<Tensor>(backend_, dtype_, std::move(shape), category);
}

std::shared_ptr<MoeRouting> MoeLayer::Route(const Tensor& choice) {
  const int64_t E = d_.experts, El = d_.experts_local;
  std::vector<int32_t> chosen(static_cast<size_t>(choice.numel()));
  if (!chosen.empty()) backend_.Download(choice.span(), chosen.data());
  auto r = std::make_shared<MoeRouting>();
  r->layout = PermuteByExpert(chosen, d_.topk, E, d_.ep);
  // The counts first (the dispatcher syncs them to the host before its all-to-all): to each EP
  // rank those of its experts, from each those of ours; then every ETP rank's.
  const double t0 = recorder_.Now();
  std::vector<int32_t> mine(r->layout.expert_counts.begin(), r->layout.expert_counts.end());
  Tensor send(backend_, DType::kI32, {E}, MemCategory::kCommBuffers);
  Tensor recv(backend_, DType::kI32, {E}, MemCategory::kCommBuffers);
  backend_.Upload(send.span(), mine.data());
  ep_.AllToAll(send.span(), recv.span());
  Tensor all(backend_, DType::kI32, {d_.etp * E}, MemCategory::kCommBuffers);
  etp_.AllGather(recv.span(), all.span());
  std::vector<int32_t> counts(static_cast<size_t>(all.numel()));
  backend_.Download(all.span(), counts.data());
  recorder_.Add("ep counts", "ep-comm", t0, recorder_.Now());
  SortByLocalExpert(std::vector<int64_t>(counts.begin(), counts.end()), etp_.rank(), d_.ep, d_.etp,
                    El, &r->layout);
  UploadIndex(backend_, &r->send_token, r->layout.send_token);
  UploadIndex(backend_, &r->send_slot, r->layout.send_slot);
  UploadIndex(backend_, &r->sort_index, r->layout.sort_index);
  UploadIndex(backend_, &r->unsort_index, r->layout.unsort_index);
  return r;
}

Tensor MoeLayer::Dispatch(const MoeRouting& r, const Tensor& rows, int64_t cols) {
  const DispatchLayout& l = r.layout;
  const double t0 = recorder_.Now();
  Tensor received = New({Total(l.recv_rows), cols}, MemCategory::kCommBuffers);
  ep_.AllToAllV(rows.span(), Elements(l.send_rows, cols), received.span(),
                Elements(l.recv_rows, cols));
  recorder_.Add("ep all-to-all", "ep-comm", t0, recorder_.Now());
  if (d_.etp == 1) return received;
  const double t1 = recorder_.Now();
  Tensor gathered = New({l.rows(), cols}, MemCategory::kCommBuffers);
  etp_.AllGatherV(received.span(), gathered.span(), Elements(l.gather_rows, cols));
  recorder_.Add("etp all-gather", "ep-comm", t1, recorder_.Now());
  return gathered;
}

Tensor MoeLayer::Combine(const MoeRouting& r, Tensor rows, int64_t cols) {
  const DispatchLayout& l = r.layout;
  if (d_.etp > 1) {
    const double t0 = recorder_.Now();
    Tensor mine = New({Total(l.recv_rows), cols}, MemCategory::kCommBuffers);
    etp_.ReduceScatterV(rows.span(), mine.span(), Elements(l.gather_rows, cols));
    recorder_.Add("etp reduce-scatter", "ep-comm", t0, recorder_.Now());
    rows = std::move(mine);
  }
  const double t1 = recorder_.Now();
  Tensor out = New({Total(l.send_rows), cols}, MemCategory::kCommBuffers);
  ep_.AllToAllV(rows.span(), Elements(l.recv_rows, cols), out.span(), Elements(l.send_rows, cols));
  recorder_.Add("ep all-to-all", "ep-comm", t1, recorder_.Now());
  return out;
}

Tensor MoeLayer::Forward(const LayerParams& p, std::shared_ptr<Tensor> x, MoeActs* acts) {
  // x (T, h); k T copies; R rows for this rank's experts; F their width here, F1 fc1's.
  const int64_t h = d_.hidden, E = d_.experts, k = d_.topk, T = x->numel() / h;
  const int64_t F = d_.expert_ffn_local, F1 = d_.expert_fc1_local();
  const MemCategory act = MemCategory::kActivations, work = MemCategory::kWorkspace;
  PTDP_CHECK(static_cast<int64_t>(p.experts.size()) == d_.experts_local);

  // 1. Router.
  Tensor logits = New({T, E}, work);
  backend_.Gemm(false, true, T, E, h, 1.0, x->span(), h, p.router_w.value, h, 0.0, logits.span(),
                E);
  auto probs = Shared({T, k}, act);
  auto choice = std::make_shared<Tensor>(backend_, DType::kI32, std::vector<int64_t>{T, k}, act);
  backend_.RouterTopK(probs->span(), choice->span(), logits.span(), T, E, k);
  logits = Tensor();

  // 2. Dispatch.
  std::shared_ptr<MoeRouting> routing = Route(*choice);
  const DispatchLayout& l = routing->layout;
  const int64_t R = l.rows();
  Tensor permuted = New({T * k, h}, work), permuted_probs = New({T * k}, work);
  backend_.GatherRows(permuted.span(), x->span(), routing->send_token.span(), T * k, h);
  backend_.GatherRows(permuted_probs.span(), probs->span(), routing->send_slot.span(), T * k, 1);
  Tensor gathered = Dispatch(*routing, permuted, h);
  Tensor gathered_probs = Dispatch(*routing, permuted_probs, 1);
  permuted = Tensor(), permuted_probs = Tensor();
  auto tokens = Shared({R, h}, act), weights = Shared({R}, act);
  backend_.GatherRows(tokens->span(), gathered.span(), routing->sort_index.span(), R, h);
  backend_.GatherRows(weights->span(), gathered_probs.span(), routing->sort_index.span(), R, 1);
  gathered = Tensor(), gathered_probs = Tensor();

  // 3. Experts: fc1 per expert, the activation and its weighting on every row at once, fc2.
  auto fc1 = Shared({R, F1}, act), activation = Shared({R, F}, act);
  Tensor y = New({R, h}, work), scaled = New({R, F}, work);
  int64_t begin = 0;
  for (int64_t e = 0; e < d_.experts_local; ++e) {
    const int64_t n = l.expert_rows[static_cast<size_t>(e)];
    if (n > 0) {
      backend_.Gemm(false, true, n, F1, h, 1.0, Rows(*tokens, begin, n, h), h,
                    p.experts[static_cast<size_t>(e)].fc1_w.value, h, 0.0, Rows(*fc1, begin, n, F1),
                    F1);
    }
    begin += n;
  }
  if (R > 0) {
    if (d_.swiglu) {
      backend_.SwiGlu(activation->span(), fc1->span(), R, F);
    } else {
      backend_.Gelu(activation->span(), fc1->span());
    }
    backend_.Copy(scaled.span(), activation->span());
    backend_.ScaleRows(scaled.span(), weights->span(), R, F);
  }
  begin = 0;
  for (int64_t e = 0; e < d_.experts_local; ++e) {
    const int64_t n = l.expert_rows[static_cast<size_t>(e)];
    if (n > 0) {
      backend_.Gemm(false, true, n, h, F, 1.0, Rows(scaled, begin, n, F), F,
                    p.experts[static_cast<size_t>(e)].fc2_w.value, F, 0.0, Rows(y, begin, n, h), h);
    }
    begin += n;
  }
  scaled = Tensor();

  // 4. Combine: back to the order the rows arrived in, to their ranks, summed per token.
  Tensor back = New({R, h}, work);
  backend_.GatherRows(back.span(), y.span(), routing->unsort_index.span(), R, h);
  y = Tensor();
  Tensor copies = Combine(*routing, std::move(back), h);
  Tensor out = New({T, h}, act);
  backend_.ScatterAddRows(out.span(), copies.span(), routing->send_token.span(), T * k, h);
  if (acts != nullptr) {
    *acts =
        MoeActs{std::move(x), probs, choice, std::move(routing), tokens, weights, fc1, activation};
  }
  return out;
}

Tensor MoeLayer::Backward(const LayerParams& p, MoeActs& a, const Tensor& dout,
                          WeightGradQueue& queue) {
  const int64_t h = d_.hidden, E = d_.experts, k = d_.topk, T = a.x->numel() / h;
  const int64_t F = d_.expert_ffn_local, F1 = d_.expert_fc1_local();
  const MemCategory act = MemCategory::kActivations, work = MemCategory::kWorkspace;
  const MoeRouting& r = *a.routing;
  const DispatchLayout& l = r.layout;
  const int64_t R = l.rows();

  // The combine's transpose: each copy takes its token's gradient, and travels to its expert.
  Tensor dcopies = New({T * k, h}, work);
  backend_.GatherRows(dcopies.span(), dout.span(), r.send_token.span(), T * k, h);
  Tensor dgathered = Dispatch(r, dcopies, h);
  dcopies = Tensor();
  auto dy = Shared({R, h}, act);
  backend_.GatherRows(dy->span(), dgathered.span(), r.sort_index.span(), R, h);
  dgathered = Tensor();

  // Experts. fc2's input (the weighted activation) again, for its weight gradient.
  auto scaled = Shared({R, F}, act);
  Tensor dscaled = New({R, F}, work);
  if (R > 0) {
    backend_.Copy(scaled->span(), a.act->span());
    backend_.ScaleRows(scaled->span(), a.weights->span(), R, F);
  }
  int64_t begin = 0;
  for (int64_t e = 0; e < d_.experts_local; ++e) {
    const int64_t n = l.expert_rows[static_cast<size_t>(e)];
    const ExpertParams& w = p.experts[static_cast<size_t>(e)];
    if (n > 0) {
      backend_.Gemm(false, false, n, F, h, 1.0, Rows(*dy, begin, n, h), h, w.fc2_w.value, F, 0.0,
                    Rows(dscaled, begin, n, F), F);
      queue.Push(LinearGradTask({scaled, dy}, Rows(*scaled, begin, n, F), Rows(*dy, begin, n, h),
                                w.fc2_w.grad, Span(), n, F, h));
    }
    begin += n;
  }
  // The weights' gradients (partial sums over ETP: each rank holds 1/etp of the activation),
  // then the activation's.
  Tensor dweights = New({R}, work);
  auto dfc1 = Shared({R, F1}, act);
  if (R > 0) {
    backend_.RowDots(dweights.span(), dscaled.span(), a.act->span(), R, F);
    backend_.ScaleRows(dscaled.span(), a.weights->span(), R, F);
    if (d_.swiglu) {
      backend_.SwiGluBackward(dfc1->span(), a.fc1->span(), dscaled.span(), R, F);
    } else {
      backend_.GeluBackward(dfc1->span(), a.fc1->span(), dscaled.span());
    }
  }
  dscaled = Tensor();
  Tensor dtokens = New({R, h}, work);
  begin = 0;
  for (int64_t e = 0; e < d_.experts_local; ++e) {
    const int64_t n = l.expert_rows[static_cast<size_t>(e)];
    const ExpertParams& w = p.experts[static_cast<size_t>(e)];
    if (n > 0) {
      backend_.Gemm(false, false, n, h, F1, 1.0, Rows(*dfc1, begin, n, F1), F1, w.fc1_w.value, h,
                    0.0, Rows(dtokens, begin, n, h), h);
      queue.Push(LinearGradTask({a.tokens, dfc1}, Rows(*a.tokens, begin, n, h),
                                Rows(*dfc1, begin, n, F1), w.fc1_w.grad, Span(), n, h, F1));
    }
    begin += n;
  }

  // The dispatch's transpose: rows and weights' gradients back to their tokens' ranks, summed
  // over ETP, then per token.
  Tensor back = New({R, h}, work), back_weights = New({R}, work);
  backend_.GatherRows(back.span(), dtokens.span(), r.unsort_index.span(), R, h);
  backend_.GatherRows(back_weights.span(), dweights.span(), r.unsort_index.span(), R, 1);
  dtokens = Tensor(), dweights = Tensor();
  Tensor dpermuted = Combine(r, std::move(back), h);
  Tensor dpermuted_probs = Combine(r, std::move(back_weights), 1);
  Tensor dx = New({T, h}, act), dprobs = New({T, k}, work);
  backend_.ScatterAddRows(dx.span(), dpermuted.span(), r.send_token.span(), T * k, h);
  backend_.ScatterAddRows(dprobs.span(), dpermuted_probs.span(), r.send_slot.span(), T * k, 1);

  // Router: dlogits through the top-k softmax; dx += dlogits W_r; dW_r += dlogits^T x.
  auto dlogits = Shared({T, E}, act);
  backend_.RouterTopKBackward(dlogits->span(), dprobs.span(), a.probs->span(), a.choice->span(), T,
                              E, k);
  backend_.Gemm(false, false, T, h, E, 1.0, dlogits->span(), E, p.router_w.value, h, 1.0, dx.span(),
                h);
  queue.Push(LinearGradTask({a.x, dlogits}, a.x->span(), dlogits->span(), p.router_w.grad, Span(),
                            T, h, E));
  a = MoeActs{};
  return dx;
}

}  // namespace ptdp
