// fp32 -> fp16 with round-toward-zero, and the counter-based random bits of quantjit's stochastic
// rounding of fp16 embedding tables (used by the fused row-wise AdaGrad / SGD updates).
//
// Stochastic rounding of a finite fp32 value v to fp16:  f32_to_f16_rz(bits(v) + r), where r is a
// uniform 13-bit integer (the 13 fp32 mantissa bits below fp16's last one) added to the fp32 bit
// pattern: for fp16 normal results this rounds |v| up with probability (dropped bits) / 2^13, as
// FBGEMM's fused AdaGrad does with its 8 random bits. Non-finite v is converted as is, and
// |v| >= 65536 rounds toward zero to +-65504 (no bits added).
//
// The random bits are a pure function of (seed, row, column), so a run is reproducible and does
// not depend on thread count or order:
//   rowkey = fmix32(lo(row) ^ fmix32(hi(row) ^ fmix32(hi(seed) ^ fmix32(lo(seed)))))
//   q      = (j & ~31) | (j & 15)             (j and j + 16 share q within each block of 32)
//   P(q)   = (rowkey ^ (uint32(q) * 0x9E3779B9)) * 0x2C1B3C6D                 (all mod 2^32)
//   r(j)   = bit 4 of j clear: P(q) >> 19 (bits 19-31); set: (P(q) >> 6) & 0x1fff (bits 6-18)
// fmix32 is MurmurHash3's finalizer. r is a multiplicative hash (an odd multiple, a bijection of
// the uniform 32-bit input) of a per-row well-mixed key, and one product feeds two elements
// through disjoint bit fields, which are independent and uniform when the product is: the
// vector code does one 32-bit multiply per 32 elements. History (2026-11-29): r(j) was first a
// full fmix32 of the same input (two vector multiplies and eight other operations per element),
// then one product per element ((P >> 19) of every j), which still took ~20% of a warm fp16 dim
// 256 update (timing with the multiply removed: 42 -> 33.5 us per 1000 rows). The rounding stays
// unbiased (test/rowwise_adagrad_test.cpp checks the rate) and reproducible. Vector code computes
// exactly these 32-bit operations.
#pragma once
#include <cstdint>

#include "src/formats/half.h"

namespace qj {

inline uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// sr_row_key in two steps, so that a call hashes its seed once: sr_row_key(seed, row) ==
// sr_row_key_from(sr_seed_key(seed), row).
inline uint32_t sr_seed_key(uint64_t seed) {
  const uint32_t k = fmix32(static_cast<uint32_t>(seed));
  return fmix32(static_cast<uint32_t>(seed >> 32) ^ k);
}
inline uint32_t sr_row_key_from(uint32_t seed_key, uint64_t row) {
  const uint32_t k = fmix32(static_cast<uint32_t>(row >> 32) ^ seed_key);
  return fmix32(static_cast<uint32_t>(row) ^ k);
}
inline uint32_t sr_row_key(uint64_t seed, uint64_t row) { return sr_row_key_from(sr_seed_key(seed), row); }

inline uint32_t sr_bits(uint32_t row_key, uint32_t j) {
  const uint32_t q = (j & ~31u) | (j & 15u);
  const uint32_t p = (row_key ^ (q * 0x9E3779B9u)) * 0x2C1B3C6Du;
  return (j & 16u) ? (p >> 6) & 0x1fffu : p >> 19;
}

// fp32 -> fp16 rounding toward zero (vcvtps2ph with imm 3): overflow gives +-65504, NaN stays NaN.
inline uint16_t f32_to_f16_rz(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);                         // inf
  if (a >= 0x477ff000u + 0x1000u) return static_cast<uint16_t>(sign | 0x7bffu);  // >= 65536: max
  if (a < 0x38800000u) {
    // fp16 subnormal or zero: truncate value / 2^-24
    float v = bits_f32(a) * bits_f32(0x4b800000u);  // * 2^24, exact
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(v));  // truncation
  }
  return static_cast<uint16_t>(sign | ((a - 0x38000000u) >> 13));
}

// (|v| >= 65536, inf and NaN take no random bits: the first round toward zero to +-65504 anyway,
// and near FLT_MAX the add would carry into the exponent and make a NaN.)
inline uint16_t f32_to_f16_stochastic(float v, uint32_t r13) {
  uint32_t u = f32_bits(v);
  if ((u & 0x7fffffffu) < 0x47800000u) u += r13;
  return f32_to_f16_rz(bits_f32(u));
}

}  // namespace qj
