// OCP MX element codecs, block quantize/dequantize and byte layouts (see mx.h; MX.md).
// Integer bit manipulation throughout, so results do not depend on the MXCSR state of the caller.
#include "src/formats/mx.h"

#include <cmath>
#include <cstring>

namespace qj::mx {
namespace {

constexpr ElemFormat kFormats[] = {
    // type            name          bits int   e  m  bias emax maxcode max        bytes ishift
    {QJ_MXFP8_E4M3, "mxfp8_e4m3", 8, false, 4, 3, 7, 8, 0x7e, 448.0f, 32, -1},
    {QJ_MXFP8_E5M2, "mxfp8_e5m2", 8, false, 5, 2, 15, 15, 0x7b, 57344.0f, 32, -1},
    {QJ_MXFP6_E3M2, "mxfp6_e3m2", 6, false, 3, 2, 3, 4, 0x1f, 28.0f, 24, 4},
    {QJ_MXFP6_E2M3, "mxfp6_e2m3", 6, false, 2, 3, 1, 2, 0x1f, 7.5f, 24, 3},
    {QJ_MXFP4_E2M1, "mxfp4_e2m1", 4, false, 2, 1, 1, 2, 0x7, 6.0f, 16, 1},
    {QJ_MXINT8, "mxint8", 8, true, 0, 6, 0, 0, 0x7f, 127.0f / 64.0f, 32, 6},
};

// Round sig * 2^-sh to nearest, ties to even (sh >= 1; sig < 2^24).
inline uint32_t rne_shift(uint32_t sig, int sh) {
  if (sh > 25) return 0;  // sig * 2^-sh < 2^-2
  return (sig + (1u << (sh - 1)) - 1u + ((sig >> sh) & 1u)) >> sh;
}

uint32_t encode_int8_mag(uint32_t a) {
  // RNE(|y| * 64) with |y| = sig * 2^(efp - 150): shift right by 150 - 6 - efp.
  const int ef = static_cast<int>(a >> 23);
  const uint32_t sig = (a & 0x7fffffu) | (ef ? 0x800000u : 0u);
  const int sh = 144 - (ef ? ef : 1);
  if (sh <= 0) return 127;  // |y| * 64 >= 2^23
  const uint32_t m = rne_shift(sig, sh);
  return m > 127 ? 127 : m;
}

uint32_t encode_fp_mag(const ElemFormat& f, uint32_t a) {
  if (a >= f32_bits(f.max_value)) return f.max_code;  // saturate (rounding is monotone)
  const int ef = static_cast<int>(a >> 23);
  const int emin_biased = 128 - f.bias;  // fp32 exponent field of the element's min normal
  uint32_t m;
  if (ef >= emin_biased) {
    // Normal element: round the fp32 mantissa to mbits; a carry moves into the exponent field.
    const int sh = 23 - f.mbits;
    const uint32_t r = (a + (1u << (sh - 1)) - 1u + ((a >> sh) & 1u)) >> sh;
    m = r - (static_cast<uint32_t>(127 - f.bias) << f.mbits);
  } else {
    // Element subnormal range: M = RNE(|y| / 2^(emin - mbits)); M = 2^mbits is the min normal,
    // whose code is exactly 1 << mbits.
    const uint32_t sig = (a & 0x7fffffu) | (ef ? 0x800000u : 0u);
    const int sh = 150 + (1 - f.bias) - f.mbits - (ef ? ef : 1);
    m = rne_shift(sig, sh);
  }
  return m > f.max_code ? f.max_code : m;
}

template <class T>
struct Table {
  T v[256];
};

}  // namespace

const ElemFormat* format(qj_dtype t) {
  for (const ElemFormat& f : kFormats)
    if (f.type == t) return &f;
  return nullptr;
}

uint8_t encode_elem(const ElemFormat& f, float y) {
  const uint32_t u = f32_bits(y);
  const uint32_t a = u & 0x7fffffffu;
  if (f.is_int) {
    const uint32_t m = encode_int8_mag(a);
    return static_cast<uint8_t>((u >> 31) ? -static_cast<int>(m) : static_cast<int>(m));
  }
  return static_cast<uint8_t>(((u >> 31) << (f.bits - 1)) | encode_fp_mag(f, a));
}

float decode_elem(const ElemFormat& f, uint8_t code) {
  if (f.is_int) return static_cast<float>(static_cast<int8_t>(code)) * (1.0f / 64.0f);
  const uint32_t c = code & ((1u << f.bits) - 1u);
  const bool neg = (c >> (f.bits - 1)) & 1u;
  const uint32_t e = (c >> f.mbits) & ((1u << f.ebits) - 1u);
  const uint32_t m = c & ((1u << f.mbits) - 1u);
  float v;
  if (f.type == QJ_MXFP8_E4M3 && e == 15 && m == 7) {
    v = bits_f32(kF32QuietNaN);
  } else if (f.type == QJ_MXFP8_E5M2 && e == 31) {
    // (NaN: E5M2 is the top byte of an fp16, converted as vcvtph2ps converts it: the mantissa
    // kept as payload, quietened, so that every tier gives the same bits)
    v = m == 0 ? bits_f32(kF32Inf) : bits_f32(kF32QuietNaN | (m << 21));
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - f.bias - f.mbits);
  } else {
    v = std::ldexp(static_cast<float>((1u << f.mbits) + m), static_cast<int>(e) - f.bias - f.mbits);
  }
  return neg ? -v : v;
}

const float* value_table(qj_dtype t) {
  static const auto tables = [] {
    struct All {
      Table<float> t[sizeof kFormats / sizeof kFormats[0]];
    } all{};
    for (size_t i = 0; i < sizeof kFormats / sizeof kFormats[0]; ++i)
      for (int c = 0; c < (1 << kFormats[i].bits); ++c)
        all.t[i].v[c] = decode_elem(kFormats[i], static_cast<uint8_t>(c));
    return all;
  }();
  for (size_t i = 0; i < sizeof kFormats / sizeof kFormats[0]; ++i)
    if (kFormats[i].type == t) return tables.t[i].v;
  return nullptr;
}

namespace {
template <class T>
Table<T> int_table(qj_dtype t) {
  Table<T> r{};
  const ElemFormat& f = *format(t);
  for (int c = 0; c < (1 << f.bits); ++c)
    r.v[c] = static_cast<T>(std::ldexp(decode_elem(f, static_cast<uint8_t>(c)), f.int_shift));
  return r;
}
}  // namespace

const int8_t* fp4_int_table() {
  static const Table<int8_t> t = int_table<int8_t>(QJ_MXFP4_E2M1);
  return t.v;
}
const int8_t* e2m3_int_table() {
  static const Table<int8_t> t = int_table<int8_t>(QJ_MXFP6_E2M3);
  return t.v;
}
const int16_t* e3m2_int_table() {
  static const Table<int16_t> t = int_table<int16_t>(QJ_MXFP6_E3M2);
  return t.v;
}

uint8_t quantize_block(const ElemFormat& f, qj_rounding r, const float* v, int count,
                       uint8_t* codes) {
  uint32_t amax = 0;
  for (int i = 0; i < count; ++i) {
    const uint32_t a = f32_bits(v[i]) & 0x7fffffffu;
    amax = a > amax ? a : amax;
  }
  const uint8_t s = scale_from_amax(f, amax, r);
  if (s == kScaleNaN) {
    std::memset(codes, 0, kBlock);
    return s;
  }
  // y = V / X = V * 2^(127-s) on the bits: exact unless it underflows below 2^-126, where every
  // element type rounds to (signed) zero anyway. (The vector paths multiply by 2^(127-s) in fp32
  // under the default MXCSR, which is the same number.)
  for (int i = 0; i < count; ++i) codes[i] = encode_elem(f, mul_pow2(v[i], 127 - s));
  for (int i = count; i < kBlock; ++i) codes[i] = 0;
  return s;
}

void dequantize_block(const ElemFormat& f, const uint8_t* codes, uint8_t scale, float* out) {
  const float* tab = value_table(f.type);
  const uint32_t mask = (1u << f.bits) - 1u;
  if (scale == kScaleNaN) {
    for (int i = 0; i < kBlock; ++i) out[i] = bits_f32(kF32QuietNaN);
    return;
  }
  for (int i = 0; i < kBlock; ++i) out[i] = mul_pow2(tab[codes[i] & mask], scale - 127);
}

void pack_block(const ElemFormat& f, const uint8_t* c, uint8_t* dst) {
  if (f.bits == 8) {
    std::memcpy(dst, c, kBlock);
  } else if (f.bits == 4) {
    for (int j = 0; j < kBlock / 2; ++j)
      dst[j] = static_cast<uint8_t>((c[2 * j] & 0xf) | (c[2 * j + 1] & 0xf) << 4);
  } else {
    for (int g = 0; g < kBlock / 4; ++g) {
      const uint32_t w = (c[4 * g] & 63u) | (c[4 * g + 1] & 63u) << 6 | (c[4 * g + 2] & 63u) << 12 |
                         (c[4 * g + 3] & 63u) << 18;
      dst[3 * g] = static_cast<uint8_t>(w);
      dst[3 * g + 1] = static_cast<uint8_t>(w >> 8);
      dst[3 * g + 2] = static_cast<uint8_t>(w >> 16);
    }
  }
}

void unpack_block(const ElemFormat& f, const uint8_t* src, uint8_t* c) {
  if (f.bits == 8) {
    std::memcpy(c, src, kBlock);
  } else if (f.bits == 4) {
    for (int j = 0; j < kBlock / 2; ++j) {
      c[2 * j] = src[j] & 0xf;
      c[2 * j + 1] = src[j] >> 4;
    }
  } else {
    for (int g = 0; g < kBlock / 4; ++g) {
      const uint32_t w = src[3 * g] | src[3 * g + 1] << 8 | src[3 * g + 2] << 16;
      for (int k = 0; k < 4; ++k) c[4 * g + k] = (w >> (6 * k)) & 63u;
    }
  }
}

uint8_t get_code(const ElemFormat& f, const uint8_t* elems, int64_t i) {
  if (f.bits == 8) return elems[i];
  if (f.bits == 4) return (elems[i >> 1] >> ((i & 1) * 4)) & 0xf;
  const int64_t bit = i * 6;
  const uint32_t w = elems[bit >> 3] | ((bit & 7) > 2 ? elems[(bit >> 3) + 1] << 8 : 0u);
  return (w >> (bit & 7)) & 63u;
}

void ggml_block_from_split(const uint8_t* e, uint8_t scale, uint8_t* b) {
  b[0] = scale;
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = (j & 1) ? e[j >> 1] >> 4 : e[j >> 1] & 0xf;                 // code j
    const uint8_t hi = (j & 1) ? e[8 + (j >> 1)] >> 4 : e[8 + (j >> 1)] & 0xf;     // code j+16
    b[1 + j] = static_cast<uint8_t>(lo | hi << 4);
  }
}

void split_from_ggml_block(const uint8_t* b, uint8_t* e, uint8_t* scale) {
  *scale = b[0];
  uint8_t c[kBlock];
  for (int j = 0; j < 16; ++j) {
    c[j] = b[1 + j] & 0xf;
    c[j + 16] = b[1 + j] >> 4;
  }
  for (int j = 0; j < 16; ++j) e[j] = static_cast<uint8_t>(c[2 * j] | c[2 * j + 1] << 4);
}

void fbgemm_group_from_split(const uint8_t* e, uint8_t scale, uint8_t* g) {
  std::memcpy(g, e, 16);
  g[16] = scale;
}

void split_from_fbgemm_group(const uint8_t* g, uint8_t* e, uint8_t* scale) {
  std::memcpy(e, g, 16);
  *scale = g[16];
}

}  // namespace qj::mx
