// The largest values ptdp accepts for the sizes a user gives on the command line or in a file,
// where a larger one would overflow an int or take unbounded time and memory (a search over
// every divisor, a schedule of every micro-batch). Readers refuse larger values naming the
// field; the README's reliability table lists them.
#pragma once

#include <cstdint>

namespace ptdp {

inline constexpr int64_t kMaxGpus = int64_t{1} << 20;         // 1,048,576 GPUs
inline constexpr int64_t kMaxGlobalBatch = int64_t{1} << 20;  // sequences per step
// A model's widths, counts and lengths (hidden and FFN sizes, heads, vocabulary, sequence,
// experts...): 4 x the largest still fits an int, and products of two fit an int64.
inline constexpr int64_t kMaxModelDimension = int64_t{1} << 24;  // 16,777,216
inline constexpr int64_t kMaxLayers = int64_t{1} << 14;          // 16,384 layers
// A step's pipeline schedule is built and simulated operation by operation: stages x
// micro-batches x model chunks at most this, 524,288 (some 330 MB and 2 s to simulate, 1 GB
// with a Chrome trace; `plan` keeps its top ten so, about 1.2 GB). A planner search meeting
// 2^26 of them once took 21 GB before it was killed.
inline constexpr int64_t kMaxPipelineOps = int64_t{1} << 19;
// `execute --watchdog`: a week.
inline constexpr int64_t kMaxWatchdogSeconds = 7 * 24 * 3600;

}  // namespace ptdp
