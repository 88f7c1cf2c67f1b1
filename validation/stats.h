// Small statistics the validation reports share.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ptdp {

// The median of `v` (the mean of the middle two for an even count); 0 when empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace ptdp
