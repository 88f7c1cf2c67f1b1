#include "executor/model/rng.h"

#include <cmath>

namespace ptdp {

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  // Constants from Random123 (philox.h).
  constexpr uint64_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = kM0 * c[0], p1 = kM1 * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

uint64_t Fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

RngStream::RngStream(uint64_t seed, std::string_view name)
    : key(Fnv1a64(name) ^ (seed * 0x9E3779B97F4A7C15ull)) {}

uint64_t RngStream::Bits(uint64_t index) const {
  const auto out =
      Philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0},
                 {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  return (static_cast<uint64_t>(out[0]) << 32) | out[1];
}

double RngStream::Uniform(uint64_t index) const {
  // 53 random bits, shifted off zero.
  return (static_cast<double>(Bits(index) >> 11) + 0.5) * 0x1.0p-53;
}

double RngStream::Normal(uint64_t index) const {
  const auto out =
      Philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 1, 0},
                 {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  const double u1 = (static_cast<double>(out[0]) + 0.5) * 0x1.0p-32;
  const double u2 = (static_cast<double>(out[1]) + 0.5) * 0x1.0p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t RngStream::Below(uint64_t index, uint64_t n) const {
  return static_cast<uint64_t>(Uniform(index) * static_cast<double>(n)) % n;
}

}  // namespace ptdp
