// BDR MX9/MX6/MX4 scalar codec and block layout (see mx_bdr.h; MX.md section 6).
// Integer bit manipulation only, so the result does not depend on the caller's MXCSR.
#include "src/formats/mx_bdr.h"

#include <cmath>
#include <cstring>

#include "src/formats/half.h"
#include "src/formats/mx.h"

namespace qj::bdr {
namespace {

constexpr BdrFormat kFormats[] = {
    {QJ_BDR_MX9, "mx9", 7, 18},
    {QJ_BDR_MX6, "mx6", 4, 12},
    {QJ_BDR_MX4, "mx4", 2, 8},
};

inline uint32_t rne_shift(uint32_t sig, int sh) {
  if (sh > 25) return 0;
  return (sig + (1u << (sh - 1)) - 1u + ((sig >> sh) & 1u)) >> sh;
}

}  // namespace

const BdrFormat* format(qj_dtype t) {
  for (const BdrFormat& f : kFormats)
    if (f.type == t) return &f;
  return nullptr;
}

void quantize_fields(const BdrFormat& f, const float* v, int count, Fields* out) {
  uint32_t a[kBlock];
  uint32_t sign[kBlock];
  uint32_t amax = 0;
  for (int i = 0; i < kBlock; ++i) {
    const uint32_t u = i < count ? f32_bits(v[i]) : 0u;
    a[i] = u & 0x7fffffffu;
    sign[i] = u >> 31;
    amax = a[i] > amax ? a[i] : amax;
  }
  std::memset(out, 0, sizeof *out);
  if (amax >= 0x7f800000u) {  // NaN or Inf anywhere: NaN block
    out->e = kExpNaN;
    return;
  }
  const int e = static_cast<int>(amax >> 23);
  out->e = static_cast<uint8_t>(e);
  const uint32_t mmax = (1u << f.m) - 1u;
  for (int j = 0; j < kPairs; ++j) {
    const int pe = static_cast<int>((a[2 * j] > a[2 * j + 1] ? a[2 * j] : a[2 * j + 1]) >> 23);
    const int mu = pe < e ? 1 : 0;  // both exponents <= E-1
    out->mu |= static_cast<uint8_t>(mu << j);
    for (int i = 2 * j; i < 2 * j + 2; ++i) {
      // |V| / 2^(E-127-mu+1-m) with |V| = sig * 2^(efp-150): shift right by 24-m+E-efp-mu (>= 16).
      const int ef = static_cast<int>(a[i] >> 23);
      const uint32_t sig = (a[i] & 0x7fffffu) | (ef ? 0x800000u : 0u);
      const int sh = 24 - f.m + e - (ef ? ef : 1) - mu;
      uint32_t mag = rne_shift(sig, sh);
      if (mag > mmax) mag = mmax;
      out->code[i] = static_cast<uint8_t>(sign[i] << f.m | mag);
    }
  }
}

void dequantize_fields(const BdrFormat& f, const Fields& b, float* out) {
  if (b.e == kExpNaN) {
    for (int i = 0; i < kBlock; ++i) out[i] = bits_f32(0x7fc00000u);
    return;
  }
  for (int i = 0; i < kBlock; ++i) {
    // M * 2^step with step in [-134, 126]: exact in fp32 (a multiple of 2^-134, below 2^128).
    const float v = mx::mul_pow2(static_cast<float>(b.code[i] & ((1 << f.m) - 1)), step_exp(f, b, i / 2));
    out[i] = (b.code[i] >> f.m) & 1 ? -v : v;
  }
}

void pack(const BdrFormat& f, const Fields& b, uint8_t* dst) {
  dst[0] = b.e;
  dst[1] = b.mu;
  const int w = f.m + 1;
  const int data_bytes = f.block_bytes - 2;
  std::memset(dst + 2, 0, data_bytes);
  for (int i = 0; i < kBlock; ++i) {
    const uint32_t c = b.code[i] & ((1u << w) - 1u);
    const int bit = w * i;
    // A field spans at most two bytes (w <= 8).
    dst[2 + bit / 8] |= static_cast<uint8_t>(c << (bit % 8));
    if (bit % 8 + w > 8) dst[2 + bit / 8 + 1] |= static_cast<uint8_t>(c >> (8 - bit % 8));
  }
}

void unpack(const BdrFormat& f, const uint8_t* src, Fields* out) {
  out->e = src[0];
  out->mu = src[1];
  const int w = f.m + 1;
  for (int i = 0; i < kBlock; ++i) {
    const int bit = w * i;
    uint32_t c = src[2 + bit / 8] >> (bit % 8);
    if (bit % 8 + w > 8) c |= static_cast<uint32_t>(src[2 + bit / 8 + 1]) << (8 - bit % 8);
    out->code[i] = static_cast<uint8_t>(c & ((1u << w) - 1u));
  }
}

void quantize_block(const BdrFormat& f, const float* v, int count, uint8_t* dst) {
  Fields b;
  quantize_fields(f, v, count, &b);
  pack(f, b, dst);
}

void dequantize_block(const BdrFormat& f, const uint8_t* src, float* out) {
  Fields b;
  unpack(f, src, &b);
  dequantize_fields(f, b, out);
}

}  // namespace qj::bdr
