// Scalar fp16 (IEEE binary16) and bf16 conversions, exact and portable.
//
// Used by src/ref, by packing code and by format conversions; vector kernels use F16C
// (vcvtph2ps / vcvtps2ph) and integer shifts for bf16, which give the same results:
//  - fp16 -> fp32 and bf16 -> fp32 are exact (including inf, nan, subnormals);
//  - fp32 -> bf16 rounds to nearest even; NaN stays NaN (quietened);
//  - fp32 -> fp16 rounds to nearest even, overflows to inf (as vcvtps2ph with imm 0 does).
#pragma once
#include <cstdint>
#include <cstring>

namespace qj {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // subnormal: man * 2^-24
    float v = static_cast<float>(man) * bits_f32(0x33800000u);  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // result is subnormal or zero: value / 2^-24, rounded to nearest even
    float v = bits_f32(a) * bits_f32(0x4b800000u);  // * 2^24, exact
    // v in [0, 1024); round half to even via the fp32 add trick (exact for v < 2^23)
    float r = (v + 8388608.0f) - 8388608.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace qj
