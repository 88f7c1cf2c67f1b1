// Unit constants. SI inside the code (bytes, seconds, FLOP/s); GB = 1e9 everywhere, GiB = 2^30
// (memory for people, as PyTorch and Megatron-LM report it: core/text.h MemoryUnit).
// Conversions to the units named in YAML keys and CLI output happen only at the edges.
#pragma once

namespace ptdp::units {

inline constexpr double kGiga = 1e9;
inline constexpr double kTera = 1e12;
inline constexpr double kMicro = 1e-6;

inline constexpr double kGB = 1e9;            // bytes
inline constexpr double kGiB = 1073741824.0;  // bytes, 2^30
inline constexpr double kTflops = 1e12;       // FLOP/s
inline constexpr double kGBPerS = 1e9;        // bytes per second
inline constexpr double kMicrosecond = 1e-6;  // seconds

}  // namespace ptdp::units
