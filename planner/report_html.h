// `ptdp plan --html`: one self-contained page (no scripts, no external files): the search's
// summary, the top plans, throughput against memory for every valid configuration, the best
// plan's timeline, and the rejections per rule.
#pragma once

#include <string>

#include "planner/planner.h"

namespace ptdp {

// `result` should come from a request with keep_points set (the chart needs every candidate).
std::string PlanReportHtml(const PlanRequest& request, const PlanSearchResult& result);

}  // namespace ptdp
