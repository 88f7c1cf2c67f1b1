#include "simulator/comm_groups.h"

#include <fmt/format.h>

#include "core/json.h"

namespace ptdp {

GroupLink LinkOf(const GroupPlacement& g) {
  if (g.ranks <= 1) return GroupLink::kNone;
  if (!g.crosses_nodes()) return GroupLink::kNvlink;
  return g.ranks_per_node > 1 ? GroupLink::kNvlinkAndNetwork : GroupLink::kNetwork;
}

namespace {

// A row for `group` whose traffic is `traffic` moved by `collective` ("" and no figures when
// the group has one rank).
CommGroupRow Row(std::string name, const GroupPlacement& group, const ClusterSpec& cluster,
                 Collective collective, std::string traffic, double time_s, double bytes,
                 double hidden_s = 0) {
  CommGroupRow row;
  row.name = std::move(name);
  row.placement = group;
  row.link = LinkOf(group);
  if (group.ranks <= 1 || traffic.empty()) return row;
  row.bandwidth_bytes_per_s = CollectiveBandwidth(cluster, collective, group);
  row.traffic = std::move(traffic);
  row.has_figures = true;
  row.time_s = time_s;
  row.hidden_s = hidden_s;
  row.bytes = bytes;
  return row;
}

std::string CpTraffic(CpComm comm) {
  switch (comm) {
    case CpComm::kP2p:
      return "ring p2p of KV blocks (backward: + their grads)";
    case CpComm::kA2a:
      return "all-to-all of QKV and attention output";
    case CpComm::kAllGather:
      return "all-gather of KV, reduce-scatter of their grads";
  }
  return "";
}

Collective CpCollective(CpComm comm) {
  switch (comm) {
    case CpComm::kP2p:
      return Collective::kSendRecv;
    case CpComm::kA2a:
      return Collective::kAllToAll;
    case CpComm::kAllGather:
      return Collective::kAllGather;
  }
  return Collective::kSendRecv;
}

// What the data-parallel reduction of `what` ("gradient", "expert gradient") moves.
std::string DpTraffic(const ParallelConfig& p, const char* what, bool experts) {
  const bool fsdp_grads = p.fsdp == Fsdp::kOptimGrads || p.fsdp == Fsdp::kOptimGradsParams;
  if (fsdp_grads) {
    if (experts) {
      // Megatron-FSDP's per-layer traffic runs over dp x cp for every parameter; the expert
      // group only gathers its updated parameters after the step (optim_grads).
      return p.fsdp == Fsdp::kOptimGrads ? "expert param all-gather" : "";
    }
    return p.fsdp == Fsdp::kOptimGradsParams
               ? "FSDP per-layer param all-gather + grad reduce-scatter"
               : "FSDP per-layer grad reduce-scatter + param all-gather";
  }
  if (p.distributed_optimizer || p.fsdp != Fsdp::kNone) {
    return fmt::format("{} reduce-scatter + param all-gather", what);
  }
  return fmt::format("{} all-reduce", what);
}

}  // namespace

std::vector<CommGroupRow> CommGroupRows(const Plan& plan, const SimulationReport& report) {
  const ParallelConfig& p = plan.parallel;
  const ClusterSpec& c = plan.cluster;
  const int g = c.gpus_per_node;
  const LayoutPlacements placed = PlaceLayout(p, g);
  const StepBreakdown& b = report.breakdown;
  std::vector<CommGroupRow> rows;

  rows.push_back(Row("TP", placed.tp, c, Collective::kAllReduce,
                     p.sequence_parallel ? "all-gather / reduce-scatter of activations"
                                         : "all-reduce of activations",
                     b.tp_comm_s, b.tp_comm_bytes, b.tp_comm_hidden_s));
  if (p.cp > 1) {
    rows.push_back(Row("CP", placed.cp, c, CpCollective(p.cp_comm), CpTraffic(p.cp_comm),
                       b.cp_comm_s, b.cp_comm_bytes, b.cp_comm_hidden_s));
  }

  std::string dp_traffic = DpTraffic(p, "gradient", false);
  if (plan.model.moe()) dp_traffic += " (non-expert)";
  const double dp_s = b.dp_comm_s - b.edp_comm_s - b.embedding_comm_s;
  const double dp_bytes = b.dp_comm_bytes - b.edp_comm_bytes - b.embedding_comm_bytes;
  if (p.cp > 1) {
    // The data-parallel group proper (stride tp x cp) carries nothing of its own: Megatron
    // reduces the gradients over data and context parallel together.
    ParallelConfig dp_only = p;
    dp_only.tp = p.tp * p.cp;
    dp_only.cp = 1;
    CommGroupRow dp =
        Row("DP", DataParallelGroup(dp_only, g), c, Collective::kReduceScatter, "", 0, 0);
    if (p.dp > 1) dp.traffic = "(gradients reduce over DP x CP)";
    rows.push_back(dp);
    rows.push_back(
        Row("DP x CP", placed.dp, c, Collective::kReduceScatter, dp_traffic, dp_s, dp_bytes));
  } else {
    rows.push_back(Row("DP", placed.dp, c, Collective::kReduceScatter, dp_traffic, dp_s, dp_bytes));
  }

  // Pipeline: the group spans the nodes of its stages; its sends run between neighbours, the
  // worst-placed pair setting the pace.
  CommGroupRow pp =
      Row("PP", PipelineGroup(p, g), c, Collective::kSendRecv,
          "p2p activations (forward), their grads (backward)", b.pp_comm_s, b.pp_comm_bytes);
  if (p.pp > 1) {
    const GroupPlacement pair = PipelineSendPair(p, g);
    pp.bandwidth_bytes_per_s = CollectiveBandwidth(c, Collective::kSendRecv, pair);
    if (!pair.crosses_nodes()) pp.link = GroupLink::kNvlink;
  }
  rows.push_back(pp);
  if (p.pp > 1 && plan.model.tied_embeddings) {
    rows.push_back(Row("embedding", placed.embedding, c, Collective::kAllReduce,
                       "tied-embedding grad all-reduce (first + last stage)", b.embedding_comm_s,
                       b.embedding_comm_bytes));
  }

  if (plan.model.moe()) {
    const int etp = p.expert_tp();
    const double ep_s = b.ep_comm_s - b.etp_comm_s;
    if (plan.options.moe_token_dispatcher == MoeDispatcher::kAllGather) {
      rows.push_back(Row(etp > 1 ? "EP x ETP" : "EP", placed.ep_etp, c, Collective::kAllGather,
                         "all-gather of tokens + reduce-scatter of outputs", ep_s,
                         b.ep_comm_bytes));
      CommGroupRow row = Row("ETP", placed.etp, c, Collective::kAllGather, "", 0, 0);
      if (etp > 1) row.traffic = "(in the EP x ETP group's)";
      rows.push_back(row);
    } else {
      const bool flex = plan.options.moe_token_dispatcher == MoeDispatcher::kFlex;
      rows.push_back(Row("EP", placed.ep, c, Collective::kAllToAll,
                         flex ? "token dispatch + combine (DeepEP, as all-to-all)"
                              : "all-to-all token dispatch + combine",
                         ep_s, b.ep_comm_bytes));
      rows.push_back(Row("ETP", placed.etp, c, Collective::kAllGather,
                         "all-gather of tokens + reduce-scatter of outputs", b.etp_comm_s,
                         b.etp_comm_bytes));
    }
    rows.push_back(Row("EDP", placed.edp, c, Collective::kReduceScatter,
                       DpTraffic(p, "expert gradient", true), b.edp_comm_s, b.edp_comm_bytes));
  }
  return rows;
}

std::string CommGroupsJson(const std::vector<CommGroupRow>& rows, int indent) {
  const std::string pad(indent, ' ');
  std::string out = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const CommGroupRow& r = rows[i];
    out += fmt::format(
        "{}\n{}  {{\"name\": {}, \"size\": {}, \"nodes\": {}, \"gpus_per_node\": {}, \"link\": {}, "
        "\"bandwidth_bytes_per_s\": {}, \"traffic\": {}",
        i ? "," : "", pad, JsonString(r.name), r.placement.ranks, r.placement.nodes,
        r.placement.ranks_per_node, JsonString(Name(r.link)), JsonNumber(r.bandwidth_bytes_per_s),
        JsonString(r.traffic));
    if (r.has_figures) {
      out += fmt::format(", \"time_s\": {}, \"hidden_s\": {}, \"bytes\": {}", JsonNumber(r.time_s),
                         JsonNumber(r.hidden_s), JsonNumber(r.bytes));
    }
    out += "}";
  }
  return out + "\n" + pad + "]";
}

}  // namespace ptdp
