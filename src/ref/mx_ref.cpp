// Scalar reference for MX / BDR conversions and dot products (see mx_ref.h). Written from the
// definitions in double arithmetic; the format parameters and byte packing come from src/formats.
#include "src/ref/mx_ref.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"

namespace qj::ref {
namespace {

const mx::ElemFormat& fmt(qj_dtype t) { return *mx::format(t); }

// floor(log2(a)) for finite a > 0, exactly (frexp: a = f * 2^ex, f in [0.5, 1)).
int floor_log2(double a) {
  int ex;
  std::frexp(a, &ex);
  return ex - 1;
}

// Exponent of the finest grid step of an element type: every finite value is an integer multiple
// of 2^-fine_shift (the smallest subnormal, or 2^-6 for INT8).
int fine_shift(const mx::ElemFormat& f) { return f.is_int ? 6 : f.bias - 1 + f.mbits; }

double nan_d() { return std::numeric_limits<double>::quiet_NaN(); }

}  // namespace

double mx_elem_value(qj_dtype t, uint8_t code) {
  const mx::ElemFormat& f = fmt(t);
  if (f.is_int) return std::ldexp(static_cast<double>(static_cast<int8_t>(code)), -6);
  const int c = code & ((1 << f.bits) - 1);
  const int s = c >> (f.bits - 1);
  const int e = (c >> f.mbits) & ((1 << f.ebits) - 1);
  const int m = c & ((1 << f.mbits) - 1);
  const double sign = s ? -1.0 : 1.0;
  if (t == QJ_MXFP8_E4M3 && e == 15 && m == 7) return nan_d();
  if (t == QJ_MXFP8_E5M2 && e == 31) return m ? nan_d() : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(m / std::ldexp(1.0, f.mbits), 1 - f.bias);
  return sign * std::ldexp(1.0 + m / std::ldexp(1.0, f.mbits), e - f.bias);
}

uint8_t mx_block_scale(qj_dtype t, qj_rounding r, const float* v, int count) {
  const mx::ElemFormat& f = fmt(t);
  double amax = 0;
  for (int i = 0; i < count; ++i) {
    if (!std::isfinite(v[i])) return mx::kScaleNaN;
    amax = std::fmax(amax, std::fabs(static_cast<double>(v[i])));
  }
  if (amax == 0) return 0;
  int s;
  if (r == QJ_ROUND_FLOOR) {
    // OCP 6.3: largest power of two <= amax, divided by the largest power of two of the element.
    s = floor_log2(amax) - f.emax;
  } else {
    // Smallest power of two X with amax / X <= max_value.
    s = floor_log2(amax) - f.emax - 1;
    while (amax > std::ldexp(static_cast<double>(f.max_value), s)) ++s;
  }
  // X in [2^-127, 2^(127 - emax)]: the top keeps max_value * X finite (mx.h, scale_from_amax).
  if (s < -127) s = -127;
  if (s > 127 - f.emax) s = 127 - f.emax;
  return static_cast<uint8_t>(s + 127);
}

uint8_t mx_encode(qj_dtype t, float v, uint8_t s) {
  const mx::ElemFormat& f = fmt(t);
  const double y = std::ldexp(static_cast<double>(v), 127 - s);  // exact in double
  if (f.is_int) {
    double q = std::nearbyint(y * 64.0);
    q = std::fmin(127.0, std::fmax(-127.0, q));
    return static_cast<uint8_t>(static_cast<int8_t>(q));
  }
  const double ay = std::fmin(std::fabs(y), static_cast<double>(f.max_value));
  const int emin = 1 - f.bias;
  const int e = ay < std::ldexp(1.0, emin) ? emin : floor_log2(ay);
  const double q = std::ldexp(1.0, e - f.mbits);  // grid step at ay
  const double rounded = std::nearbyint(ay / q) * q;
  const int half = 1 << (f.bits - 1);
  for (int c = 0; c < half; ++c)
    if (mx_elem_value(t, static_cast<uint8_t>(c)) == rounded)
      return static_cast<uint8_t>((std::signbit(v) ? half : 0) | c);
  std::abort();  // unreachable: every rounded value is on the grid
}

void mx_quantize_codes(qj_dtype t, qj_rounding r, const float* src, int64_t n, uint8_t* codes,
                       uint8_t* scales) {
  const int64_t nb = mx::num_blocks(n);
  for (int64_t b = 0; b < nb; ++b) {
    const int count = static_cast<int>(std::min<int64_t>(32, n - 32 * b));
    const float* v = src + 32 * b;
    const uint8_t s = mx_block_scale(t, r, v, count);
    scales[b] = s;
    for (int i = 0; i < 32; ++i)
      codes[32 * b + i] = (i < count && s != mx::kScaleNaN) ? mx_encode(t, v[i], s) : 0;
  }
}

void mx_quantize(qj_dtype t, qj_rounding r, const float* src, int64_t n, uint8_t* elems,
                 uint8_t* scales) {
  const mx::ElemFormat& f = fmt(t);
  std::vector<uint8_t> codes(mx::num_blocks(n) * 32);
  mx_quantize_codes(t, r, src, n, codes.data(), scales);
  for (int64_t b = 0; b < mx::num_blocks(n); ++b)
    mx::pack_block(f, codes.data() + 32 * b, elems + b * f.block_bytes);
}

void mx_dequantize(qj_dtype t, const uint8_t* elems, const uint8_t* scales, int64_t n, float* dst) {
  const mx::ElemFormat& f = fmt(t);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t s = scales[i / 32];
    if (s == mx::kScaleNaN) {
      dst[i] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const double v = mx_elem_value(t, mx::get_code(f, elems, i)) * std::ldexp(1.0, s - 127);
    dst[i] = static_cast<float>(v);  // one rounding of the exact product
  }
}

float mx_dot(qj_dtype ta, const uint8_t* ea, const uint8_t* sa, qj_dtype tb, const uint8_t* eb,
             const uint8_t* sb, int64_t k) {
  const mx::ElemFormat& fa = fmt(ta);
  const mx::ElemFormat& fb = fmt(tb);
  const int sha = fine_shift(fa), shb = fine_shift(fb);
  float acc = 0.0f;
  for (int64_t b = 0; b < mx::num_blocks(k); ++b) {
    const int count = static_cast<int>(std::min<int64_t>(32, k - 32 * b));
    double term;
    if (sa[b] == mx::kScaleNaN || sb[b] == mx::kScaleNaN) {
      term = nan_d();
    } else {
      bool finite = true;
      __int128 s = 0;
      double sd = 0;  // IEEE sum, only used when a NaN/Inf element code is present
      for (int i = 0; i < count; ++i) {
        const double va = mx_elem_value(ta, mx::get_code(fa, ea, 32 * b + i));
        const double vb = mx_elem_value(tb, mx::get_code(fb, eb, 32 * b + i));
        sd += va * vb;
        if (!std::isfinite(va) || !std::isfinite(vb)) {
          finite = false;
          continue;
        }
        // Integer forms: exact (|value| * 2^shift < 2^32; products in __int128).
        const int64_t ia = static_cast<int64_t>(std::ldexp(va, sha));
        const int64_t ib = static_cast<int64_t>(std::ldexp(vb, shb));
        s += static_cast<__int128>(ia) * ib;
      }
      const int e = sa[b] + sb[b] - 254;
      term = finite ? std::ldexp(static_cast<double>(s), e - sha - shb) : sd * std::ldexp(1.0, e);
    }
    acc = acc + static_cast<float>(term);  // fp32 accumulation in block order
  }
  return acc;
}

// ---- BDR ----

namespace {

// Biased fp32 exponent field of a finite float, from its value (subnormals and zero: 0).
int biased_exponent(float v) {
  const double a = std::fabs(static_cast<double>(v));
  if (a < std::ldexp(1.0, -126)) return 0;
  return floor_log2(a) + 127;
}

}  // namespace

void bdr_quantize(qj_dtype t, const float* src, int64_t n, uint8_t* blocks) {
  const bdr::BdrFormat& f = *bdr::format(t);
  for (int64_t b = 0; b < bdr::num_blocks(n); ++b) {
    float v[16] = {};
    const int count = static_cast<int>(std::min<int64_t>(16, n - 16 * b));
    std::memcpy(v, src + 16 * b, count * sizeof(float));
    bdr::Fields fl{};
    bool special = false;
    int e = 0;
    for (int i = 0; i < 16; ++i) {
      if (!std::isfinite(v[i])) special = true;
      else e = std::max(e, biased_exponent(v[i]));
    }
    if (special) {
      fl.e = bdr::kExpNaN;
    } else {
      fl.e = static_cast<uint8_t>(e);
      for (int j = 0; j < 8; ++j) {
        const int mu = std::max(biased_exponent(v[2 * j]), biased_exponent(v[2 * j + 1])) <= e - 1;
        fl.mu |= static_cast<uint8_t>(mu << j);
        const double step = std::ldexp(1.0, e - 127 - mu + 1 - f.m);
        for (int i = 2 * j; i < 2 * j + 2; ++i) {
          double m = std::nearbyint(std::fabs(static_cast<double>(v[i])) / step);
          m = std::fmin(m, std::ldexp(1.0, f.m) - 1);
          fl.code[i] = static_cast<uint8_t>((std::signbit(v[i]) ? 1 << f.m : 0) | static_cast<int>(m));
        }
      }
    }
    bdr::pack(f, fl, blocks + b * f.block_bytes);
  }
}

void bdr_dequantize(qj_dtype t, const uint8_t* blocks, int64_t n, float* dst) {
  const bdr::BdrFormat& f = *bdr::format(t);
  for (int64_t i = 0; i < n; ++i) {
    bdr::Fields fl;
    bdr::unpack(f, blocks + (i / 16) * f.block_bytes, &fl);
    if (fl.e == bdr::kExpNaN) {
      dst[i] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const int j = static_cast<int>(i % 16);
    const int mag = fl.code[j] & ((1 << f.m) - 1);
    const double v = mag * std::ldexp(1.0, bdr::step_exp(f, fl, j / 2));
    dst[i] = static_cast<float>((fl.code[j] >> f.m) & 1 ? -v : v);  // a -0 code decodes as -0.0
  }
}

float bdr_dot(qj_dtype t, const uint8_t* blocks_a, const uint8_t* blocks_b, int64_t k) {
  const bdr::BdrFormat& f = *bdr::format(t);
  float acc = 0.0f;
  for (int64_t b = 0; b < bdr::num_blocks(k); ++b) {
    bdr::Fields fa, fb;
    bdr::unpack(f, blocks_a + b * f.block_bytes, &fa);
    bdr::unpack(f, blocks_b + b * f.block_bytes, &fb);
    double term;
    if (fa.e == bdr::kExpNaN || fb.e == bdr::kExpNaN) {
      term = nan_d();
    } else {
      // Exact: value_a * value_b = ia * ib * 2^(base + 2 - mu_a - mu_b).
      const int base = fa.e + fb.e - 254 + 2 - 2 * f.m - 2;
      int64_t s = 0;
      const int count = static_cast<int>(std::min<int64_t>(16, k - 16 * b));
      for (int i = 0; i < count; ++i) {
        const int mu = ((fa.mu >> (i / 2)) & 1) + ((fb.mu >> (i / 2)) & 1);
        s += static_cast<int64_t>(bdr::int_value(f, fa.code[i]) * bdr::int_value(f, fb.code[i]))
             << (2 - mu);
      }
      term = std::ldexp(static_cast<double>(s), base);
    }
    acc = acc + static_cast<float>(term);
  }
  return acc;
}

}  // namespace qj::ref
