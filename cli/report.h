// Text for people: how `simulate`, `plan` and `check` print a simulated configuration.
#pragma once

#include <string>

#include "core/plan.h"
#include "simulator/simulate.h"
#include "simulator/timeline.h"

namespace ptdp::cli {

std::string Seconds(double s);        // "1.23 s", "45.6 ms", "789 us"
std::string Gigabytes(double bytes);  // "23.4 GB"

// "TP 2 x PP 4 x DP 1, micro-batch 4 (m = 32), 1f1b, SP, selective recompute, dist-opt"
std::string LayoutLine(const Plan& plan);

// The SVG/trace title: "<model> on N x <cluster>: <layout>" and the figures.
TimelineTitle SimulationTitle(const Plan& plan, const SimulationReport& report);

// The full `ptdp simulate` table: headline figures, per-stage rows, breakdown, memory verdict.
std::string SimulationText(const Plan& plan, const SimulationReport& report);

}  // namespace ptdp::cli
