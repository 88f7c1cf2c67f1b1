// Pictures of a sweep (sweep.h): an SVG chart and a self-contained HTML report (no scripts, no
// external files), for `ptdp sweep --svg` and `--html`.
#pragma once

#include <string>

#include "planner/sweep.h"

namespace ptdp {

// Two panels side by side, 1200 px wide. Left: time to train (days, or hours when every point
// takes less than two) against cost, or against GPU-hours where a cluster has no price (the axes
// of ParetoAxes, so that the Pareto front marked is the front drawn), a line per cluster,
// precision and batch rule through its GPU counts, each point labelled with its count and the
// front ringed on a staircase band; without request.tokens, tokens/s against the GPU count
// instead. Right: tokens/s per GPU against the GPU count (log2, a tick at each count swept),
// each line's scaling efficiency at its end. A value axis is logarithmic where its values span
// more than 10x. A colour per cluster and precision (Okabe-Ito), a marker shape per cluster, a
// dash per precision, hollow markers for the batch rules after the first. Points without a plan
// are left out and said in notes under the chart (the reason cut to one line). Every word from
// the user's files is escaped.
std::string SweepSvg(const SweepRequest& request, const SweepResult& result);

// A self-contained page: a summary (model, clusters, precisions, GPU counts, batches, tokens,
// prices), the chart, the table of points (layout, step, tokens/s, per GPU, MFU, headroom, days,
// GPU-hours, cost, scaling efficiency, Pareto; a point without a plan says why in its row), the
// fastest and cheapest point per cluster, each point's best plan as Megatron-LM flags
// (collapsed), the clusters' overrides (--cluster-set) and the batches' notes.
std::string SweepReportHtml(const SweepRequest& request, const SweepResult& result);

}  // namespace ptdp
