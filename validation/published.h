// The planner against published layouts: for each row of Narayanan et al. 2021 Table 1, the best
// plan ptdp finds for the same model, GPUs and global batch (fp16, the 2021 code's behaviour),
// the paper's own layout simulated the same way, and where the paper's layout ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "planner/planner.h"
#include "validation/narayanan2021.h"

namespace ptdp {

struct PaperLayoutRanking {
  NarayananRow row;
  ParallelConfig paper_layout;
  double paper_s = 0;              // the paper's layout, simulated (0 if it does not fit)
  std::string paper_problem = {};  // why the paper's layout is not a valid plan here ("" if it is)
  int64_t paper_rank = 0;          // 1-based among the valid plans that fit
  int64_t fits = 0;                // valid plans that fit
  ParallelConfig best_layout = {};
  double best_s = 0;
  double search_s = 0;  // wall-clock time of the search (with the exact rank)
};

// `progress` (when set) is passed on to each row's search (PlanRequest::progress) with the
// row's index (0-based) and the number of rows.
using RankingProgress =
    std::function<void(size_t row, size_t rows, int64_t valid, int64_t simulated)>;
std::vector<PaperLayoutRanking> RankNarayananLayouts(const ClusterSpec& cluster,
                                                     const RankingProgress& progress = {});

// One markdown line per row: paper layout and its simulated time and rank, the best plan and its
// time, the speed-up.
std::string PaperRankingMarkdown(const std::vector<PaperLayoutRanking>& rows);

}  // namespace ptdp
