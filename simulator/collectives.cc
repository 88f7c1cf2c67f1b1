#include "simulator/collectives.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace ptdp {

double BusBandwidthFactor(Collective collective, int64_t n) {
  PTDP_CHECK(n >= 1);
  const double r = static_cast<double>(n);
  switch (collective) {
    case Collective::kAllReduce:
      return 2.0 * (r - 1) / r;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (r - 1) / r;
    case Collective::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

GroupPlacement PlaceGroup(int64_t first, int64_t stride, int64_t size, int gpus_per_node) {
  PTDP_CHECK(first >= 0 && stride >= 1 && size >= 1 && gpus_per_node >= 1);
  const int64_t g = gpus_per_node;
  GroupPlacement p;
  p.ranks = size;
  if (stride >= g) {
    // Consecutive members are a node or more apart: one per node.
    p.nodes = size;
    p.ranks_per_node = 1;
  } else if (first % g == 0 && g % stride == 0) {
    // Aligned and the stride divides the node: every node but the last holds g / stride.
    p.nodes = (first + stride * (size - 1)) / g - first / g + 1;
    p.ranks_per_node = std::min(size, g / stride);
  } else {
    // Members ascend, so each node's members are consecutive: count the runs.
    p.nodes = 0;
    p.ranks_per_node = 0;
    int64_t node = -1, run = 0;
    for (int64_t i = 0; i < size; ++i) {
      const int64_t n = (first + stride * i) / g;
      run = n == node ? run + 1 : 1;
      if (n != node) ++p.nodes, node = n;
      p.ranks_per_node = std::max(p.ranks_per_node, run);
    }
  }
  return p;
}

namespace {

// a is placed worse than b (slower for the same collective).
bool Worse(const GroupPlacement& a, const GroupPlacement& b) {
  if (a.crosses_nodes() != b.crosses_nodes()) return a.crosses_nodes();
  if (!a.crosses_nodes()) return false;
  if (a.ranks_per_node != b.ranks_per_node) return a.ranks_per_node < b.ranks_per_node;
  return a.nodes > b.nodes;
}

// The worst group among those starting at first_base + i * first_step for i < count.
GroupPlacement WorstOf(int64_t first_base, int64_t first_step, int64_t count, int64_t stride,
                       int64_t size, int g) {
  GroupPlacement worst = PlaceGroup(first_base, stride, size, g);
  for (int64_t i = 1; i < count; ++i) {
    if (worst.nodes == size) break;  // one rank per node: no group can be placed worse
    const GroupPlacement next = PlaceGroup(first_base + i * first_step, stride, size, g);
    if (Worse(next, worst)) worst = next;
  }
  return worst;
}

// How many groups of a kind must be looked at: where the groups' first ranks repeat their
// position within a node (mod g), the placements repeat too.
int64_t Representatives(int64_t groups, int64_t step, int64_t g) {
  return std::min(groups, g / std::gcd(step % g == 0 ? g : step % g, g));
}

// Groups of `size` ranks of stride `stride` inside blocks of stride x size consecutive ranks
// (`blocks` of them): the worst placed.
GroupPlacement StridedGroups(int64_t stride, int64_t size, int64_t blocks, int gpus_per_node) {
  if (size == 1) return PlaceGroup(0, 1, 1, gpus_per_node);
  const int64_t g = gpus_per_node, block = stride * size;
  GroupPlacement worst = PlaceGroup(0, stride, size, gpus_per_node);
  const int64_t reps = Representatives(blocks, block, g);
  for (int64_t b = 0; b < reps; ++b) {
    const GroupPlacement w =
        WorstOf(b * block, 1, std::min<int64_t>(stride, g), stride, size, gpus_per_node);
    if (Worse(w, worst)) worst = w;
  }
  return worst;
}

// Groups of `size` consecutive ranks, `count` of them: the worst placed.
GroupPlacement ConsecutiveGroups(int64_t size, int64_t count, int gpus_per_node) {
  return WorstOf(0, size, Representatives(count, size, gpus_per_node), 1, size, gpus_per_node);
}

}  // namespace

GroupPlacement TensorParallelGroup(const ParallelConfig& p, int gpus_per_node) {
  // TP groups are consecutive ranks: group k starts at k * tp.
  return ConsecutiveGroups(p.tp, p.dp_cp() * p.pp, gpus_per_node);
}

GroupPlacement DataParallelGroup(const ParallelConfig& p, int gpus_per_node) {
  // The dp x cp group of (stage s, TP rank i) starts at s * tp * cp * dp + i with stride tp.
  return StridedGroups(p.tp, p.dp_cp(), p.pp, gpus_per_node);
}

GroupPlacement ContextParallelGroup(const ParallelConfig& p, int gpus_per_node) {
  // The CP group of (stage, DP rank j, TP rank i) starts at (j + dp * stage) * tp * cp + i, with
  // stride tp.
  return StridedGroups(p.tp, p.cp, int64_t{p.dp} * p.pp, gpus_per_node);
}

GroupPlacement ExpertTensorParallelGroup(const ParallelConfig& p, int gpus_per_node) {
  const int64_t etp = p.expert_tp();
  return ConsecutiveGroups(etp, p.world_size() / etp, gpus_per_node);
}

GroupPlacement ExpertParallelGroup(const ParallelConfig& p, int gpus_per_node) {
  const int64_t etp = p.expert_tp();
  return StridedGroups(etp, p.ep, p.world_size() / (etp * p.ep), gpus_per_node);
}

GroupPlacement ExpertGroup(const ParallelConfig& p, int gpus_per_node) {
  const int64_t size = int64_t{p.expert_tp()} * p.ep;
  return ConsecutiveGroups(size, p.world_size() / size, gpus_per_node);
}

GroupPlacement ExpertDataParallelGroup(const ParallelConfig& p, int gpus_per_node) {
  const int64_t model = int64_t{p.expert_tp()} * p.ep;
  return StridedGroups(model, p.expert_dp(), p.pp, gpus_per_node);
}

GroupPlacement PipelinePair(const ParallelConfig& p, int stage, int gpus_per_node) {
  PTDP_CHECK(stage >= 0 && stage < p.pp);
  const int64_t stage_stride = p.tp * p.dp_cp();  // ranks between neighbouring stages
  if (p.pp == 1) return PlaceGroup(0, 1, 1, gpus_per_node);
  const int next = (stage + 1) % p.pp;
  const int64_t lo = stage_stride * std::min(stage, next);
  const int64_t distance = stage_stride * (std::max(stage, next) - std::min(stage, next));
  // One pair per (TP, CP, DP rank) of the stage: ranks lo + x and lo + x + distance.
  return WorstOf(lo, 1, std::min<int64_t>(stage_stride, gpus_per_node), distance, 2, gpus_per_node);
}

GroupPlacement PipelineSendPair(const ParallelConfig& p, int gpus_per_node) {
  if (p.pp == 1) return PlaceGroup(0, 1, 1, gpus_per_node);
  const int senders = p.virtual_stages > 1 ? p.pp : p.pp - 1;
  GroupPlacement worst = PipelinePair(p, 0, gpus_per_node);
  for (int r = 1; r < senders; ++r) {
    const GroupPlacement next = PipelinePair(p, r, gpus_per_node);
    if (Worse(next, worst)) worst = next;
  }
  return worst;
}

GroupPlacement PipelineGroup(const ParallelConfig& p, int gpus_per_node) {
  const int64_t stage_stride = p.tp * p.dp_cp();
  return WorstOf(0, 1, std::min<int64_t>(stage_stride, gpus_per_node), stage_stride, p.pp,
                 gpus_per_node);
}

GroupPlacement EmbeddingGroup(const ParallelConfig& p, int gpus_per_node) {
  if (p.pp == 1) return PlaceGroup(0, 1, 1, gpus_per_node);
  const int64_t stage_stride = p.tp * p.dp_cp();
  return WorstOf(0, 1, std::min<int64_t>(stage_stride, gpus_per_node), stage_stride * (p.pp - 1), 2,
                 gpus_per_node);
}

LayoutPlacements PlaceLayout(const ParallelConfig& p, int gpus_per_node) {
  LayoutPlacements placed;
  placed.tp = TensorParallelGroup(p, gpus_per_node);
  placed.dp = DataParallelGroup(p, gpus_per_node);
  placed.cp = ContextParallelGroup(p, gpus_per_node);
  placed.first_pair = PipelinePair(p, 0, gpus_per_node);
  placed.last_pair = PipelinePair(p, p.pp - 1, gpus_per_node);
  placed.embedding = EmbeddingGroup(p, gpus_per_node);
  placed.ep = ExpertParallelGroup(p, gpus_per_node);
  placed.etp = ExpertTensorParallelGroup(p, gpus_per_node);
  placed.ep_etp = ExpertGroup(p, gpus_per_node);
  placed.edp = ExpertDataParallelGroup(p, gpus_per_node);
  return placed;
}

double GroupBusBandwidth(const ClusterSpec& c, const GroupPlacement& group) {
  if (!group.crosses_nodes()) return c.nvlink_busbw_bytes_per_s;
  // The group's ranks on one node drive their share of the node's NICs: every group of the
  // same kind communicates at the same time, so the node's NICs are split among its ranks.
  const double nics = static_cast<double>(group.ranks_per_node) * c.nics_per_node / c.gpus_per_node;
  return std::min(c.nvlink_busbw_bytes_per_s, nics * c.nic_busbw_bytes_per_s);
}

double CollectiveBandwidth(const ClusterSpec& c, Collective collective,
                           const GroupPlacement& group) {
  if (group.ranks <= 1) return 0;
  if (collective == Collective::kAllToAll && group.crosses_nodes()) {
    // As CollectiveTime: the node's k ranks of the group share k NICs' worth.
    const double local = static_cast<double>(group.ranks_per_node);
    const double nics = local * c.nics_per_node / c.gpus_per_node;
    return nics * c.nic_busbw_bytes_per_s / local;
  }
  return GroupBusBandwidth(c, group);
}

double CollectiveTime(const ClusterSpec& c, Collective collective, double bytes,
                      const GroupPlacement& group) {
  if (group.ranks <= 1 || bytes <= 0) return 0;
  int64_t steps = 1, inter_steps = group.crosses_nodes() ? 1 : 0;
  switch (collective) {
    case Collective::kAllReduce:
      steps = 2 * (group.ranks - 1), inter_steps = 2 * (group.nodes - 1);
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      steps = group.ranks - 1, inter_steps = group.nodes - 1;
      break;
    case Collective::kSendRecv:
      break;
  }
  const double latency = c.collective_base_latency_s +
                         static_cast<double>(steps - inter_steps) * c.nvlink_step_latency_s +
                         static_cast<double>(inter_steps) * c.nic_step_latency_s;
  if (collective == Collective::kAllToAll && group.crosses_nodes()) {
    // Each rank sends 1/n of its bytes to every other rank at once: the part for its node's
    // peers over NVLink, the rest through the NICs of its node, which all its node's ranks of
    // the group use at the same time (no ring to spread it: nccl-tests' alltoall busbw is bounded
    // by the NICs across nodes). The slower of the two sets the time.
    const double n = static_cast<double>(group.ranks),
                 local = static_cast<double>(group.ranks_per_node);
    const double nics = local * c.nics_per_node / c.gpus_per_node;
    const double intra = bytes * (local - 1) / n / c.nvlink_busbw_bytes_per_s;
    const double inter = bytes * (n - local) / n * local / (nics * c.nic_busbw_bytes_per_s);
    return latency + std::max(intra, inter);
  }
  return latency +
         BusBandwidthFactor(collective, group.ranks) * bytes / GroupBusBandwidth(c, group);
}

namespace {

// C(a - b, k) / C(a, k): no one of k draws (without replacement) from a items hits b marked ones.
double MissAll(double a, double b, int k) {
  double p = 1;
  for (int i = 0; i < k && p > 0; ++i) p *= std::max(0.0, (a - b - i) / (a - i));
  return p;
}

double Choose(int n, int r) {
  if (r < 0 || r > n) return 0;
  return std::exp(std::lgamma(n + 1.0) - std::lgamma(r + 1.0) - std::lgamma(n - r + 1.0));
}

}  // namespace

double ExpectedHoldersTouched(const ExpertSpread& spread, int64_t holders) {
  PTDP_CHECK(spread.experts >= 1 && spread.top_k >= 1 && holders >= 1);
  const double E = spread.experts, H = static_cast<double>(holders);
  const int k = std::min(spread.top_k, spread.experts);
  const int G = spread.groups, g = spread.group_topk;
  const bool grouped = G > 1 && g >= 1 && g < G && spread.experts % G == 0 &&
                       static_cast<int64_t>(g) * (spread.experts / G) >= k;
  if (grouped && G % holders == 0) {
    const int q = static_cast<int>(G / holders);
    const double s = E / G, all = Choose(G, g);
    double touched = 0;
    for (int x = 1; x <= std::min(q, g); ++x) {
      touched += Choose(q, x) * Choose(G - q, g - x) / all * (1 - MissAll(g * s, x * s, k));
    }
    return H * touched;
  }
  if (grouped && holders % G == 0) {
    const double s = E / G;
    return H * g / G * (1 - MissAll(g * s, E / H, k));
  }
  return H * (1 - MissAll(E, E / H, k));
}

double FlexDispatchTime(const ClusterSpec& c, double token_bytes, const ExpertSpread& spread,
                        const GroupPlacement& ep) {
  if (ep.ranks <= 1 || token_bytes <= 0) return 0;
  const double nodes = static_cast<double>(ep.nodes),
               local = static_cast<double>(ep.ranks_per_node);
  const double latency = c.collective_base_latency_s +
                         static_cast<double>(ep.ranks - ep.nodes) * c.nvlink_step_latency_s +
                         static_cast<double>(ep.nodes - 1) * c.nic_step_latency_s;
  const double gpus = ExpectedHoldersTouched(spread, ep.ranks);
  const double nvlink = token_bytes * gpus * (local - 1) / local / c.nvlink_busbw_bytes_per_s;
  if (!ep.crosses_nodes()) return latency + nvlink;
  const double remote = ExpectedHoldersTouched(spread, ep.nodes) * (nodes - 1) / nodes;
  const double nic_share = c.nics_per_node * c.nic_busbw_bytes_per_s / c.gpus_per_node;
  return latency + std::max(token_bytes * remote / nic_share, nvlink);
}

}  // namespace ptdp
