// The routed experts of Megatron-Core's mixture-of-experts layer on one rank
// (megatron/core/transformer/moe/: MoELayer in moe_layer.py, TopKRouter in router.py,
// MoEAlltoAllTokenDispatcher in token_dispatcher.py, the experts as TEGroupedMLP in experts.py).
// The shared experts are a dense tensor-parallel MLP that GptModel adds (gpt.h).
//
// On the T rows x of a rank (its tokens after the second norm; under sequence parallelism each
// TP rank routes its own T / tp rows):
//  1. router: logits (T, E) = x W_r^T with W_r (E, h) replicated over TP, no bias; per token the
//     k largest logits and the softmax over those k, the weights of its k copies
//     (Backend::RouterTopK: Megatron's default score function, softmax after the top-k without
//     --moe-router-pre-softmax, moe_utils.py topk_routing_with_score_function);
//  2. dispatch: the k T copies sorted by expert (permute), the counts per expert exchanged over
//     the EP group (all-to-all) and gathered over the expert TP group; then the copies and their
//     weights all-to-all over EP (expert e lives on EP rank e / (E / ep)), all-gathered over ETP
//     and sorted by local expert (sort_chunks_by_idxs);
//  3. experts: each local expert computes fc2(act(fc1(x)) * p) on its rows, act SwiGLU or GeLU
//     as the model's MLP, the routing weight p applied to the activation (TEGroupedMLP's weighted
//     activation); fc1 is split by rows and fc2 by columns over ETP, so fc2's outputs are
//     partial sums;
//  4. combine: rows back in the order they arrived, reduce-scattered over ETP, all-to-all back
//     over EP, and each token's k copies summed (unpermute).
// The backward runs the transposes in reverse: the output gradient travels the combine's path
// backwards to the experts (the dispatch's exchanges), their input gradients and the routing
// weights' gradients (partial sums over ETP) the dispatch's path backwards (the combine's
// exchanges), and the weights' gradients reach the chosen logits through the softmax.
// Dropless (no capacity factor) and without the auxiliary load-balancing loss, whose
// coefficient --moe-aux-loss-coeff is 0 by default: the training loss is the LM loss alone.
//
// Every rank of an EP and ETP group must run the same MoE layers' forwards and backwards in the
// same order, as the ranks of a pipeline stage do (they play the same schedule list).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "executor/backend/backend.h"
#include "executor/backend/measure.h"
#include "executor/comm/comm.h"
#include "executor/model/gpt_params.h"
#include "executor/model/weight_grad.h"

namespace ptdp {

// Where the copies of a rank's tokens go and where the rows its experts take come from: the
// dispatcher's metadata (token_dispatcher.py preprocess), on the host.
struct DispatchLayout {
  // The T k copies sorted by expert, each expert's in token order (permute): the token of each
  // and its slot t k + j in the router's (T, k) outputs.
  std::vector<int32_t> send_token, send_slot;
  std::vector<int64_t> expert_counts;  // (E): this rank's copies per expert
  std::vector<int64_t> send_rows;      // (ep): copies to each EP rank (input_splits)
  // counts[(s ep + i) E_l + e]: the rows for local expert e that EP rank i sent to ETP rank s
  // (with etp == 1, s is 0: this rank).
  std::vector<int64_t> counts;
  std::vector<int64_t> recv_rows;    // (ep): rows from each EP rank to this rank (output_splits)
  std::vector<int64_t> gather_rows;  // (etp): rows each ETP rank received (output_splits_tp)
  std::vector<int64_t> expert_rows;  // (E_l): rows of each local expert after the gather
  // The gathered rows (ETP rank, then EP rank, then local expert) sorted by local expert (then
  // ETP rank, then EP rank): the gathered row of each sorted row, and the inverse.
  std::vector<int32_t> sort_index, unsort_index;
  int64_t rows() const { return static_cast<int64_t>(sort_index.size()); }  // R
};

// The first half: the permutation of the copies from the chosen experts `choice` (T x k,
// row-major), with E experts over ep ranks.
DispatchLayout PermuteByExpert(std::span<const int32_t> choice, int64_t topk, int64_t experts,
                               int64_t ep);
// The second half, from the exchanged `counts` (layout above) seen by ETP rank `etp_rank`.
void SortByLocalExpert(std::vector<int64_t> counts, int64_t etp_rank, int64_t ep, int64_t etp,
                       int64_t experts_local, DispatchLayout* layout);

// One micro-batch's routing: the layout and its index tensors (int32) for the permutations.
struct MoeRouting {
  DispatchLayout layout;
  Tensor send_token, send_slot, sort_index, unsort_index;
};

// What a MoE layer keeps between its forward and backward (R: the rows this rank's experts
// take).
struct MoeActs {
  std::shared_ptr<Tensor> x;              // (T, h): the router's and the dispatch's input
  std::shared_ptr<Tensor> probs, choice;  // (T, k): routing weights, chosen experts (int32)
  std::shared_ptr<MoeRouting> routing;
  std::shared_ptr<Tensor> tokens;   // (R, h): the experts' input rows, sorted by local expert
  std::shared_ptr<Tensor> weights;  // (R): their routing weights
  std::shared_ptr<Tensor> fc1;      // (R, fc1 width / etp): the activation's input
  std::shared_ptr<Tensor> act;      // (R, width / etp): the activation's output
};

class MoeLayer {
 public:
  // `ep` and `etp`: this rank's expert-parallel and expert tensor-parallel groups
  // (executor/comm/topology.h), whose sizes match `dims`; `recorder` receives their exchanges as
  // "ep-comm" intervals.
  MoeLayer(const GptDims& dims, DType dtype, Backend& backend, Comm& ep, Comm& etp,
           Recorder& recorder);

  // x (T, h) -> the routed experts' output (T, h), from the layer's router and experts. Keeps
  // what the backward needs in `acts` when given.
  Tensor Forward(const LayerParams& p, std::shared_ptr<Tensor> x, MoeActs* acts);
  // dout (T, h), the gradient of Forward's output -> the gradient of x (T, h); the experts' and
  // the router's weight gradients go to `queue`. Consumes `acts`.
  Tensor Backward(const LayerParams& p, MoeActs& acts, const Tensor& dout, WeightGradQueue& queue);

 private:
  // Counts exchanged and index tensors uploaded for the chosen experts (T, k).
  std::shared_ptr<MoeRouting> Route(const Tensor& choice);
  // (T k, cols) rows in send order -> (R, cols) in gathered order: all-to-all over EP, then
  // all-gather over ETP. Combine is its transpose: (R, cols) -> (T k, cols), summing over ETP.
  Tensor Dispatch(const MoeRouting& r, const Tensor& rows, int64_t cols);
  Tensor Combine(const MoeRouting& r, Tensor rows, int64_t cols);
  Tensor New(std::vector<int64_t> shape, MemCategory category);
  std::shared_ptr<Tensor> Shared(std::vector<int64_t> shape, MemCategory category);

  const GptDims& d_;
  DType dtype_;
  Backend& backend_;
  Comm& ep_;
  Comm& etp_;
  Recorder& recorder_;
};

}  // namespace ptdp
