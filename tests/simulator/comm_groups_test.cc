// The communication groups `--explain` shows (simulator/comm_groups.h): sizes, nodes and links
// that can be worked out by hand from Megatron's rank order on 8-GPU nodes, figures that are
// the breakdown's; and the CP / EP communication the timeline draws and traces.
#include "simulator/comm_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/presets.h"
#include "megatron/rules.h"
#include "simulator/simulate.h"
#include "simulator/timeline.h"

namespace ptdp {
namespace {

Plan MakePlan(const char* model, const char* cluster, int gpus, int64_t gbs, ParallelConfig p) {
  Plan plan;
  plan.model = ModelPreset(model);
  plan.cluster = ClusterPreset(cluster);
  plan.num_gpus = gpus;
  plan.training.global_batch_size = gbs;
  plan.parallel = p;
  return plan;
}

// Llama 3 70B on 64 H100s as TP 8 x CP 2 x PP 2 x DP 2.
Plan LlamaCp() {
  return MakePlan("llama3-70b", "dgx-h100", 64, 64,
                  {.tp = 8,
                   .pp = 2,
                   .dp = 2,
                   .cp = 2,
                   .sequence_parallel = true,
                   .distributed_optimizer = true});
}

// Qwen3 30B-A3B on 16 H100s, TP 1 x PP 1 x DP 16 with EP `ep`, the all-to-all dispatcher.
Plan QwenEp(int ep) {
  Plan plan =
      MakePlan("qwen3-30b-a3b", "dgx-h100", 16, 64,
               {.tp = 1, .pp = 1, .dp = 16, .ep = ep, .etp = 1, .distributed_optimizer = true});
  plan.options.moe_token_dispatcher = MoeDispatcher::kAllToAll;
  return plan;
}

const CommGroupRow& RowNamed(const std::vector<CommGroupRow>& rows, const std::string& name) {
  const auto it =
      std::find_if(rows.begin(), rows.end(), [&](const CommGroupRow& r) { return r.name == name; });
  if (it == rows.end()) throw std::runtime_error("no row " + name);
  return *it;
}

std::vector<std::string> Names(const std::vector<CommGroupRow>& rows) {
  std::vector<std::string> names;
  for (const CommGroupRow& r : rows) names.push_back(r.name);
  return names;
}

TEST(CommGroups, LinksFollowTheGroupsPlacement) {
  EXPECT_EQ(LinkOf({1, 1, 1}), GroupLink::kNone);
  EXPECT_EQ(LinkOf({8, 1, 8}), GroupLink::kNvlink);
  EXPECT_EQ(LinkOf({2, 2, 1}), GroupLink::kNetwork);
  EXPECT_EQ(LinkOf({16, 2, 8}), GroupLink::kNvlinkAndNetwork);
}

TEST(CommGroups, TensorInsideTheNodeContextAcrossTwo) {
  const Plan plan = LlamaCp();
  ASSERT_TRUE(CheckParallelConfig(plan.model, plan.training, plan.parallel, 64).empty());
  const SimulationReport report = SimulatePlan(plan);
  const std::vector<CommGroupRow> rows = CommGroupRows(plan, report);
  EXPECT_EQ(Names(rows), (std::vector<std::string>{"TP", "CP", "DP", "DP x CP", "PP"}));
  const ClusterSpec& c = plan.cluster;

  // TP 8: ranks 0-7, one node.
  const CommGroupRow& tp = RowNamed(rows, "TP");
  EXPECT_EQ(tp.placement, (GroupPlacement{8, 1, 8}));
  EXPECT_EQ(tp.link, GroupLink::kNvlink);
  EXPECT_DOUBLE_EQ(tp.bandwidth_bytes_per_s, c.nvlink_busbw_bytes_per_s);
  EXPECT_EQ(tp.traffic, "all-gather / reduce-scatter of activations");
  EXPECT_DOUBLE_EQ(tp.time_s, report.breakdown.tp_comm_s);
  EXPECT_GT(tp.bytes, 0);

  // CP 2 of stride 8: ranks 0 and 8, one per node, over the network at one NIC each.
  const CommGroupRow& cp = RowNamed(rows, "CP");
  EXPECT_EQ(cp.placement, (GroupPlacement{2, 2, 1}));
  EXPECT_EQ(cp.link, GroupLink::kNetwork);
  EXPECT_DOUBLE_EQ(cp.bandwidth_bytes_per_s, c.nic_busbw_bytes_per_s);
  EXPECT_EQ(cp.traffic, "ring p2p of KV blocks (backward: + their grads)");
  EXPECT_GT(cp.time_s + cp.hidden_s, 0);
  EXPECT_DOUBLE_EQ(cp.time_s, report.breakdown.cp_comm_s);
  EXPECT_DOUBLE_EQ(cp.hidden_s, report.breakdown.cp_comm_hidden_s);
  EXPECT_DOUBLE_EQ(cp.bytes, report.breakdown.cp_comm_bytes);

  // DP 2 of stride 16 carries nothing itself; DP x CP, 4 ranks of stride 8, the gradients.
  const CommGroupRow& dp = RowNamed(rows, "DP");
  EXPECT_EQ(dp.placement, (GroupPlacement{2, 2, 1}));
  EXPECT_FALSE(dp.has_figures);
  const CommGroupRow& dpcp = RowNamed(rows, "DP x CP");
  EXPECT_EQ(dpcp.placement, (GroupPlacement{4, 4, 1}));
  EXPECT_EQ(dpcp.link, GroupLink::kNetwork);
  EXPECT_EQ(dpcp.traffic, "gradient reduce-scatter + param all-gather");
  EXPECT_DOUBLE_EQ(dpcp.time_s, report.breakdown.dp_comm_s);  // untied: no embedding sync

  // PP 2 of stride 32: two nodes; each send leaves the node.
  const CommGroupRow& pp = RowNamed(rows, "PP");
  EXPECT_EQ(pp.placement, (GroupPlacement{2, 2, 1}));
  EXPECT_EQ(pp.link, GroupLink::kNetwork);
  EXPECT_DOUBLE_EQ(pp.time_s, report.breakdown.pp_comm_s);
  // Sequence parallel: each GPU sends its 1/8 of the s/cp x b x h bf16 activation; per
  // micro-batch stage 0 sends one forward, stage 1 one backward.
  const double send = 8192.0 / 2 * 1 * 8192 * 2 / 8;
  EXPECT_DOUBLE_EQ(pp.bytes, static_cast<double>(report.estimate.microbatches) * send);
}

TEST(CommGroups, ExpertParallelInsideOrAcrossNodes) {
  for (const int ep : {8, 16}) {
    const Plan plan = QwenEp(ep);
    ASSERT_TRUE(CheckParallelConfig(plan.model, plan.training, plan.parallel, 16).empty());
    const SimulationReport report = SimulatePlan(plan);
    const std::vector<CommGroupRow> rows = CommGroupRows(plan, report);
    EXPECT_EQ(Names(rows), (std::vector<std::string>{"TP", "DP", "PP", "EP", "ETP", "EDP"}));
    EXPECT_EQ(RowNamed(rows, "TP").link, GroupLink::kNone);
    EXPECT_FALSE(RowNamed(rows, "TP").has_figures);
    EXPECT_EQ(RowNamed(rows, "PP").link, GroupLink::kNone);
    EXPECT_EQ(RowNamed(rows, "ETP").link, GroupLink::kNone);
    // DP 16 of stride 1: both nodes, 8 on each.
    EXPECT_EQ(RowNamed(rows, "DP").placement, (GroupPlacement{16, 2, 8}));
    EXPECT_EQ(RowNamed(rows, "DP").link, GroupLink::kNvlinkAndNetwork);
    const CommGroupRow& row = RowNamed(rows, "EP");
    EXPECT_EQ(row.traffic, "all-to-all token dispatch + combine");
    EXPECT_DOUBLE_EQ(row.time_s, report.breakdown.ep_comm_s);
    EXPECT_GT(row.bytes, 0);
    const CommGroupRow& edp = RowNamed(rows, "EDP");
    if (ep == 8) {
      // EP 8 of stride 1: one node. Its expert data-parallel pair, ranks 8 apart, crosses.
      EXPECT_EQ(row.placement, (GroupPlacement{8, 1, 8}));
      EXPECT_EQ(row.link, GroupLink::kNvlink);
      EXPECT_DOUBLE_EQ(row.bandwidth_bytes_per_s, plan.cluster.nvlink_busbw_bytes_per_s);
      EXPECT_EQ(edp.placement, (GroupPlacement{2, 2, 1}));
      EXPECT_EQ(edp.link, GroupLink::kNetwork);
      EXPECT_GT(edp.time_s, 0);
      EXPECT_DOUBLE_EQ(edp.time_s, report.breakdown.edp_comm_s);
    } else {
      // EP 16: both nodes; the half of each rank's tokens for the other node leaves through
      // its NIC.
      EXPECT_EQ(row.placement, (GroupPlacement{16, 2, 8}));
      EXPECT_EQ(row.link, GroupLink::kNvlinkAndNetwork);
      EXPECT_DOUBLE_EQ(row.bandwidth_bytes_per_s, plan.cluster.nic_busbw_bytes_per_s);
      EXPECT_EQ(edp.link, GroupLink::kNone);
      EXPECT_FALSE(edp.has_figures);
    }
  }
}

TEST(CommGroups, DenseLayoutInsideOneNode) {
  // The founding example: TP 2 x PP 4 on one 8-GPU node, tied embeddings.
  const Plan plan = MakePlan("seed-example", "dgx-a100-80gb", 8, 128,
                             {.tp = 2, .pp = 4, .dp = 1, .micro_batch_size = 4});
  const SimulationReport report = SimulatePlan(plan);
  const std::vector<CommGroupRow> rows = CommGroupRows(plan, report);
  EXPECT_EQ(Names(rows), (std::vector<std::string>{"TP", "DP", "PP", "embedding"}));
  EXPECT_EQ(RowNamed(rows, "TP").traffic, "all-reduce of activations");
  EXPECT_EQ(RowNamed(rows, "DP").link, GroupLink::kNone);
  const CommGroupRow& pp = RowNamed(rows, "PP");
  EXPECT_EQ(pp.placement, (GroupPlacement{4, 1, 4}));
  EXPECT_EQ(pp.link, GroupLink::kNvlink);
  // Without sequence parallelism each GPU sends the whole s x b x h activation: 1.5 sends per
  // stage and micro-batch on average (the ends send one, the middle stages two), 32 of them.
  const double act = 2048.0 * 4 * 2048 * 2;
  EXPECT_DOUBLE_EQ(pp.bytes, 32 * 1.5 * act);
  // The tied embedding's gradient, the 1/2 vocabulary shard in fp32, between stages 0 and 3.
  const CommGroupRow& emb = RowNamed(rows, "embedding");
  EXPECT_EQ(emb.placement, (GroupPlacement{2, 1, 2}));
  EXPECT_GT(emb.time_s, 0);
  EXPECT_DOUBLE_EQ(emb.time_s, report.breakdown.dp_comm_s);
  EXPECT_DOUBLE_EQ(emb.bytes, static_cast<double>(PaddedVocabSize(plan.model, 2)) / 2 * 2048 * 4);
  const std::string json = CommGroupsJson(rows);
  EXPECT_NE(json.find("\"name\": \"PP\", \"size\": 4, \"nodes\": 1, \"gpus_per_node\": 4, "
                      "\"link\": \"NVLink\""),
            std::string::npos)
      << json;
}

int Count(const TimelineTrace& trace, const std::string& category, const std::string& name = "") {
  return static_cast<int>(
      std::count_if(trace.events.begin(), trace.events.end(), [&](const TraceEvent& e) {
        return e.category == category && (name.empty() || e.name == name);
      }));
}

int ForwardAndBackwardOps(const SimResult& sim) {
  return static_cast<int>(std::count_if(sim.ops.begin(), sim.ops.end(), [](const SimulatedOp& o) {
    return o.op.kind != OpKind::kWeightGrad;
  }));
}

TEST(CommGroups, TheTimelineShowsContextAndExpertCommunication) {
  // Ring attention: one CP slice in every forward and backward, inside it.
  const SimulationReport cp = SimulatePlan(LlamaCp());
  const TimelineTrace cp_trace = TimelineTraceEvents(cp.schedule, cp.sim);
  EXPECT_EQ(Count(cp_trace, "cp-comm", "CP ring (KV)"), ForwardAndBackwardOps(cp.sim));
  EXPECT_EQ(Count(cp_trace, "ep-comm"), 0);
  const SimulatedOp& f = cp.sim.ops.front();
  EXPECT_GT(f.cp_comm_s, 0);
  EXPECT_LE(f.cp_comm_s, f.end_s - f.start_s);
  EXPECT_NE(TimelineSvg(cp.schedule, cp.sim, {}).find(">CP ring (KV)</text>"), std::string::npos);

  // MoE with the all-to-all dispatcher: a dispatch and a combine in every forward and backward.
  Plan moe = QwenEp(8);
  moe.parallel.pp = 2, moe.parallel.dp = 8;
  const SimulationReport ep = SimulatePlan(moe);
  const TimelineTrace ep_trace = TimelineTraceEvents(ep.schedule, ep.sim);
  EXPECT_EQ(Count(ep_trace, "ep-comm", "EP dispatch"), ForwardAndBackwardOps(ep.sim));
  EXPECT_EQ(Count(ep_trace, "ep-comm", "EP combine"), ForwardAndBackwardOps(ep.sim));
  EXPECT_EQ(Count(ep_trace, "cp-comm"), 0);
  // Summed over the operations, they are the breakdown's EP time.
  double sum = 0;
  for (const SimulatedOp& o : ep.sim.ops) sum += o.ep_dispatch_s + o.ep_combine_s;
  EXPECT_NEAR(sum / moe.parallel.pp, ep.breakdown.ep_comm_s, 1e-9 * sum);
  const std::string svg = TimelineSvg(ep.schedule, ep.sim, {});
  EXPECT_NE(svg.find(">EP dispatch</text>"), std::string::npos);
  EXPECT_NE(svg.find(">EP combine</text>"), std::string::npos);

  // A dense model without context parallelism has neither.
  const Plan dense = MakePlan("seed-example", "dgx-a100-80gb", 8, 128,
                              {.tp = 2, .pp = 4, .dp = 1, .micro_batch_size = 4});
  const SimulationReport d = SimulatePlan(dense);
  const TimelineTrace d_trace = TimelineTraceEvents(d.schedule, d.sim);
  EXPECT_EQ(Count(d_trace, "cp-comm") + Count(d_trace, "ep-comm"), 0);
  EXPECT_EQ(d_trace.tracks.size(), 4u * 4);
  const std::string d_svg = TimelineSvg(d.schedule, d.sim, {});
  EXPECT_EQ(d_svg.find("CP ring"), std::string::npos);
  EXPECT_EQ(d_svg.find("EP dispatch"), std::string::npos);
}

TEST(CommGroups, TheTimelineShowsTensorParallelCommunication) {
  // TP 2: every forward holds TP collectives (the backward's async reductions hide behind its
  // weight-gradient GEMMs); summed over the operations, the breakdown's TP time; the SVG draws
  // them in the lane with a legend entry, the trace leaves them out.
  const Plan tp2 = MakePlan("seed-example", "dgx-a100-80gb", 8, 128,
                            {.tp = 2, .pp = 4, .dp = 1, .micro_batch_size = 4});
  const SimulationReport r = SimulatePlan(tp2);
  double sum = 0;
  for (const SimulatedOp& o : r.sim.ops) {
    if (o.op.kind == OpKind::kForward) {
      EXPECT_GT(o.tp_comm_s, 0);
    }
    EXPECT_GE(o.tp_comm_s, 0);
    EXPECT_LE(o.tp_comm_s, o.end_s - o.start_s);
    sum += o.tp_comm_s;
  }
  EXPECT_NEAR(sum / tp2.parallel.pp, r.breakdown.tp_comm_s, 1e-9 * sum);
  const std::string svg = TimelineSvg(r.schedule, r.sim, {});
  EXPECT_NE(svg.find(">TP comm</text>"), std::string::npos);
  EXPECT_NE(svg.find(": TP comm "), std::string::npos);  // a slice's tooltip
  EXPECT_EQ(TimelineTraceEvents(r.schedule, r.sim).tracks.size(), 4u * 4);
  // With sequence parallelism, and with the backward split (zb-h1), the same sum.
  for (const Schedule kind : {Schedule::k1F1B, Schedule::kZbH1}) {
    const Plan sp = MakePlan("seed-example", "dgx-a100-80gb", 8, 128,
                             {.tp = 2,
                              .pp = 4,
                              .dp = 1,
                              .micro_batch_size = 4,
                              .schedule = kind,
                              .sequence_parallel = true});
    const SimulationReport rs = SimulatePlan(sp);
    double total = 0;
    for (const SimulatedOp& o : rs.sim.ops) total += o.tp_comm_s;
    EXPECT_GT(total, 0) << Name(kind);
    EXPECT_NEAR(total / sp.parallel.pp, rs.breakdown.tp_comm_s, 1e-9 * total) << Name(kind);
  }
  // TP 1: none.
  const Plan tp1 = MakePlan("seed-example", "dgx-a100-80gb", 8, 128,
                            {.tp = 1, .pp = 4, .dp = 2, .micro_batch_size = 4});
  const SimulationReport r1 = SimulatePlan(tp1);
  for (const SimulatedOp& o : r1.sim.ops) EXPECT_EQ(o.tp_comm_s, 0);
  EXPECT_EQ(TimelineSvg(r1.schedule, r1.sim, {}).find("TP comm"), std::string::npos);
}

}  // namespace
}  // namespace ptdp
