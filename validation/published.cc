#include "validation/published.h"

#include <fmt/format.h>

#include <chrono>

#include "core/cost_options.h"

namespace ptdp {

std::vector<PaperLayoutRanking> RankNarayananLayouts(const ClusterSpec& cluster,
                                                     const RankingProgress& progress) {
  std::vector<PaperLayoutRanking> out;
  const auto rows = NarayananTable1();
  for (const NarayananRow& row : rows) {
    PlanRequest req;
    req.model = NarayananModel(row);
    req.cluster = cluster;
    req.training = NarayananTraining(row);
    req.gpus = row.gpus;
    req.options = Megatron2021Options();
    req.top_k = 1;
    req.reference = NarayananLayout(row);
    if (progress) {
      req.progress = [&progress, i = out.size(), n = std::size(rows)](
                         int64_t valid, int64_t simulated) { progress(i, n, valid, simulated); };
    }
    const auto start = std::chrono::steady_clock::now();
    const PlanSearchResult res = SearchPlans(req);
    PaperLayoutRanking r{.row = row, .paper_layout = *req.reference};
    r.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.fits = res.fits;
    r.paper_problem = res.reference->problem;
    r.paper_rank = res.reference->rank;
    if (res.reference->simulated && r.paper_problem.empty()) {
      r.paper_s = res.reference->simulated->report.step_time_s;
    }
    if (!res.plans.empty()) {
      r.best_layout = res.plans.front().plan.parallel;
      r.best_s = res.plans.front().report.step_time_s;
    }
    out.push_back(r);
  }
  return out;
}

std::string PaperRankingMarkdown(const std::vector<PaperLayoutRanking>& rows) {
  std::string md =
      "| model | GPUs | B | paper's layout | paper's layout, simulated s | its rank | valid plans "
      "that fit | ptdp's best plan | best, simulated s | speed-up | search s |\n"
      "|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|\n";
  for (const PaperLayoutRanking& r : rows) {
    md += fmt::format(
        "| {}B | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} | {:.2f} |\n", r.row.params_billion,
        r.row.gpus, r.row.global_batch, Describe(r.paper_layout),
        r.paper_problem.empty() ? fmt::format("{:.2f}", r.paper_s)
                                : "does not fit: " + r.paper_problem,
        r.paper_rank > 0 ? std::to_string(r.paper_rank) : "-", r.fits, Describe(r.best_layout),
        r.best_s, r.paper_s > 0 ? fmt::format("{:.2f}x", r.paper_s / r.best_s) : "-", r.search_s);
  }
  return md;
}

}  // namespace ptdp
