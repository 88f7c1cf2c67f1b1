// A deterministic pattern search on an integer grid, shared by the calibrations (vtrain.h
// FitVtrain, functional_tests.h FitFunctionalTestsHost): from `at`, move one coordinate at a time
// by its step while the cost falls (strictly, by more than 1e-12), within [low, high]; when no move
// helps, halve every step (not below 1), and stop once all steps are 1 and none helps. The
// result is on the grid and depends only on the start, the steps, the bounds and the costs.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>

namespace ptdp {

// Leaves the best point in `at` and returns its cost.
template <std::size_t N, class Cost>
double PatternSearch(std::array<int, N>& at, std::array<int, N> step, const std::array<int, N>& low,
                     const std::array<int, N>& high, Cost cost) {
  double best = cost(at);
  while (true) {
    bool improved = false;
    for (std::size_t k = 0; k < N; ++k) {
      for (const int dir : {-1, 1}) {
        while (true) {
          std::array<int, N> next = at;
          next[k] += dir * step[k];
          if (next[k] < low[k] || next[k] > high[k]) break;
          const double c = cost(next);
          if (!(c < best - 1e-12)) break;
          best = c;
          at = next;
          improved = true;
        }
      }
    }
    if (improved) continue;
    if (std::all_of(step.begin(), step.end(), [](int s) { return s == 1; })) return best;
    for (int& s : step) s = std::max(1, s / 2);
  }
}

}  // namespace ptdp
