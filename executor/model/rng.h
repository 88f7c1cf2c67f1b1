// Counter-based random numbers (Philox4x32-10; Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11): the value for element i of a stream is a pure function of (key, i), so
// every shard of a parameter can draw exactly the elements of the full tensor that it holds,
// whatever the layout, and data sampling needs no state beyond a counter.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ptdp {

// Philox4x32 with 10 rounds: four 32-bit outputs for a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A stream named by (seed, name): e.g. (1234, "layers.3.mlp.fc1.weight").
struct RngStream {
  uint64_t key = 0;

  RngStream(uint64_t seed, std::string_view name);
  explicit RngStream(uint64_t raw_key) : key(raw_key) {}

  uint64_t Bits(uint64_t index) const;               // 64 random bits for element `index`
  double Uniform(uint64_t index) const;              // in (0, 1)
  double Normal(uint64_t index) const;               // standard normal (Box-Muller)
  uint64_t Below(uint64_t index, uint64_t n) const;  // in [0, n), n > 0
};

uint64_t Fnv1a64(std::string_view text);

}  // namespace ptdp
