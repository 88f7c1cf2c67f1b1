// The executor's 16-bit floating-point formats, bit for bit, on the host: bfloat16 (the top 16
// bits of an IEEE binary32: 1 sign, 8 exponent, 7 mantissa bits) and IEEE 754 binary16 (fp16: 1
// sign, 5 exponent, 10 mantissa bits, subnormals below 2^-14, largest finite 65504).
//
// fp32 -> 16 bits rounds to nearest, ties to even (as torch's .to(torch.bfloat16) / .half() and
// CUDA's __float2bfloat16_rn / __float2half_rn do): fp32 values beyond the format's range round
// to infinity; NaN stays a (quiet) NaN with its sign; -0 stays -0. 16 bits -> fp32 is exact.
// The only conversion code of the executor: the CPU backend's Convert and 16-bit kernels use it,
// and tests pin it on edge cases.
#pragma once

#include <bit>
#include <cstdint>

namespace ptdp {

inline uint16_t FloatToBf16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN: keep the top bits, make it quiet
  }
  // Round to nearest even on the 16 bits dropped; a carry moves into the exponent (and turns the
  // largest values into infinity), as it should.
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float Bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t FloatToHalf(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet, with the top of its payload
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  // 65520 = 65504 + half an ulp: the tie rounds to the even neighbour, 2^16, which is infinity.
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  // Round `mantissa` (an integer) right by `shift` bits to nearest even.
  auto round_shift = [](uint32_t mantissa, int shift) {
    const uint32_t kept = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return kept + ((rest > half || (rest == half && (kept & 1u) != 0)) ? 1u : 0u);
  };
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal (or zero) in units of 2^-24
    const int exponent = static_cast<int>(abs >> 23);
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself is a tie -> 0)
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;  // value = mantissa 2^(e - 150)
    // Rounding up to 0x400 gives the smallest normal, which is the right encoding.
    return static_cast<uint16_t>(sign | round_shift(mantissa, 126 - exponent));
  }
  // A normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits; a carry out of the
  // mantissa moves into the exponent, as it should.
  return static_cast<uint16_t>(sign | round_shift(abs - 0x38000000u, 13));
}

inline float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa 2^-24, exact in fp32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace ptdp
