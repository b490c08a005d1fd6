// AVX-512 and AVX2 MX / BDR conversion kernels (see mx_convert_kernels.h). Plain intrinsics in
// functions with target attributes, so the rest of the library stays baseline x86-64.
//
// They compute exactly what the scalar codecs of src/formats compute, by different means:
//  - amax: unsigned max of |bits| per block (NaN/Inf >= 0x7f800000 flags the block), then the
//    scale rule: the scalar mx::scale_from_amax (AVX2, and AVX-512 for leftover and NaN/Inf
//    blocks) or its step-by-step vector twin scale_vec (AVX-512, four blocks at a time);
//  - y = |V| * 2^(127-s) (exact power-of-two multiply; below 2^-126 every element rounds to 0);
//  - FP elements: round to the element grid with the "add a power of two" trick: with
//    E' = max(exponent field of y, that of the element's min normal) and C = 2^(E'-127+23-mbits),
//    y + C rounds y to a multiple of the grid step 2^(E'-127-mbits) (RNE, the MXCSR default set
//    by the driver), and bits(y + C) - bits(C) counts steps; the code follows by adding the
//    binade offset (E' - emin) << mbits; saturation is an unsigned min on the code;
//  - INT8: cvtps2dq(V * 2^(127-s) * 64) is RNE, then a clamp to [-127, 127];
//  - decode: value = bits(mag << (23-mbits)) * 2^(127-bias) (fp32 subnormals for the element's
//    subnormals, hence the MXCSR guard against DAZ), E5M2 through vcvtph2ps, FP4 through a
//    permute of the 16-entry value table; then one fp32 multiply by X.
//  - BDR: microexponents from the pair maxima; the magnitudes by the scalar codec's integer RNE
//    shift with per-lane variable shifts (AVX-512), or as |V| times a power of two rounded by
//    cvtps2dq (AVX2: the same integer, see bdr_magnitudes); fields packed by pext (AVX-512)
//    or by vpmaddwd and vpshufb (AVX2), unpacked by 64-bit spread steps.
// Tests run every tier against the scalar path and the double-precision reference.
// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized on their internal _mm512_undefined_*
// (GCC bug 105593, fixed in 13); the warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ops/mx_convert_kernels.h"

#define QJ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QJ_AVX512 __attribute__((target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq")))

namespace qj::mxk {
namespace {

// Compile-time parameters of the element types (mirror mx::ElemFormat; a wrong value shows up in
// the every-tier comparisons against the reference in test/mx_convert_test.cpp).
template <qj_dtype T>
struct Tr;
template <>
struct Tr<QJ_MXFP8_E4M3> {
  static constexpr int bits = 8, mbits = 3, bias = 7, max_code = 0x7e, bytes = 32, emax = 8, max_mant = 0x600000;
  static constexpr bool is_int = false;
};
template <>
struct Tr<QJ_MXFP8_E5M2> {
  static constexpr int bits = 8, mbits = 2, bias = 15, max_code = 0x7b, bytes = 32, emax = 15, max_mant = 0x600000;
  static constexpr bool is_int = false;
};
template <>
struct Tr<QJ_MXFP6_E3M2> {
  static constexpr int bits = 6, mbits = 2, bias = 3, max_code = 0x1f, bytes = 24, emax = 4, max_mant = 0x600000;
  static constexpr bool is_int = false;
};
template <>
struct Tr<QJ_MXFP6_E2M3> {
  static constexpr int bits = 6, mbits = 3, bias = 1, max_code = 0x1f, bytes = 24, emax = 2, max_mant = 0x700000;
  static constexpr bool is_int = false;
};
template <>
struct Tr<QJ_MXFP4_E2M1> {
  static constexpr int bits = 4, mbits = 1, bias = 1, max_code = 0x7, bytes = 16, emax = 2, max_mant = 0x400000;
  static constexpr bool is_int = false;
};
template <>
struct Tr<QJ_MXINT8> {
  static constexpr int bits = 8, mbits = 6, bias = 0, max_code = 0x7f, bytes = 32, emax = 0, max_mant = 0x7e0000;
  static constexpr bool is_int = true;
};

// ================================ shared 256-bit helpers ================================

// 32 byte codes, in element order -> one SPLIT block.
template <int BITS>
QJ_AVX2 inline void store_block(__m256i c, uint8_t* dst) {
  if constexpr (BITS == 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), c);
  } else if constexpr (BITS == 4) {
    const __m256i w = _mm256_maddubs_epi16(c, _mm256_set1_epi16(0x1001));  // c[2j] + 16 c[2j+1]
    __m256i p = _mm256_packus_epi16(w, w);     // per lane: 8 bytes, twice
    p = _mm256_permute4x64_epi64(p, 0x08);     // qwords 0 and 2 -> the low 16 bytes
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(p));
  } else {
    const __m256i w = _mm256_maddubs_epi16(c, _mm256_set1_epi16(0x4001));     // 12 bits
    __m256i d = _mm256_madd_epi16(w, _mm256_set1_epi32(0x10000001));        // 24 bits: 4 codes
    const __m256i shuf = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,
                                          0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    d = _mm256_shuffle_epi8(d, shuf);
    d = _mm256_permutevar8x32_epi32(d, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(d));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 16), _mm256_extracti128_si256(d, 1));
  }
}

// One SPLIT block -> 32 byte codes in element order. Reads exactly the block's bytes.
template <int BITS>
QJ_AVX2 inline __m256i load_block(const uint8_t* src) {
  if constexpr (BITS == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  } else if constexpr (BITS == 4) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(x, m);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  } else {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));      // bytes 0..15
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8));  // bytes 8..23
    const __m128i da = _mm_shuffle_epi8(a, _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1));
    const __m128i db = _mm_shuffle_epi8(b, _mm_setr_epi8(4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1));
    const __m256i d = _mm256_set_m128i(db, da);  // 8 dwords of 4 codes (24 bits)
    const __m256i t = _mm256_or_si256(_mm256_and_si256(d, _mm256_set1_epi32(0xfff)),
                                      _mm256_and_si256(_mm256_slli_epi32(d, 4), _mm256_set1_epi32(0x0fff0000)));
    return _mm256_or_si256(_mm256_and_si256(t, _mm256_set1_epi32(0x003f003f)),
                           _mm256_and_si256(_mm256_slli_epi16(t, 2), _mm256_set1_epi32(0x3f003f00)));
  }
}

// ======================================== AVX2 ========================================

template <bool kBf16>
QJ_AVX2 inline __m256 load8(const void* src, int64_t i) {
  if constexpr (kBf16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(src) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(src) + i);
  }
}

// 8 values (vi = bits, a = |bits|) -> 8 codes in dword lanes.
template <class TR>
QJ_AVX2 inline __m256i encode8(__m256i vi, __m256i a, __m256 inv) {
  if constexpr (TR::is_int) {
    const __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_castsi256_ps(vi), inv), _mm256_set1_ps(64.0f));
    const __m256i q = _mm256_cvtps_epi32(y);
    return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
  } else {
    const __m256 y = _mm256_mul_ps(_mm256_castsi256_ps(a), inv);
    const __m256i yb = _mm256_castps_si256(y);
    const __m256i ep = _mm256_max_epi32(_mm256_srli_epi32(yb, 23), _mm256_set1_epi32(128 - TR::bias));
    const __m256i cb = _mm256_slli_epi32(_mm256_add_epi32(ep, _mm256_set1_epi32(23 - TR::mbits)), 23);
    const __m256 sum = _mm256_add_ps(y, _mm256_castsi256_ps(cb));
    __m256i code = _mm256_sub_epi32(_mm256_castps_si256(sum), cb);
    code = _mm256_add_epi32(code, _mm256_slli_epi32(_mm256_sub_epi32(ep, _mm256_set1_epi32(128 - TR::bias)), TR::mbits));
    code = _mm256_min_epu32(code, _mm256_set1_epi32(TR::max_code));
    return _mm256_or_si256(code, _mm256_srli_epi32(_mm256_xor_si256(vi, a), 32 - TR::bits));
  }
}

// mx::scale_from_amax under QJ_ROUND_FLOOR for finite amax (in every lane of amax), on every lane:
// the same integer steps, so the vector steps after it need no trip through a general register.
// (Under RCEIL, the scalar rule and a broadcast measured faster: its extra steps run on the
// integer ALUs beside the vector work.)
template <class TR>
QJ_AVX2 inline __m256i scale_floor8(__m256i amax) {
  return _mm256_max_epi32(_mm256_sub_epi32(_mm256_srli_epi32(amax, 23), _mm256_set1_epi32(TR::emax)),
                          _mm256_setzero_si256());
}

// mx::e8m0_inverse_f32 on every lane: 2^(127 - b), the subnormal 2^-127 at b = 254 (MXINT8 only).
template <class TR>
QJ_AVX2 inline __m256 inverse_scale8(__m256i b) {
  __m256i inv = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), b), 23);
  if constexpr (TR::emax == 0)
    inv = _mm256_blendv_epi8(inv, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(b, _mm256_set1_epi32(254)));
  return _mm256_castsi256_ps(inv);
}

template <qj_dtype T, bool kBf16, bool kRceil>
QJ_AVX2 void quantize_avx2_r(const void* src, int64_t nb, uint8_t* elems, uint8_t* scales) {
  using TR = Tr<T>;
  const mx::ElemFormat& f = *mx::format(T);
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i vi[4], a[4];
    for (int k = 0; k < 4; ++k) {
      vi[k] = _mm256_castps_si256(load8<kBf16>(src, b * 32 + 8 * k));
      a[k] = _mm256_and_si256(vi[k], absmask);
    }
    // The block's amax: under FLOOR in every lane, for the vector scale steps; under RCEIL in a
    // general register, for the scalar rule (see scale_floor8).
    __m256i m8 = _mm256_max_epu32(_mm256_max_epu32(a[0], a[1]), _mm256_max_epu32(a[2], a[3]));
    __m128i m;
    if constexpr (kRceil) {
      m = _mm_max_epu32(_mm256_castsi256_si128(m8), _mm256_extracti128_si256(m8, 1));
      m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
      m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
    } else {
      m8 = _mm256_max_epu32(m8, _mm256_permute2x128_si256(m8, m8, 1));
      m8 = _mm256_max_epu32(m8, _mm256_shuffle_epi32(m8, 0x4e));
      m8 = _mm256_max_epu32(m8, _mm256_shuffle_epi32(m8, 0xb1));
      m = _mm256_castsi256_si128(m8);
    }
    const uint32_t amax = static_cast<uint32_t>(_mm_cvtsi128_si32(m));
    uint8_t* dst = elems + b * TR::bytes;
    if (amax >= 0x7f800000u) {
      scales[b] = mx::kScaleNaN;
      std::memset(dst, 0, TR::bytes);
      continue;
    }
    __m256 inv;
    if constexpr (kRceil) {
      const uint8_t s = mx::scale_from_amax(f, amax, QJ_ROUND_RCEIL);
      scales[b] = s;
      inv = _mm256_set1_ps(mx::e8m0_inverse_f32(s));
    } else {
      const __m256i sv = scale_floor8<TR>(m8);
      scales[b] = static_cast<uint8_t>(_mm_cvtsi128_si32(_mm256_castsi256_si128(sv)));
      inv = inverse_scale8<TR>(sv);
    }
    __m256i c[4];
    for (int k = 0; k < 4; ++k) c[k] = encode8<TR>(vi[k], a[k], inv);
    // dwords -> bytes in element order (pack works per 128-bit lane, the permute undoes it).
    const __m256i p01 = _mm256_packs_epi32(c[0], c[1]);
    const __m256i p23 = _mm256_packs_epi32(c[2], c[3]);
    __m256i p = TR::is_int ? _mm256_packs_epi16(p01, p23) : _mm256_packus_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    store_block<TR::bits>(p, dst);
  }
}

template <qj_dtype T, bool kBf16>
QJ_AVX2 void quantize_avx2_k(qj_rounding r, const void* src, int64_t nb, uint8_t* elems, uint8_t* scales) {
  if (r == QJ_ROUND_RCEIL) quantize_avx2_r<T, kBf16, true>(src, nb, elems, scales);
  else quantize_avx2_r<T, kBf16, false>(src, nb, elems, scales);
}

// 8 byte codes (low 64 bits of c8) -> 8 values times x.
template <qj_dtype T>
QJ_AVX2 inline __m256 decode8(__m128i c8, __m256 x, __m256 tab8) {
  using TR = Tr<T>;
  __m256 v;
  if constexpr (T == QJ_MXINT8) {
    v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c8)), _mm256_set1_ps(1.0f / 64.0f));
  } else if constexpr (T == QJ_MXFP8_E5M2) {
    v = _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(c8), 8));  // E5M2 = top byte of fp16
  } else {
    const __m256i c = _mm256_cvtepu8_epi32(c8);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(1 << (TR::bits - 1))), 32 - TR::bits);
    if constexpr (T == QJ_MXFP4_E2M1) {
      v = _mm256_permutevar8x32_ps(tab8, c);  // magnitude from the low 3 bits
    } else {
      const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32((1 << (TR::bits - 1)) - 1));
      v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 23 - TR::mbits)),
                        _mm256_castsi256_ps(_mm256_set1_epi32((254 - TR::bias) << 23)));  // 2^(127-bias)
      if constexpr (T == QJ_MXFP8_E4M3) {
        const __m256i nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
        v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), _mm256_castsi256_ps(nan));
      }
    }
    v = _mm256_or_ps(v, _mm256_castsi256_ps(sign));
  }
  return _mm256_mul_ps(v, x);
}

QJ_AVX2 inline __m256i bf16_rne8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(q),
                                              _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

template <bool kBf16>
QJ_AVX2 inline void store16_avx2(void* dst, int64_t i, __m256 v0, __m256 v1) {
  if constexpr (kBf16) {
    __m256i p = _mm256_packus_epi32(bf16_rne8(v0), bf16_rne8(v1));
    p = _mm256_permute4x64_epi64(p, 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(dst) + i), p);
  } else {
    _mm256_storeu_ps(static_cast<float*>(dst) + i, v0);
    _mm256_storeu_ps(static_cast<float*>(dst) + i + 8, v1);
  }
}

template <qj_dtype T, bool kBf16>
QJ_AVX2 void dequantize_avx2_k(const uint8_t* elems, const uint8_t* scales, int64_t nb, void* dst) {
  using TR = Tr<T>;
  const __m256 tab8 = T == QJ_MXFP4_E2M1 ? _mm256_loadu_ps(mx::value_table(T)) : _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i c = load_block<TR::bits>(elems + b * TR::bytes);
    const __m256 x = _mm256_set1_ps(mx::e8m0_to_f32(scales[b]));
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    store16_avx2<kBf16>(dst, b * 32, decode8<T>(lo, x, tab8), decode8<T>(_mm_srli_si128(lo, 8), x, tab8));
    store16_avx2<kBf16>(dst, b * 32 + 16, decode8<T>(hi, x, tab8), decode8<T>(_mm_srli_si128(hi, 8), x, tab8));
  }
}

// ======================================= AVX-512 =======================================

template <bool kBf16>
QJ_AVX512 inline __m512i load16(const void* src, int64_t i) {
  if constexpr (kBf16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(src) + i));
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
  } else {
    return _mm512_loadu_si512(static_cast<const float*>(src) + i);
  }
}

template <class TR>
QJ_AVX512 inline __m512i encode16(__m512i vi, __m512i a, __m512 inv) {
  if constexpr (TR::is_int) {
    const __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_castsi512_ps(vi), inv), _mm512_set1_ps(64.0f));
    // The top clamp to 127 is the saturating vpmovsdb of store_codes.
    return _mm512_max_epi32(_mm512_cvtps_epi32(y), _mm512_set1_epi32(-127));
  } else {
    const __m512 y = _mm512_mul_ps(_mm512_castsi512_ps(a), inv);
    const __m512i yb = _mm512_castps_si512(y);
    const __m512i ep = _mm512_max_epi32(_mm512_srli_epi32(yb, 23), _mm512_set1_epi32(128 - TR::bias));
    const __m512i cb = _mm512_slli_epi32(_mm512_add_epi32(ep, _mm512_set1_epi32(23 - TR::mbits)), 23);
    const __m512 sum = _mm512_add_ps(y, _mm512_castsi512_ps(cb));
    __m512i code = _mm512_sub_epi32(_mm512_castps_si512(sum), cb);
    code = _mm512_add_epi32(code, _mm512_slli_epi32(_mm512_sub_epi32(ep, _mm512_set1_epi32(128 - TR::bias)), TR::mbits));
    code = _mm512_min_epu32(code, _mm512_set1_epi32(TR::max_code));
    // code | (sign of v moved to bit bits-1): A | (B & C) = ternlog 0xF8.
    return _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(vi, 32 - TR::bits),
                                     _mm512_set1_epi32(1 << (TR::bits - 1)), 0xf8);
  }
}

// Two vectors of dword codes -> one SPLIT block.
template <class TR>
QJ_AVX512 inline void store_codes(__m512i c0, __m512i c1, uint8_t* dst) {
  if constexpr (TR::bits == 4) {
    // qword j holds codes 2j (low dword) and 2j+1 (high dword): fold the high one to bits 4..7.
    const __m128i b0 = _mm512_cvtepi64_epi8(_mm512_or_si512(c0, _mm512_srli_epi64(c0, 28)));
    const __m128i b1 = _mm512_cvtepi64_epi8(_mm512_or_si512(c1, _mm512_srli_epi64(c1, 28)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi64(b0, b1));
  } else if constexpr (TR::is_int) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtsepi32_epi8(c0));  // saturates at 127
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm512_cvtsepi32_epi8(c1));
  } else if constexpr (TR::bits == 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(c0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm512_cvtepi32_epi8(c1));
  } else {
    store_block<6>(_mm256_set_m128i(_mm512_cvtepi32_epi8(c1), _mm512_cvtepi32_epi8(c0)), dst);
  }
}

// One block, scale through the scalar rule (also the path of NaN/Inf blocks).
template <class TR, bool kBf16>
QJ_AVX512 inline void quantize_one_avx512(const mx::ElemFormat& f, qj_rounding r, const void* src, int64_t b,
                                          uint8_t* elems, uint8_t* scales) {
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
  const __m512i v0 = load16<kBf16>(src, b * 32), v1 = load16<kBf16>(src, b * 32 + 16);
  const __m512i a0 = _mm512_and_si512(v0, absmask), a1 = _mm512_and_si512(v1, absmask);
  const uint32_t amax = _mm512_reduce_max_epu32(_mm512_max_epu32(a0, a1));
  const uint8_t s = mx::scale_from_amax(f, amax, r);
  scales[b] = s;
  uint8_t* dst = elems + b * TR::bytes;
  if (s == mx::kScaleNaN) {
    std::memset(dst, 0, TR::bytes);
    return;
  }
  const __m512 inv = _mm512_set1_ps(mx::e8m0_inverse_f32(s));
  store_codes<TR>(encode16<TR>(v0, a0, inv), encode16<TR>(v1, a1, inv), dst);
}

// mx::scale_from_amax for finite amax, on every lane (the vector twin; same integer steps).
template <class TR>
QJ_AVX512 inline __m512i scale_vec(__m512i amax, bool rceil) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i b = _mm512_max_epi32(_mm512_sub_epi32(_mm512_srli_epi32(amax, 23), _mm512_set1_epi32(TR::emax)), zero);
  if (rceil) {
    const __m512i te = _mm512_add_epi32(b, _mm512_set1_epi32(TR::emax));
    __m512i t = _mm512_or_si512(_mm512_slli_epi32(te, 23), _mm512_set1_epi32(TR::max_mant));
    if constexpr (TR::emax == 0)  // threshold exponent field 0: the subnormal max_value * 2^-127
      t = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(te, zero), t,
                                  _mm512_set1_epi32((TR::max_mant | 0x800000) >> 1));
    b = _mm512_mask_add_epi32(b, _mm512_cmpgt_epu32_mask(amax, t), b, _mm512_set1_epi32(1));
    b = _mm512_min_epi32(b, _mm512_set1_epi32(254 - TR::emax));
  }
  return b;
}

template <int K>
QJ_AVX512 inline __m512 lane_broadcast(__m512i v) {
  return _mm512_castsi512_ps(_mm512_shuffle_i32x4(v, v, K * 0x55));
}

// Four blocks per step: their maxima by a transpose-reduce (every lane of 128-bit lane k ends up
// holding block k's amax), the scale rule in-vector, one lane broadcast per block.
template <qj_dtype T, bool kBf16>
QJ_AVX512 void quantize_avx512_k(qj_rounding r, const void* src, int64_t nb, uint8_t* elems, uint8_t* scales) {
  using TR = Tr<T>;
  const mx::ElemFormat& f = *mx::format(T);
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
  const bool rceil = r == QJ_ROUND_RCEIL;
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    __m512i v[8], a[8];
    for (int k = 0; k < 8; ++k) {
      v[k] = load16<kBf16>(src, b * 32 + 16 * k);
      a[k] = _mm512_and_si512(v[k], absmask);
    }
    const __m512i m0 = _mm512_max_epu32(a[0], a[1]), m1 = _mm512_max_epu32(a[2], a[3]);
    const __m512i m2 = _mm512_max_epu32(a[4], a[5]), m3 = _mm512_max_epu32(a[6], a[7]);
    const __m512i x01 = _mm512_max_epu32(_mm512_shuffle_i32x4(m0, m1, 0x44), _mm512_shuffle_i32x4(m0, m1, 0xee));
    const __m512i x23 = _mm512_max_epu32(_mm512_shuffle_i32x4(m2, m3, 0x44), _mm512_shuffle_i32x4(m2, m3, 0xee));
    __m512i y = _mm512_max_epu32(_mm512_shuffle_i32x4(x01, x23, 0x88), _mm512_shuffle_i32x4(x01, x23, 0xdd));
    y = _mm512_max_epu32(y, _mm512_shuffle_epi32(y, _MM_PERM_BADC));
    y = _mm512_max_epu32(y, _mm512_shuffle_epi32(y, _MM_PERM_CDAB));
    if (_mm512_cmpge_epu32_mask(y, _mm512_set1_epi32(0x7f800000))) {  // NaN/Inf somewhere: rare
      for (int k = 0; k < 4; ++k) quantize_one_avx512<TR, kBf16>(f, r, src, b + k, elems, scales);
      continue;
    }
    const __m512i sb = scale_vec<TR>(y, rceil);
    const __m512i inv = _mm512_max_epi32(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(254), sb), 23),
                                         _mm512_set1_epi32(0x00400000));  // 2^(127-s); s = 254: 2^-127
    const __m128i s16 = _mm512_cvtepi32_epi8(sb);
    const int s4 = _mm_cvtsi128_si32(_mm_shuffle_epi8(s16, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1,
                                                                          -1, -1, -1, -1, -1)));
    std::memcpy(scales + b, &s4, 4);
    uint8_t* dst = elems + b * TR::bytes;
    __m512 ik = lane_broadcast<0>(inv);
    store_codes<TR>(encode16<TR>(v[0], a[0], ik), encode16<TR>(v[1], a[1], ik), dst);
    ik = lane_broadcast<1>(inv);
    store_codes<TR>(encode16<TR>(v[2], a[2], ik), encode16<TR>(v[3], a[3], ik), dst + TR::bytes);
    ik = lane_broadcast<2>(inv);
    store_codes<TR>(encode16<TR>(v[4], a[4], ik), encode16<TR>(v[5], a[5], ik), dst + 2 * TR::bytes);
    ik = lane_broadcast<3>(inv);
    store_codes<TR>(encode16<TR>(v[6], a[6], ik), encode16<TR>(v[7], a[7], ik), dst + 3 * TR::bytes);
  }
  for (; b < nb; ++b) quantize_one_avx512<TR, kBf16>(f, r, src, b, elems, scales);
}

template <qj_dtype T>
QJ_AVX512 inline __m512 decode16(__m128i c16, __m512 x, __m512 tab16) {
  using TR = Tr<T>;
  __m512 v;
  if constexpr (T == QJ_MXINT8) {
    v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c16)), _mm512_set1_ps(1.0f / 64.0f));
  } else if constexpr (T == QJ_MXFP8_E5M2) {
    v = _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(c16), 8));
  } else if constexpr (T == QJ_MXFP4_E2M1) {
    v = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c16), tab16);  // full 16-entry table, signed
  } else {
    const __m512i c = _mm512_cvtepu8_epi32(c16);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(1 << (TR::bits - 1))), 32 - TR::bits);
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32((1 << (TR::bits - 1)) - 1));
    v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 23 - TR::mbits)),
                      _mm512_castsi512_ps(_mm512_set1_epi32((254 - TR::bias) << 23)));
    if constexpr (T == QJ_MXFP8_E4M3) {
      const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
      v = _mm512_mask_blend_ps(nan, v, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
    }
    v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
  }
  return _mm512_mul_ps(v, x);
}

template <bool kBf16>
QJ_AVX512 inline void store16(void* dst, int64_t i, __m512 v) {
  if constexpr (kBf16) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(dst) + i), _mm512_cvtepi32_epi16(r));
  } else {
    _mm512_storeu_ps(static_cast<float*>(dst) + i, v);
  }
}

template <qj_dtype T, bool kBf16>
QJ_AVX512 void dequantize_avx512_k(const uint8_t* elems, const uint8_t* scales, int64_t nb, void* dst) {
  using TR = Tr<T>;
  const __m512 tab16 = T == QJ_MXFP4_E2M1 ? _mm512_loadu_ps(mx::value_table(T)) : _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i c = load_block<TR::bits>(elems + b * TR::bytes);
    const __m512 x = _mm512_set1_ps(mx::e8m0_to_f32(scales[b]));
    store16<kBf16>(dst, b * 32, decode16<T>(_mm256_castsi256_si128(c), x, tab16));
    store16<kBf16>(dst, b * 32 + 16, decode16<T>(_mm256_extracti128_si256(c, 1), x, tab16));
  }
}

// ---- BDR (AVX-512): one zmm per 16-value block ----

// BDR field streams. Codes are joined in pairs (pair j = code 2j | code 2j+1 << (M+1)); on
// decode, 64-bit mask-and-shift steps spread the packed pairs back apart.
// MX4: 48 bits -> 8 pairs of 6 bits, one per byte.
inline uint64_t spread6(uint64_t x) {
  x = (x & 0x0000000000ffffffull) | ((x & 0x0000ffffff000000ull) << 8);
  x = (x & 0x00000fff00000fffull) | ((x & 0x00fff00000fff000ull) << 4);
  return (x & 0x003f003f003f003full) | ((x & 0x0fc00fc00fc00fc0ull) << 2);
}
// MX6: 40 bits -> 4 pairs of 10 bits, one per 16-bit word.
inline uint64_t spread10(uint64_t x) {
  x = (x & 0x00000000000fffffull) | ((x & 0x000000fffff00000ull) << 12);
  return (x & 0x000003ff000003ffull) | ((x & 0x000ffc00000ffc00ull) << 6);
}

inline uint64_t load_u64(const uint8_t* p) {
  uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

// Field bytes of a whole block (header included: the 8-byte loads stay inside the block and avoid
// the store-forwarding stall of assembling 5- or 6-byte pieces): MX4 -> 8 pair bytes; MX6 -> two
// words of 4 pair words.
inline uint64_t mx4_pairs(const uint8_t* block) { return spread6(load_u64(block) >> 16); }
inline void mx6_pairs(const uint8_t* block, uint64_t h[2]) {
  h[0] = spread10((load_u64(block) >> 16) & 0xffffffffffull);  // field bytes 2..6
  h[1] = spread10(load_u64(block + 4) >> 24);                   // field bytes 7..11
}

// 16 codes in dword lanes -> the field stream of 2(M+1) bytes at dst. MX6 / MX4: the codes as
// bytes (vpmovdb), then one pext per 8 codes packs their M + 1 low bits LSB-first (BMI2, which
// every AVX-512 CPU has and the AVX-512 tier requires; fast on all of them). The stores stay
// inside the block's field bytes.
template <int M>
QJ_AVX512 inline void bdr_pack_codes(__m512i code, uint8_t* dst) {
  const __m128i c8 = _mm512_cvtepi32_epi8(code);
  if constexpr (M == 7) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), c8);
  } else {
    constexpr uint64_t kBits = 0x0101010101010101ull * ((1u << (M + 1)) - 1);
    constexpr int kHalf = 8 * (M + 1);  // bits of 8 codes: 40 (MX6), 24 (MX4)
    const uint64_t lo = _pext_u64(static_cast<uint64_t>(_mm_cvtsi128_si64(c8)), kBits);
    const uint64_t hi = _pext_u64(static_cast<uint64_t>(_mm_extract_epi64(c8, 1)), kBits);
    const uint64_t w = lo | hi << kHalf;
    if constexpr (M == 4) {  // 80 bits: 8 + 2 bytes
      const uint16_t t = static_cast<uint16_t>(hi >> (64 - kHalf));
      std::memcpy(dst, &w, 8);
      std::memcpy(dst + 8, &t, 2);
    } else {  // 48 bits: 6 bytes
      static_assert(M == 2);
      std::memcpy(dst, &w, 6);
    }
  }
}

// One whole block -> its 16 codes in dword lanes.
template <int M>
QJ_AVX512 inline __m512i bdr_unpack_codes(const uint8_t* block) {
  if constexpr (M == 7) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
  } else {
    __m512i q;
    if constexpr (M == 2) {
      q = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(static_cast<long long>(mx4_pairs(block))));
    } else {
      static_assert(M == 4);
      uint64_t h[2];
      mx6_pairs(block, h);
      q = _mm512_cvtepu16_epi64(_mm_set_epi64x(static_cast<long long>(h[1]), static_cast<long long>(h[0])));
    }
    constexpr int kMask = (1 << (M + 1)) - 1;
    return _mm512_or_si512(_mm512_and_si512(q, _mm512_set1_epi64(kMask)),
                           _mm512_slli_epi64(_mm512_and_si512(q, _mm512_set1_epi64(kMask << (M + 1))), 32 - (M + 1)));
  }
}

template <int M, bool kBf16>
QJ_AVX512 void bdr_quantize_avx512_k(const void* src, int64_t nb, uint8_t* blocks) {
  constexpr int kBytes = 2 + 2 * (M + 1);
  const __m512i one = _mm512_set1_epi32(1);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* dst = blocks + b * kBytes;
    const __m512i vi = load16<kBf16>(src, b * 16);
    const __m512i a = _mm512_and_si512(vi, _mm512_set1_epi32(0x7fffffff));
    const uint32_t amax = _mm512_reduce_max_epu32(a);
    if (amax >= 0x7f800000u) {
      std::memset(dst, 0, kBytes);
      dst[0] = bdr::kExpNaN;
      continue;
    }
    const int e = static_cast<int>(amax >> 23);
    const __m512i ev = _mm512_set1_epi32(e);
    const __m512i pair_max = _mm512_max_epu32(a, _mm512_shuffle_epi32(a, _MM_PERM_CDAB));
    const __mmask16 mu_mask = _mm512_cmplt_epi32_mask(_mm512_srli_epi32(pair_max, 23), ev);
    const __m512i mu = _mm512_maskz_mov_epi32(mu_mask, one);
    // Same integer RNE as the scalar codec: M = RNE(sig >> sh), sh = 24 - m + E - max(ef, 1) - mu.
    const __m512i ef = _mm512_srli_epi32(a, 23);
    const __mmask16 normal = _mm512_test_epi32_mask(ef, ef);
    const __m512i mant = _mm512_and_si512(a, _mm512_set1_epi32(0x7fffff));
    const __m512i sig = _mm512_mask_or_epi32(mant, normal, mant, _mm512_set1_epi32(0x800000));
    const __m512i efp = _mm512_max_epi32(ef, one);
    const __m512i sh = _mm512_sub_epi32(_mm512_sub_epi32(_mm512_add_epi32(ev, _mm512_set1_epi32(24 - M)), efp), mu);
    const __m512i half_m1 = _mm512_sub_epi32(_mm512_sllv_epi32(one, _mm512_sub_epi32(sh, one)), one);
    const __m512i lsb = _mm512_and_si512(_mm512_srlv_epi32(sig, sh), one);
    __m512i mag = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(sig, half_m1), lsb), sh);
    mag = _mm512_min_epu32(mag, _mm512_set1_epi32((1 << M) - 1));
    const __m512i code = _mm512_or_si512(mag, _mm512_slli_epi32(_mm512_srli_epi32(vi, 31), M));
    dst[0] = static_cast<uint8_t>(e);
    dst[1] = static_cast<uint8_t>(_pext_u32(mu_mask, 0x5555u));  // bit 2j of the lane mask: pair j
    bdr_pack_codes<M>(code, dst + 2);
  }
}

template <int M, bool kBf16>
QJ_AVX512 void bdr_dequantize_avx512_k(const uint8_t* blocks, int64_t nb, void* dst) {
  constexpr int kBytes = 2 + 2 * (M + 1);
  // Lane i belongs to pair i/2: the mu bit index per lane.
  const __m512i pair_idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* src = blocks + b * kBytes;
    if (src[0] == bdr::kExpNaN) {
      store16<kBf16>(dst, b * 16, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
      continue;
    }
    const __m512i code = bdr_unpack_codes<M>(src);
    const __m512i mu = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(src[1]), pair_idx), _mm512_set1_epi32(1));
    // value = M * 2^(E - 127 - mu + 1 - m): vscalefps is exact here (results >= 2^-149).
    const __m512i step = _mm512_sub_epi32(_mm512_set1_epi32(static_cast<int>(src[0]) - 126 - M), mu);
    const __m512 mag = _mm512_cvtepi32_ps(_mm512_and_si512(code, _mm512_set1_epi32((1 << M) - 1)));
    __m512 v = _mm512_scalef_ps(mag, _mm512_cvtepi32_ps(step));
    v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v),
                                            _mm512_slli_epi32(_mm512_srli_epi32(code, M), 31)));
    store16<kBf16>(dst, b * 16, v);
  }
}

// ---- BDR (AVX2): two ymm per 16-value block; bit-identical to the scalar codec ----

// Blocks of E < M: 2^(126 - E + M + mu) is then no normal fp32 for mu = 1 (biased exponent
// 253 + M + mu - E above 254), so their values are first multiplied by 2^64 (exact, also for fp32
// subnormals) and the power of two divided by it.
template <int M>
constexpr uint32_t kBdrPrescaleBelow = static_cast<uint32_t>(M) << 23;

// The scalar codec rounds sig >> sh to nearest even, with |v| = sig * 2^(max(ef, 1) - 150) and
// sh = E + 24 - M - max(ef, 1) - mu. That is |v| * 2^(126 - E + M + mu) exactly: a power-of-two
// multiply whose result is either far above the subnormal range or below 1/2, where both round
// to 0. So one fp32 multiply and cvtps2dq (round to nearest even under the default MXCSR that
// the driver sets) give the same magnitude. a = |v| (times 2^64 in blocks below
// kBdrPrescaleBelow), base = the power of two's bits without mu, mu_mask = -1 where mu = 1.
QJ_AVX2 inline __m256i bdr_magnitudes(__m256 a, __m256i base, __m256i mu_mask) {
  const __m256i pow2 = _mm256_add_epi32(base, _mm256_and_si256(mu_mask, _mm256_set1_epi32(1 << 23)));
  return _mm256_cvtps_epi32(_mm256_mul_ps(a, _mm256_castsi256_ps(pow2)));
}

// MX6 / MX4: the eight pair words pw (pair j = code 2j | code 2j+1 << (M+1), 2(M+1) bits) and the
// header -> the whole block of 2 + 2(M+1) bytes at dst, without writing past it. Pairs join in
// dwords of D = 4(M+1) bits (vpmaddwd), dwords in qwords of 2D bits, and one vpshufb puts the
// qwords' M+1 bytes each after the two header bytes.
template <int M>
QJ_AVX2 inline void bdr_store_block(__m128i pw, uint32_t header, uint8_t* dst) {
  constexpr int kD = 4 * (M + 1), kN = M + 1;
  const __m128i d = _mm_madd_epi16(pw, _mm_set1_epi32(1 << (16 + 2 * (M + 1)) | 1));
  const __m128i q = _mm_or_si128(_mm_blend_epi32(d, _mm_setzero_si128(), 0xa),
                                 _mm_slli_epi64(_mm_srli_epi64(d, 32), kD));
  alignas(16) int8_t idx[16];
  for (int i = 0; i < 16; ++i) idx[i] = i < 2 ? -1 : i < 2 + kN ? i - 2 : i < 2 + 2 * kN ? 8 + i - 2 - kN : -1;
  const __m128i x = _mm_or_si128(_mm_shuffle_epi8(q, _mm_load_si128(reinterpret_cast<const __m128i*>(idx))),
                                 _mm_cvtsi32_si128(static_cast<int>(header)));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), x);
  if constexpr (M == 4) {
    const int tail = _mm_extract_epi32(x, 2);
    std::memcpy(dst + 8, &tail, 4);
  }
}

template <int M, bool kBf16>
QJ_AVX2 void bdr_quantize_avx2_k(const void* src, int64_t nb, uint8_t* blocks) {
  constexpr int kBytes = 2 + 2 * (M + 1);
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* dst = blocks + b * kBytes;
    __m256i vi[2], a[2];
    for (int k = 0; k < 2; ++k) {
      vi[k] = _mm256_castps_si256(load8<kBf16>(src, b * 16 + 8 * k));
      a[k] = _mm256_and_si256(vi[k], absmask);
    }
    // The block's amax in every lane (its exponent feeds the vector steps without a round trip
    // through a general register).
    __m256i m8 = _mm256_max_epu32(a[0], a[1]);
    m8 = _mm256_max_epu32(m8, _mm256_permute2x128_si256(m8, m8, 1));
    m8 = _mm256_max_epu32(m8, _mm256_shuffle_epi32(m8, 0x4e));
    m8 = _mm256_max_epu32(m8, _mm256_shuffle_epi32(m8, 0xb1));
    const uint32_t amax = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_castsi256_si128(m8)));
    if (amax >= 0x7f800000u) {
      std::memset(dst, 0, kBytes);
      dst[0] = bdr::kExpNaN;
      continue;
    }
    const __m256i ev = _mm256_srli_epi32(m8, 23);
    __m256i base = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(253 + M), ev), 23);
    __m256 mag_in[2] = {_mm256_castsi256_ps(a[0]), _mm256_castsi256_ps(a[1])};
    if (__builtin_expect(amax < kBdrPrescaleBelow<M>, 0)) {
      base = _mm256_sub_epi32(base, _mm256_set1_epi32(64 << 23));
      for (auto& x : mag_in) x = _mm256_mul_ps(x, _mm256_set1_ps(0x1p64f));
    }
    uint32_t mu_bits = 0;
    __m256i code[2];
    for (int k = 0; k < 2; ++k) {
      // Microexponent: the pair's exponent is below E (both lanes of a pair agree, so one bit per
      // qword lane is pair j's bit).
      const __m256i pair_max = _mm256_max_epu32(a[k], _mm256_shuffle_epi32(a[k], 0xb1));
      const __m256i mu_mask = _mm256_cmpgt_epi32(ev, _mm256_srli_epi32(pair_max, 23));
      mu_bits |= static_cast<uint32_t>(_mm256_movemask_pd(_mm256_castsi256_pd(mu_mask))) << (4 * k);
      const __m256i mag = _mm256_min_epu32(bdr_magnitudes(mag_in[k], base, mu_mask), _mm256_set1_epi32((1 << M) - 1));
      code[k] = _mm256_or_si256(mag, _mm256_slli_epi32(_mm256_srli_epi32(vi[k], 31), M));
    }
    const uint32_t header = amax >> 23 | mu_bits << 8;
    // The 16 codes as bytes (each below 2^(M+1) <= 256).
    __m256i p = _mm256_packus_epi32(code[0], code[1]);  // [c0 0-3, c1 0-3 | c0 4-7, c1 4-7]
    p = _mm256_permute4x64_epi64(p, 0xd8);              // c0 0-7, c1 0-7 (words)
    const __m128i c8 = _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    if constexpr (M == 7) {
      const uint16_t h16 = static_cast<uint16_t>(header);
      std::memcpy(dst, &h16, 2);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2), c8);
    } else {
      // Pair words (vpmaddubsw: exact, below 2^(2M+2) <= 1024).
      bdr_store_block<M>(_mm_maddubs_epi16(c8, _mm_set1_epi16(static_cast<short>((1 << (M + 1)) << 8 | 1))), header,
                         dst);
    }
  }
}

template <int M>
QJ_AVX2 inline void bdr_unpack_codes_avx2(const uint8_t* block, __m256i code[2]) {
  if constexpr (M == 7) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
    code[0] = _mm256_cvtepu8_epi32(x);
    code[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(x, 8));
  } else {
    __m256i q[2];
    if constexpr (M == 2) {
      const __m128i x = _mm_cvtsi64_si128(static_cast<long long>(mx4_pairs(block)));
      q[0] = _mm256_cvtepu8_epi64(x);
      q[1] = _mm256_cvtepu8_epi64(_mm_srli_si128(x, 4));
    } else {
      uint64_t h[2];
      mx6_pairs(block, h);
      q[0] = _mm256_cvtepu16_epi64(_mm_cvtsi64_si128(static_cast<long long>(h[0])));
      q[1] = _mm256_cvtepu16_epi64(_mm_cvtsi64_si128(static_cast<long long>(h[1])));
    }
    constexpr int kMask = (1 << (M + 1)) - 1;
    for (int k = 0; k < 2; ++k)
      code[k] = _mm256_or_si256(_mm256_and_si256(q[k], _mm256_set1_epi64x(kMask)),
                                _mm256_slli_epi64(_mm256_and_si256(q[k], _mm256_set1_epi64x(kMask << (M + 1))),
                                                  32 - (M + 1)));
  }
}

template <int M, bool kBf16>
QJ_AVX2 void bdr_dequantize_avx2_k(const uint8_t* blocks, int64_t nb, void* dst) {
  constexpr int kBytes = 2 + 2 * (M + 1);
  const __m256i pair_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  const __m256i pair_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* src = blocks + b * kBytes;
    if (src[0] == bdr::kExpNaN) {
      const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
      store16_avx2<kBf16>(dst, b * 16, nan, nan);
      continue;
    }
    __m256i code[2];
    bdr_unpack_codes_avx2<M>(src, code);
    const __m256i mub = _mm256_set1_epi32(src[1]);
    const __m256i ebase = _mm256_set1_epi32(static_cast<int>(src[0]) - 126 - M);
    __m256 v[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i mu = _mm256_and_si256(_mm256_srlv_epi32(mub, k ? pair_hi : pair_lo), _mm256_set1_epi32(1));
      // M * 2^step, step in [-134, 126], as two exact multiplies by normal powers of two.
      const __m256i step = _mm256_sub_epi32(ebase, mu);
      const __m256i h1 = _mm256_srai_epi32(step, 1), h2 = _mm256_sub_epi32(step, h1);
      const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, _mm256_set1_epi32(127)), 23));
      const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, _mm256_set1_epi32(127)), 23));
      const __m256 mag = _mm256_cvtepi32_ps(_mm256_and_si256(code[k], _mm256_set1_epi32((1 << M) - 1)));
      const __m256 val = _mm256_mul_ps(_mm256_mul_ps(mag, p1), p2);
      v[k] = _mm256_or_ps(val, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(code[k], M), 31)));
    }
    store16_avx2<kBf16>(dst, b * 16, v[0], v[1]);
  }
}

}  // namespace

// ---- dispatch tables ----

#define QJ_MXK_OCP_SWITCH(KERNEL)                                                       \
  switch (t) {                                                                          \
    case QJ_MXFP8_E4M3: return bf16 ? &KERNEL<QJ_MXFP8_E4M3, true> : &KERNEL<QJ_MXFP8_E4M3, false>; \
    case QJ_MXFP8_E5M2: return bf16 ? &KERNEL<QJ_MXFP8_E5M2, true> : &KERNEL<QJ_MXFP8_E5M2, false>; \
    case QJ_MXFP6_E3M2: return bf16 ? &KERNEL<QJ_MXFP6_E3M2, true> : &KERNEL<QJ_MXFP6_E3M2, false>; \
    case QJ_MXFP6_E2M3: return bf16 ? &KERNEL<QJ_MXFP6_E2M3, true> : &KERNEL<QJ_MXFP6_E2M3, false>; \
    case QJ_MXFP4_E2M1: return bf16 ? &KERNEL<QJ_MXFP4_E2M1, true> : &KERNEL<QJ_MXFP4_E2M1, false>; \
    case QJ_MXINT8: return bf16 ? &KERNEL<QJ_MXINT8, true> : &KERNEL<QJ_MXINT8, false>;             \
    default: return nullptr;                                                            \
  }

#define QJ_MXK_BDR_SWITCH(KERNEL)                                           \
  switch (t) {                                                              \
    case QJ_BDR_MX9: return bf16 ? &KERNEL<7, true> : &KERNEL<7, false>;    \
    case QJ_BDR_MX6: return bf16 ? &KERNEL<4, true> : &KERNEL<4, false>;    \
    case QJ_BDR_MX4: return bf16 ? &KERNEL<2, true> : &KERNEL<2, false>;    \
    default: return nullptr;                                                \
  }

QuantizeFn quantize_avx512(qj_dtype t, bool bf16) { QJ_MXK_OCP_SWITCH(quantize_avx512_k) }
DequantizeFn dequantize_avx512(qj_dtype t, bool bf16) { QJ_MXK_OCP_SWITCH(dequantize_avx512_k) }
QuantizeFn quantize_avx2(qj_dtype t, bool bf16) { QJ_MXK_OCP_SWITCH(quantize_avx2_k) }
DequantizeFn dequantize_avx2(qj_dtype t, bool bf16) { QJ_MXK_OCP_SWITCH(dequantize_avx2_k) }
BdrQuantizeFn bdr_quantize_avx512(qj_dtype t, bool bf16) { QJ_MXK_BDR_SWITCH(bdr_quantize_avx512_k) }
BdrDequantizeFn bdr_dequantize_avx512(qj_dtype t, bool bf16) { QJ_MXK_BDR_SWITCH(bdr_dequantize_avx512_k) }
BdrQuantizeFn bdr_quantize_avx2(qj_dtype t, bool bf16) { QJ_MXK_BDR_SWITCH(bdr_quantize_avx2_k) }
BdrDequantizeFn bdr_dequantize_avx2(qj_dtype t, bool bf16) { QJ_MXK_BDR_SWITCH(bdr_dequantize_avx2_k) }

}  // namespace qj::mxk
