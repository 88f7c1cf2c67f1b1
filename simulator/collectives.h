// Collective communication: where Megatron places a group's ranks, which links the group
// crosses, and how long a collective takes on them.
//
// Placement: Megatron's default rank order "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py),
// first varying fastest; without expert parallelism (ep = 1)
//   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)),
// and rank r lives on node r / gpus_per_node. The gradients are reduced over data and context
// parallel together (Megatron's data-parallel group "with context parallel"): cp x dp ranks of
// stride tp.
//
// Time: the nccl-tests convention (NVIDIA/nccl-tests doc/PERFORMANCE.md): for n ranks and a
// message of S bytes (the full gathered size for all-gather / reduce-scatter),
//   time = latency + factor(n) * S / busbw,
// factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all (S the
// bytes each rank holds), 1 for send/recv. An all-to-all across nodes instead sends the part of
// S for other nodes, (n - k)/n with k of the group's ranks on the node, through the NICs its
// node's k ranks share, at the same time as the (k - 1)/n for its node's peers over NVLink.
// busbw is the bus bandwidth the group's slowest link sustains: NVLink's inside one node; across
// nodes, the NICs of the group's ranks on one node (NCCL runs one ring channel per NIC, so k
// ranks of the group per node give k NICs' worth), never more than NVLink's.
// latency is NCCL's own model (src/graph/tuning.cc, ring): base + per step, with 2(n-1) steps
// for all-reduce and n-1 for all-gather / reduce-scatter / all-to-all, of which 2(nodes-1)
// resp. nodes-1 cross the network.
#pragma once

#include <cstdint>

#include "core/cluster_spec.h"
#include "core/parallel_config.h"

namespace ptdp {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };

// nccl-tests bus-bandwidth factor for a collective over n ranks.
double BusBandwidthFactor(Collective collective, int64_t n);

// A communication group: n ranks, first + stride * i for i < n, on nodes of gpus_per_node.
struct GroupPlacement {
  int64_t ranks = 1;
  int64_t nodes = 1;           // distinct nodes the ranks occupy
  int64_t ranks_per_node = 1;  // most ranks of the group on one node

  bool crosses_nodes() const { return nodes > 1; }
  bool operator==(const GroupPlacement&) const = default;
};

GroupPlacement PlaceGroup(int64_t first, int64_t stride, int64_t size, int gpus_per_node);

// Megatron's groups. Groups of one kind run their collectives in lock-step, so each function
// returns the worst-placed group of its kind (crossing nodes; then fewest ranks per node; then
// most nodes). When the sizes divide the node (tp | g, and so on) every group has the same shape;
// otherwise, e.g. tp 6 on 8-GPU nodes, some groups straddle two nodes and these say so.
GroupPlacement TensorParallelGroup(const ParallelConfig& parallel, int gpus_per_node);
// The gradients' group: data parallel with context parallel (dp x cp ranks; dp without CP).
GroupPlacement DataParallelGroup(const ParallelConfig& parallel, int gpus_per_node);
// The context-parallel group: cp ranks of stride tp (one rank when cp is 1).
GroupPlacement ContextParallelGroup(const ParallelConfig& parallel, int gpus_per_node);
// The expert grid (Megatron's expert rank generator, order etp-ep-edp-pp):
//   rank = etp_rank + etp * (ep_rank + ep * (edp_rank + edp * pp_rank)).
// Expert tensor parallel: etp consecutive ranks; expert parallel: ep ranks of stride etp; both
// together (the all-gather dispatcher's group): ep x etp consecutive ranks; expert data
// parallel (the experts' gradients): edp ranks of stride etp x ep.
GroupPlacement ExpertTensorParallelGroup(const ParallelConfig& parallel, int gpus_per_node);
GroupPlacement ExpertParallelGroup(const ParallelConfig& parallel, int gpus_per_node);
GroupPlacement ExpertGroup(const ParallelConfig& parallel, int gpus_per_node);
GroupPlacement ExpertDataParallelGroup(const ParallelConfig& parallel, int gpus_per_node);
// Pipeline stage `stage` and the stage after it (stage p-1 wraps to 0: the next model chunk).
GroupPlacement PipelinePair(const ParallelConfig& parallel, int stage, int gpus_per_node);
// The pairs that send: stage r to r + 1, and with virtual stages (v > 1) the last to the first;
// the worst placed (one rank when pp is 1).
GroupPlacement PipelineSendPair(const ParallelConfig& parallel, int gpus_per_node);
// A pipeline group: the pp ranks of one (TP, CP, DP) position, stride tp x cp x dp; the worst
// placed (the nodes one pipeline spans).
GroupPlacement PipelineGroup(const ParallelConfig& parallel, int gpus_per_node);
// First and last pipeline stage: the tied-embedding gradient group.
GroupPlacement EmbeddingGroup(const ParallelConfig& parallel, int gpus_per_node);

// How one token's copies spread in a mixture-of-experts dispatch: num_experts experts laid out
// in order over the expert-parallel ranks (and so over their nodes), top_k chosen per token, with
// group-limited routing when groups > 0 (group_topk of `groups` consecutive groups). 0 experts:
// not a MoE dispatch.
struct ExpertSpread {
  int experts = 0, top_k = 0, groups = 0, group_topk = 0;
};

// The expected number of holders (the group's nodes, or its ranks) one token's top_k experts
// touch, `holders` holding the experts in equal consecutive blocks, the router's choice taken as
// uniform (a balanced router; Megatron-Core's group-limited routing chooses the groups first,
// megatron/core/transformer/moe/moe_utils.py group_limited_topk). Without groups:
//   D = H (1 - C(E - E/H, k) / C(E, k)).
// With G groups of s = E/G experts, g chosen: when the groups nest in the holders (q = G/H per
// holder) the chosen groups on one holder are hypergeometric, X ~ HG(G, q, g), and
//   D = H sum_x P(X = x) (1 - C(gs - xs, k) / C(gs, k));
// when a group spans r = H/G holders, D = H (g/G) (1 - C(gs - E/H, k) / C(gs, k)); other shapes
// (the blocks straddling groups) are taken as ungrouped.
double ExpectedHoldersTouched(const ExpertSpread& spread, int64_t holders);

// The flex dispatcher's dispatch (or combine) over the expert-parallel group `ep` (DeepEP's and
// HybridEP's normal kernels, Megatron-Core's --moe-token-dispatcher-type flex): each token goes
// once to every remote node holding one of its experts, through the NIC (de-duplicated per
// node, as DeepEP's tests count the bytes: deepseek-ai/DeepEP tests/test_internode.py), and on
// over NVLink to each of its GPUs there (to its own node's GPUs directly), the two pipelined:
//   time = latency + max(bytes D_remote / NIC share, bytes D_gpus (L-1)/L / NVLink busbw),
// bytes = one copy of the rank's tokens, D_remote = D_nodes (nodes-1)/nodes, D_gpus the ranks
// touched, L the group's ranks per node. Inside one node only the NVLink term is left.
double FlexDispatchTime(const ClusterSpec& c, double token_bytes, const ExpertSpread& spread,
                        const GroupPlacement& ep);

// Where every group of a layout sits: the cost model's placements, worked out once per layout
// (they depend on its sizes and the node alone).
struct LayoutPlacements {
  GroupPlacement tp, dp, cp, first_pair, last_pair, embedding;
  GroupPlacement ep, etp, ep_etp, edp;  // the expert grid's groups
};
LayoutPlacements PlaceLayout(const ParallelConfig& parallel, int gpus_per_node);

// Bus bandwidth a group sustains (see the header comment).
double GroupBusBandwidth(const ClusterSpec& cluster, const GroupPlacement& group);
// The bandwidth CollectiveTime moves a collective's bytes at over the group's slowest link:
// GroupBusBandwidth, except for an all-to-all across nodes, whose bytes for other nodes leave
// through the NICs its node's ranks of the group share (each rank's share of them). 0 for a
// group of one rank.
double CollectiveBandwidth(const ClusterSpec& cluster, Collective collective,
                           const GroupPlacement& group);

// Time of one collective of `bytes` over `group`; 0 when the group has one rank or bytes is 0.
double CollectiveTime(const ClusterSpec& cluster, Collective collective, double bytes,
                      const GroupPlacement& group);

}  // namespace ptdp
