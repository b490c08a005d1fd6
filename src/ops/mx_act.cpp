// MX activations for GEMM: decoders of SPLIT MX rows to integer forms / fp32, the A packing of
// MX x MX GEMM and its argument checks (see mx_act.h).
#include "src/ops/mx_act.h"

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "src/core/isa.h"
#include "src/core/status.h"
#include "src/formats/mx.h"
#include "src/ops/mx_convert.h"

namespace qj {

bool mx_act_type(int32_t t) {
  return t == QJ_MXFP8_E4M3 || t == QJ_MXFP8_E5M2 || t == QJ_MXFP6_E3M2 || t == QJ_MXFP6_E2M3 ||
         t == QJ_MXFP4_E2M1 || t == QJ_MXINT8;
}

bool mx_act_int8_type(qj_dtype t) {
  return t == QJ_MXFP4_E2M1 || t == QJ_MXFP6_E2M3 || t == QJ_MXINT8;
}

namespace {

inline int32_t int8_form(qj_dtype t, uint8_t c) {
  switch (t) {
    case QJ_MXFP4_E2M1: return mx::fp4_int_table()[c & 15];
    case QJ_MXFP6_E2M3: return mx::e2m3_int_table()[c & 63];
    default: return static_cast<int8_t>(c);
  }
}

// ---- scalar (the definition every vector path matches byte for byte) ----
void dec8_scalar(qj_dtype t, const uint8_t* e, int64_t nb, int8_t* d, int32_t* bs) {
  const mx::ElemFormat& f = *mx::format(t);
  uint8_t c[mx::kBlock];
  for (int64_t b = 0; b < nb; ++b) {
    mx::unpack_block(f, e + b * f.block_bytes, c);
    int32_t sum = 0;
    for (int i = 0; i < mx::kBlock; ++i) {
      const int32_t v = int8_form(t, c[i]);
      d[b * mx::kBlock + i] = static_cast<int8_t>(v);
      sum += v;
    }
    if (bs) bs[b] = sum;
  }
}

// ---- AVX2 ----
#define QJ_AVX2 __attribute__((target("avx2")))
#define QJ_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))
#define QJ_VBMI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))

// Sum of the 32 int8 of q (u8 ones x s8 pairs: |pair| <= 256, exact).
QJ_AVX2 inline int32_t sum32_avx2(__m256i q) {
  const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
  const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
  return _mm_cvtsi128_si32(x);
}

// FP4: 16 bytes (low nibble = even element) -> 32 codes -> vpshufb LUT to 2v.
QJ_AVX2 void dec8_fp4_avx2(const uint8_t* e, int64_t nb, int8_t* d, int32_t* bs) {
  const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mx::fp4_int_table()));
  const __m128i m = _mm_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + b * 16));
    const __m128i lo = _mm_and_si128(x, m), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    const __m128i q0 = _mm_shuffle_epi8(lut, _mm_unpacklo_epi8(lo, hi));
    const __m128i q1 = _mm_shuffle_epi8(lut, _mm_unpackhi_epi8(lo, hi));
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + b * 32), q);
    if (bs) bs[b] = sum32_avx2(q);
  }
}

QJ_AVX2 void dec8_int8_avx2(const uint8_t* e, int64_t nb, int8_t* d, int32_t* bs) {
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + b * 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + b * 32), q);
    if (bs) bs[b] = sum32_avx2(q);
  }
}

// FP6: 24 bytes, LSB-first 6-bit stream -> 32 codes, one per byte. Lane 0 takes bytes 0..11
// (codes 0..15), lane 1 bytes 12..23 (loaded from e + 8, so nothing past the block is read);
// each dword gets 3 bytes = 4 codes, spread to one per byte with shifts and masks.
QJ_AVX2 inline __m256i fp6_codes_avx2(const uint8_t* e) {
  const __m256i v = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 8)), 1);
  const __m256i shuf = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,  //
                                        4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1);
  const __m256i w = _mm256_shuffle_epi8(v, shuf);
  __m256i c = _mm256_and_si256(w, _mm256_set1_epi32(0x3f));
  c = _mm256_or_si256(c, _mm256_and_si256(_mm256_slli_epi32(w, 2), _mm256_set1_epi32(0x3f00)));
  c = _mm256_or_si256(c, _mm256_and_si256(_mm256_slli_epi32(w, 4), _mm256_set1_epi32(0x3f0000)));
  c = _mm256_or_si256(c, _mm256_and_si256(_mm256_slli_epi32(w, 6), _mm256_set1_epi32(0x3f000000)));
  return c;
}

// E2M3 8v: magnitude (5 bits) by two 16-entry vpshufb tables, then the sign (bit 5) applied.
QJ_AVX2 void dec8_e2m3_avx2(const uint8_t* e, int64_t nb, int8_t* d, int32_t* bs) {
  const int8_t* tab = mx::e2m3_int_table();
  const __m256i lut0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tab)));
  const __m256i lut1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tab + 16)));
  const __m256i m1f = _mm256_set1_epi8(0x1f), b4 = _mm256_set1_epi8(0x10), b5 = _mm256_set1_epi8(0x20);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i c = fp6_codes_avx2(e + b * 24);
    const __m256i mag = _mm256_and_si256(c, m1f);
    const __m256i sel = _mm256_cmpeq_epi8(_mm256_and_si256(mag, b4), b4);
    const __m256i t = _mm256_blendv_epi8(_mm256_shuffle_epi8(lut0, mag), _mm256_shuffle_epi8(lut1, mag), sel);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(c, b5), b5);
    const __m256i q = _mm256_sub_epi8(_mm256_xor_si256(t, neg), neg);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + b * 32), q);
    if (bs) bs[b] = sum32_avx2(q);
  }
}

// ---- AVX-512 ----
// FP4, four blocks per zmm: per 128-bit lane j (block j) the unpacks give elements 0..15 (lo) and
// 16..31 (hi); vpermt2q puts each block's two halves next to each other.
QJ_AVX512 void dec8_fp4_avx512(const uint8_t* e, int64_t nb, int8_t* d, int32_t* bs) {
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mx::fp4_int_table())));
  const __m512i m = _mm512_set1_epi8(0x0f), ones = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1);
  const __m512i i0 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), i1 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const __m512i x = _mm512_loadu_si512(e + b * 16);
    const __m512i lo = _mm512_and_si512(x, m), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m);
    const __m512i l = _mm512_shuffle_epi8(lut, _mm512_unpacklo_epi8(lo, hi));
    const __m512i h = _mm512_shuffle_epi8(lut, _mm512_unpackhi_epi8(lo, hi));
    const __m512i q0 = _mm512_permutex2var_epi64(l, i0, h), q1 = _mm512_permutex2var_epi64(l, i1, h);
    _mm512_storeu_si512(d + b * 32, q0);
    _mm512_storeu_si512(d + b * 32 + 64, q1);
    if (bs) {
      const __m512i s0 = _mm512_madd_epi16(_mm512_maddubs_epi16(ones, q0), ones16);
      const __m512i s1 = _mm512_madd_epi16(_mm512_maddubs_epi16(ones, q1), ones16);
      bs[b] = _mm512_mask_reduce_add_epi32(0x00ff, s0);
      bs[b + 1] = _mm512_mask_reduce_add_epi32(0xff00, s0);
      bs[b + 2] = _mm512_mask_reduce_add_epi32(0x00ff, s1);
      bs[b + 3] = _mm512_mask_reduce_add_epi32(0xff00, s1);
    }
  }
  if (b < nb) dec8_fp4_avx2(e + b * 16, nb - b, d + b * 32, bs ? bs + b : nullptr);
}

QJ_AVX512 void dec8_int8_avx512(const uint8_t* e, int64_t nb, int8_t* d, int32_t* bs) {
  const __m512i ones = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1);
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i q = _mm512_loadu_si512(e + b * 32);
    _mm512_storeu_si512(d + b * 32, q);
    if (bs) {
      const __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(ones, q), ones16);
      bs[b] = _mm512_mask_reduce_add_epi32(0x00ff, s);
      bs[b + 1] = _mm512_mask_reduce_add_epi32(0xff00, s);
    }
  }
  if (b < nb) dec8_int8_avx2(e + b * 32, nb - b, d + b * 32, bs ? bs + b : nullptr);
}

// E2M3 with VBMI: the whole signed 64-entry table in one vpermt2b (code bit 5 picks the half).
QJ_VBMI void dec8_e2m3_vbmi(const uint8_t* e, int64_t nb, int8_t* d, int32_t* bs) {
  const int8_t* tab = mx::e2m3_int_table();
  const __m256i t0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab));
  const __m256i t1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab + 32));
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i q = _mm256_permutex2var_epi8(t0, fp6_codes_avx2(e + b * 24), t1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + b * 32), q);
    if (bs) bs[b] = sum32_avx2(q);
  }
}

QJ_AVX2 inline __m256i bcast16_avx2(const int8_t* t) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
}

// E3M2 16v (int16, |v| <= 448): low and high bytes of the magnitude's value by two 32-entry
// vpshufb tables each, interleaved to int16 (the unpacks work per 128-bit lane, vperm2i128 puts
// the four quarters back in order), then the sign.
QJ_AVX2 void dec16_e3m2_avx2(const uint8_t* e, int64_t nb, int16_t* d) {
  const int16_t* tab = mx::e3m2_int_table();
  alignas(32) int8_t lo[32], hi[32];
  for (int i = 0; i < 32; ++i) {
    lo[i] = static_cast<int8_t>(tab[i] & 0xff);
    hi[i] = static_cast<int8_t>(tab[i] >> 8);
  }
  const __m256i lo0 = bcast16_avx2(lo), lo1 = bcast16_avx2(lo + 16), hi0 = bcast16_avx2(hi),
                hi1 = bcast16_avx2(hi + 16);
  const __m256i m1f = _mm256_set1_epi8(0x1f), b4 = _mm256_set1_epi8(0x10), b5 = _mm256_set1_epi8(0x20);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i c = fp6_codes_avx2(e + b * 24);
    const __m256i mag = _mm256_and_si256(c, m1f);
    const __m256i sel = _mm256_cmpeq_epi8(_mm256_and_si256(mag, b4), b4);
    const __m256i vl = _mm256_blendv_epi8(_mm256_shuffle_epi8(lo0, mag), _mm256_shuffle_epi8(lo1, mag), sel);
    const __m256i vh = _mm256_blendv_epi8(_mm256_shuffle_epi8(hi0, mag), _mm256_shuffle_epi8(hi1, mag), sel);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(c, b5), b5);
    const __m256i ul = _mm256_unpacklo_epi8(vl, vh), uh = _mm256_unpackhi_epi8(vl, vh);
    const __m256i nl = _mm256_unpacklo_epi8(neg, neg), nh = _mm256_unpackhi_epi8(neg, neg);
    const __m256i v0 = _mm256_permute2x128_si256(ul, uh, 0x20), v1 = _mm256_permute2x128_si256(ul, uh, 0x31);
    const __m256i n0 = _mm256_permute2x128_si256(nl, nh, 0x20), n1 = _mm256_permute2x128_si256(nl, nh, 0x31);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + b * 32), _mm256_sub_epi16(_mm256_xor_si256(v0, n0), n0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + b * 32 + 16), _mm256_sub_epi16(_mm256_xor_si256(v1, n1), n1));
  }
}

// AVX-512BW: the signed 64-entry int16 table in two zmm, one vpermt2w per block.
QJ_AVX512 void dec16_e3m2_avx512(const uint8_t* e, int64_t nb, int16_t* d) {
  const int16_t* tab = mx::e3m2_int_table();
  const __m512i t0 = _mm512_loadu_si512(tab), t1 = _mm512_loadu_si512(tab + 32);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512i idx = _mm512_cvtepu8_epi16(fp6_codes_avx2(e + b * 24));
    _mm512_storeu_si512(d + b * 32, _mm512_permutex2var_epi16(t0, idx, t1));
  }
}

using Dec8 = void (*)(const uint8_t*, int64_t, int8_t*, int32_t*);

Dec8 dec8_for(qj_dtype t) {
  const qj_isa isa = max_isa();
  if (isa >= QJ_ISA_AVX512) {
    if (t == QJ_MXFP4_E2M1) return dec8_fp4_avx512;
    if (t == QJ_MXINT8) return dec8_int8_avx512;
    return cpu_features().avx512vbmi ? dec8_e2m3_vbmi : dec8_e2m3_avx2;
  }
  if (isa >= QJ_ISA_AVX2) {
    if (t == QJ_MXFP4_E2M1) return dec8_fp4_avx2;
    if (t == QJ_MXINT8) return dec8_int8_avx2;
    return dec8_e2m3_avx2;
  }
  return nullptr;
}

}  // namespace

bool mx_decode_int8(qj_dtype t, const uint8_t* elems, int64_t nb, int8_t* dst, int32_t* block_sum) {
  if (!mx_act_int8_type(t)) return false;
  if (Dec8 f = dec8_for(t))
    f(elems, nb, dst, block_sum);
  else
    dec8_scalar(t, elems, nb, dst, block_sum);
  return true;
}

bool mx_decode_int16(qj_dtype t, const uint8_t* elems, int64_t nb, int16_t* dst) {
  const mx::ElemFormat* f = mx::format(t);
  if (!f || f->int_shift < 0) return false;  // FP8: no small integer form
  const qj_isa isa = max_isa();
  if (t == QJ_MXFP6_E3M2 && isa >= QJ_ISA_AVX512) {
    dec16_e3m2_avx512(elems, nb, dst);
    return true;
  }
  if (t == QJ_MXFP6_E3M2 && isa >= QJ_ISA_AVX2) {
    dec16_e3m2_avx2(elems, nb, dst);
    return true;
  }
  uint8_t c[mx::kBlock];
  for (int64_t b = 0; b < nb; ++b) {
    mx::unpack_block(*f, elems + b * f->block_bytes, c);
    for (int i = 0; i < mx::kBlock; ++i)
      dst[b * mx::kBlock + i] = static_cast<int16_t>(
          t == QJ_MXFP6_E3M2 ? mx::e3m2_int_table()[c[i] & 63] : int8_form(t, c[i]));
  }
  return true;
}

void mx_decode_f32(qj_dtype t, const uint8_t* elems, const uint8_t* scales, int64_t nb, float* dst) {
  if (scales) {
    mx_dequantize(t, elems, scales, nb * mx::kBlock, QJ_F32, dst);
    return;
  }
  // The values alone are the dequantization with X = 1 (scale byte 0x7F): exact, vectorized.
  static thread_local std::vector<uint8_t> ones;
  if (ones.size() < static_cast<size_t>(nb)) ones.assign(static_cast<size_t>(nb), 0x7F);
  mx_dequantize(t, elems, ones.data(), nb * mx::kBlock, QJ_F32, dst);
}

float mx_act_block_scale(qj_dtype t, uint8_t b) {
  if (b == mx::kScaleNaN) return bits_f32(mx::kF32QuietNaN);
  return mx::mul_pow2(mx::e8m0_to_f32(b), -mx::format(t)->int_shift);
}

qj_status check_mx_a_plan(const qj_gemm_desc& d, const PackedWeights& w) {
  const qj_dtype at = d.a_type;
  if (w.k % mx::kBlock != 0)
    return fail(QJ_ERR_UNSUPPORTED, "k=%lld: %s A needs k to be a multiple of 32 (whole blocks; pad A "
                "and the weights with zeros)", (long long)w.k, qj_dtype_name(at));
  // F16 / BF16 and MXFP8 weights: any MX A, dequantized exactly to fp32 and run as fp32 A (the
  // float GEMM; MXFP8 weights in its fp32-FMA kernel, MX.md 9.6 "an fp32 path for FP8").
  if (w.dtype == QJ_F16 || w.dtype == QJ_BF16 || w.is_mx_fp8()) return QJ_OK;
  // MXFP8 A with integer-form MX / BDR weights: no small integer form on the A side, so the
  // fp32-FMA kernel runs them, every one read in place.
  if ((at == QJ_MXFP8_E4M3 || at == QJ_MXFP8_E5M2) && w.is_mx()) return QJ_OK;
  const int32_t ct0 = raw_enum(d.c_type);
  // int16-pair weights (E3M2, BDR MX9 / MX6 / MX4): A in its integer form as s16 pairs, so every
  // MX type with a small integer form (FP4 2v, E2M3 8v, INT8, E3M2 16v: |q| <= 448) runs exactly.
  if (w.is_mx16()) {
    if (ct0 == QJ_S32)
      return fail(QJ_ERR_INVALID_ARGUMENT, "desc->c_type=QJ_S32 does not apply to %s A (block scales are "
                  "applied in fp32)", qj_dtype_name(at));
    return QJ_OK;
  }
  // E3M2 A (16v, int16 only) with int8-form MX weights: the int8 kernels with A split into two s8
  // parts, 16v = 32 hi + lo (PackASpec::split32), the weights read in place.
  if (at == QJ_MXFP6_E3M2 &&
      (w.dtype == QJ_MXFP4_E2M1 || w.dtype == QJ_MXFP6_E2M3 || w.dtype == QJ_MXINT8)) {
    if (ct0 == QJ_S32)
      return fail(QJ_ERR_INVALID_ARGUMENT, "desc->c_type=QJ_S32 does not apply to %s A (block scales are "
                  "applied in fp32)", qj_dtype_name(at));
    return QJ_OK;
  }
  if (!mx_act_int8_type(at))
    return fail(QJ_ERR_UNSUPPORTED,
                "desc->a_type=%s with %s weights is not implemented: with these weights MX activations "
                "run in their int8 integer form only (a_type QJ_MXFP4_E2M1, QJ_MXFP6_E2M3 or QJ_MXINT8; "
                "every MX type runs with F16 / BF16 / MXFP8 weights, every type but MXFP8 with "
                "MXFP6_E3M2 / BDR weights, and MXFP6_E3M2 also with MXFP4 / E2M3 / MXINT8 weights)",
                qj_dtype_name(at), qj_dtype_name(w.dtype));
  const bool grouped32 = (w.dtype == QJ_S4 || w.dtype == QJ_U4) && w.gran == QJ_GRAN_GROUP && w.group_size == 32;
  // Listed explicitly (not is_mx()): other MX weight types run in other kernels (int16, fp32)
  // whose A operand this path does not produce.
  const bool int8_mx_w = w.dtype == QJ_MXFP4_E2M1 || w.dtype == QJ_MXFP6_E2M3 || w.dtype == QJ_MXINT8;
  if (!int8_mx_w && !grouped32)
    return fail(QJ_ERR_UNSUPPORTED,
                "desc->a_type=%s with %s weights is not implemented: MX A needs MXFP4_E2M1, MXFP6_E2M3, "
                "MXINT8, F16 or BF16 weights, or S4 / U4 weights quantized per group of 32 (one A "
                "block scale per weight group; with k = 32 a group of 32 is the whole of K, which "
                "packing stores per channel, so these weights need k >= 64)%s",
                qj_dtype_name(at), qj_dtype_name(w.dtype),
                (w.dtype == QJ_S4 || w.dtype == QJ_U4) && w.k == 32 ? " (here k = 32)" : "");
  const int32_t ct = raw_enum(d.c_type);
  if (ct == QJ_S32)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->c_type=QJ_S32 does not apply to %s A (block scales are "
                "applied in fp32)", qj_dtype_name(at));
  return QJ_OK;
}

qj_status check_mx_a_lda(qj_dtype t, int64_t k, int64_t lda) {
  const int64_t row_bytes = k / mx::kBlock * mx::format(t)->block_bytes;
  if (lda < row_bytes)
    return fail(QJ_ERR_INVALID_ARGUMENT, "lda=%lld is smaller than the %lld element bytes of a row of %s A "
                "(k=%lld; lda counts bytes for MX A)", (long long)lda, (long long)row_bytes,
                qj_dtype_name(t), (long long)k);
  return QJ_OK;
}

qj_status check_mx_a_run(qj_dtype t, int64_t k, int64_t m, const void* a, int64_t lda) {
  const auto* x = static_cast<const qj_mx_matrix*>(a);
  const int64_t blocks = k / mx::kBlock;
  if (!x->elems) return fail(QJ_ERR_INVALID_ARGUMENT, "a->elems is NULL (%s A)", qj_dtype_name(t));
  if (!x->scales) return fail(QJ_ERR_INVALID_ARGUMENT, "a->scales is NULL (%s A)", qj_dtype_name(t));
  QJ_TRY(check_mx_a_lda(t, k, lda));
  if (x->scales_ld < blocks)
    return fail(QJ_ERR_INVALID_ARGUMENT, "a->scales_ld=%lld is smaller than k/32=%lld",
                (long long)x->scales_ld, (long long)blocks);
  const int64_t limit = int64_t(1) << 53;
  if (lda > limit || (m > 1 && lda > limit / m))
    return fail(QJ_ERR_INVALID_ARGUMENT, "lda=%lld with m=%lld exceeds the address space", (long long)lda,
                (long long)m);
  if (x->scales_ld > limit || (m > 1 && x->scales_ld > limit / m))
    return fail(QJ_ERR_INVALID_ARGUMENT, "a->scales_ld=%lld with m=%lld exceeds the address space",
                (long long)x->scales_ld, (long long)m);
  return QJ_OK;
}

namespace {

// Row of MX A -> its integer forms as int16 (int8 types through the vectorized int8 decoder,
// into b8: nb * 32 bytes).
void decode_row_int16(qj_dtype t, const uint8_t* e, int64_t nb, int16_t* q, std::vector<int8_t>& b8) {
  if (mx_act_int8_type(t)) {
    grow(b8, static_cast<size_t>(nb) * mx::kBlock);
    mx_decode_int8(t, e, nb, b8.data(), nullptr);
    for (int64_t j = 0; j < nb * mx::kBlock; ++j) q[j] = b8[j];
  } else {
    mx_decode_int16(t, e, nb, q);
  }
}

// Row i's row sums of its int16 forms q (k values) and its A factors per weight group of
// k / groups values (s.row_sums: row_sum[g * mr + i] = row_sum_mult * sum; a_scale from the
// row's E8M0 bytes sc, A block g * gk / 32).
void row_group_sums(const PackASpec& s, const int16_t* q, const uint8_t* sc, int i, int mr, int32_t* row_sum,
                    float* a_scale) {
  const int64_t gk = s.k / s.groups;
  for (int64_t g = 0; g < s.groups; ++g) {
    if (s.row_sums) {
      int32_t sum = 0;  // |sum| <= 32 * 448
      for (int64_t j = g * gk; j < (g + 1) * gk; ++j) sum += q[j];
      row_sum[g * mr + i] = static_cast<int32_t>(static_cast<uint32_t>(sum) * static_cast<uint32_t>(s.row_sum_mult));
    }
    a_scale[g * mr + i] = mx_act_block_scale(s.a_type, sc[g * gk / mx::kBlock]);
  }
}

// kg == 2: the s16 pairs of the int16-pair weight kernels (E3M2, BDR, and the int8-form OCP
// weights under E3M2 A below VNNI). The weight groups are 32 (E3M2 and the OCP types: one A block
// each) or 16 (BDR: A block
// g / 2 spans weight groups g and g + 1), so the A factor and the row sums are taken per weight
// group of gk = k / groups values.
void pack_a_pairs_mx(const PackASpec& s, const qj_mx_matrix& a, int64_t lda, int64_t row0, int mr,
                     uint8_t* dst, int32_t* row_sum, float* a_scale, PackAScratch& scratch) {
  const int64_t nb = s.k / mx::kBlock, kgroups = s.kp / 2;
  const bool in_place = mr == 1;  // one row of pairs is the decoded row itself
  for (int i = 0; i < mr; ++i) {
    const uint8_t* e = static_cast<const uint8_t*>(a.elems) + (row0 + i) * lda;
    const uint8_t* sc = a.scales + (row0 + i) * a.scales_ld;
    int16_t* q = in_place ? reinterpret_cast<int16_t*>(dst) : scratch.i16.data();
    decode_row_int16(s.a_type, e, nb, q, scratch.row_i8);
    for (int64_t j = s.k; j < s.kp; ++j) q[j] = 0;
    row_group_sums(s, q, sc, i, mr, row_sum, a_scale);
    if (!in_place)
      for (int64_t kk = 0; kk < kgroups; ++kk) std::memcpy(dst + (kk * mr + i) * 4, q + kk * 2, 4);
  }
}

// split32: E3M2 A (16v in [-448, 448]) for the int8 decoded-weight kernels: q = 32 hi + lo with
// lo = q & 31 and hi = q >> 5, and per 8-K step of the kernels 16 bytes of a virtual row: the lo
// of its 8 K, then their hi (the quads lo 0..3, lo 4..7, hi 0..3, hi 4..7; codegen/gemm_int key
// flags bit 7). Row sums of q itself.
void pack_a_split_mx(const PackASpec& s, const qj_mx_matrix& a, int64_t lda, int64_t row0, int mr,
                     uint8_t* dst, int32_t* row_sum, float* a_scale, PackAScratch& scratch) {
  std::vector<int16_t>& q = scratch.i16;
  std::vector<int8_t>& buf = scratch.i8;
  const int64_t nb = s.k / mx::kBlock, vk = 2 * s.kp;
  const bool in_place = mr == 1;  // one row of quads is the virtual row itself
  for (int i = 0; i < mr; ++i) {
    const uint8_t* e = static_cast<const uint8_t*>(a.elems) + (row0 + i) * lda;
    const uint8_t* sc = a.scales + (row0 + i) * a.scales_ld;
    decode_row_int16(s.a_type, e, nb, q.data(), scratch.row_i8);
    for (int64_t j = s.k; j < s.kp; ++j) q[j] = 0;
    int8_t* v = in_place ? reinterpret_cast<int8_t*>(dst) : buf.data() + i * vk;
    for (int64_t j = 0; j < s.kp; ++j) {
      const int64_t st = j / 8, r = j % 8;
      v[16 * st + r] = static_cast<int8_t>(q[j] & 31);
      v[16 * st + 8 + r] = static_cast<int8_t>(q[j] >> 5);  // arithmetic: floor(q / 32)
    }
    row_group_sums(s, q.data(), sc, i, mr, row_sum, a_scale);
  }
  if (!in_place) transpose_quads(reinterpret_cast<const uint8_t*>(buf.data()), vk, mr, vk / 4, dst);
}

}  // namespace

void reserve_pack_a_tile_mx(const PackASpec& s, int mr, PackAScratch& scratch) {
  const bool in_place = mr == 1;  // one row of quads or pairs is written to dst directly
  const size_t kp = static_cast<size_t>(s.kp);
  const bool int8_form = mx_act_int8_type(s.a_type);  // decode_row_int16 goes through int8
  if (s.kg == 2 || s.split32) {
    if (int8_form) grow(scratch.row_i8, static_cast<size_t>(s.k));
    if (s.split32 || !in_place) grow(scratch.i16, kp);  // the row's int16 forms
    if (s.split32 && !in_place) grow(scratch.i8, 2 * kp * mr);  // the virtual rows
    return;
  }
  if (!in_place) grow(scratch.i8, kp * mr);
  grow(scratch.i32, static_cast<size_t>(s.k / mx::kBlock));  // block sums
}

void pack_a_tile_mx(const PackASpec& s, const qj_mx_matrix& a, int64_t lda, int64_t row0, int mr,
                    uint8_t* dst, int32_t* row_sum, float* a_scale, PackAScratch& scratch) {
  reserve_pack_a_tile_mx(s, mr, scratch);
  if (s.kg == 2) {
    pack_a_pairs_mx(s, a, lda, row0, mr, dst, row_sum, a_scale, scratch);
    return;
  }
  if (s.split32) {
    pack_a_split_mx(s, a, lda, row0, mr, dst, row_sum, a_scale, scratch);
    return;
  }
  std::vector<int8_t>& buf = scratch.i8;
  std::vector<int32_t>& bsum = scratch.i32;
  const int64_t nb = s.k / mx::kBlock, kgroups = s.kp / 4;
  // One row of quads is the decoded row itself; more rows are decoded one after another (kp
  // apart) and laid out by transpose_quads.
  const bool in_place = mr == 1;
  for (int i = 0; i < mr; ++i) {
    const uint8_t* e = static_cast<const uint8_t*>(a.elems) + (row0 + i) * lda;
    const uint8_t* sc = a.scales + (row0 + i) * a.scales_ld;
    int8_t* q = in_place ? reinterpret_cast<int8_t*>(dst) : buf.data() + i * s.kp;
    mx_decode_int8(s.a_type, e, nb, q, bsum.data());
    for (int64_t j = s.k; j < s.kp; ++j) q[j] = 0;
    for (int64_t g = 0; g < s.groups; ++g) {
      if (s.row_sums)
        row_sum[g * mr + i] = static_cast<int32_t>(static_cast<uint32_t>(bsum[g]) *
                                                   static_cast<uint32_t>(s.row_sum_mult));
      a_scale[g * mr + i] = mx_act_block_scale(s.a_type, sc[g]);
    }
  }
  if (!in_place) transpose_quads(reinterpret_cast<const uint8_t*>(buf.data()), s.kp, mr, kgroups, dst);
}

void mx_act_decode_rows(qj_dtype t, const qj_mx_matrix& a, int64_t lda, int64_t m, int64_t k,
                        int32_t* q, float* scale, int64_t groups) {
  const int64_t nb = k / mx::kBlock;
  if (groups <= 0) groups = nb;
  const int64_t gk = k / groups;  // 32, or 16 for BDR weights (two groups per A block)
  std::vector<int16_t> row(static_cast<size_t>(k));
  std::vector<int8_t> b8;
  for (int64_t i = 0; i < m; ++i) {
    decode_row_int16(t, static_cast<const uint8_t*>(a.elems) + i * lda, nb, row.data(), b8);
    for (int64_t j = 0; j < k; ++j) q[i * k + j] = row[j];
    for (int64_t g = 0; g < groups; ++g)
      scale[i * groups + g] = mx_act_block_scale(t, a.scales[i * a.scales_ld + g * gk / mx::kBlock]);
  }
}

void mx_act_decode_rows_f32(qj_dtype t, const qj_mx_matrix& a, int64_t lda, int64_t m, int64_t k,
                            float* dst, int64_t ld) {
  const int64_t nb = k / mx::kBlock;
  for (int64_t i = 0; i < m; ++i)
    mx_decode_f32(t, static_cast<const uint8_t*>(a.elems) + i * lda, a.scales + i * a.scales_ld, nb, dst + i * ld);
}

void reserve_pack_a_float_tile_mx(int mr, int64_t k, PackAScratch& scratch) {
  grow(scratch.f32, static_cast<size_t>(mr) * k);
}

void pack_a_float_tile_mx(qj_dtype t, const qj_mx_matrix& a, int64_t lda, int64_t row0, int mr,
                          int64_t k, int64_t kp, float* dst, PackAScratch& scratch) {
  reserve_pack_a_float_tile_mx(mr, k, scratch);
  std::vector<float>& buf = scratch.f32;
  const qj_mx_matrix rows{static_cast<const uint8_t*>(a.elems) + row0 * lda, a.scales + row0 * a.scales_ld,
                          a.scales_ld};
  mx_act_decode_rows_f32(t, rows, lda, mr, k, buf.data(), k);
  pack_a_float_tile(QJ_F32, buf.data(), k, mr, mr, k, kp, dst);
}

}  // namespace qj
