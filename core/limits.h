// The largest values ptdp accepts for the sizes a user gives on the command line or in a file,
// where a larger one would overflow an int or take unbounded time and memory (a search over
// every divisor, a schedule of every micro-batch). Readers refuse larger values naming the
// field; the README's reliability table lists them.
#pragma once

#include <cstdint>

namespace ptdp {

inline constexpr int64_t kMaxGpus = int64_t{1} << 20;         // 1,048,576 GPUs
inline constexpr int64_t kMaxGlobalBatch = int64_t{1} << 20;  // sequences per step

}  // namespace ptdp
