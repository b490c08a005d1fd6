// Table conversion driver: fp32/fp16 <-> fused-rowwise rows, vectorized per ISA tier.
//
// The parameters of a row (scale, bias, the multiplier) always come from src/formats
// (fused::row_params), so there is one definition of the formula; the vector code here only runs
// the per-element step  q = cvtps2dq((x - minimum) * inv)  (+ clamp, + bit packing) and the decode
// q * scale + bias (a multiply, then an add: GCC contracts a*b+c into an fma in C++ by default
// (-ffp-contract=fast) once FMA is enabled, so the product passes through an empty asm barrier). Tails shorter than a vector use the scalar formula
// from src/formats, which performs the identical fp32 operations.
//
// The vector tiers are compiled with target attributes and chosen by qj::max_isa(), so the ISA
// cap selects them exactly as it selects JIT kernels (tests sweep every tier).
#include "src/ops/rowwise_quantize.h"

#include <immintrin.h>

#include <cstring>
#include <new>
#include <vector>

#include "src/core/isa.h"
#include "src/core/status.h"
#include "src/formats/fused_rowwise.h"
#include "src/formats/half.h"

namespace qj {
namespace {

using fused::QuantParams;
using fused::RowLayout;

#define QJ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QJ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

// ---- per-tier kernels -------------------------------------------------------------------------

struct Kernels {
  // Returns false if some element is not finite; otherwise the first-occurrence min and max.
  bool (*min_max)(const float* x, int64_t n, float* mn, float* mx);
  // Encodes elements [0, n) (the caller did begin_row; the vector part covers whole bytes).
  void (*quantize)(const RowLayout& L, const QuantParams& p, const float* x, uint8_t* row);
  // Decodes a row to fp32 (or fp16 when out16 != nullptr).
  void (*dequantize)(const RowLayout& L, const uint8_t* row, float* out, uint16_t* out16);
  void (*f16_to_f32)(const uint16_t* src, int64_t n, float* dst);
};

// The sign of a zero extreme is the sign of the first zero (std::min_element / max_element keep
// the first occurrence; vector min/max may return either zero).
float fix_zero(const float* x, int64_t n, float mn) {
  if (mn != 0.0f) return mn;
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == 0.0f) return x[j];
  return mn;
}

// Scalar tier: src/formats as is.
bool min_max_scalar(const float* x, int64_t n, float* mn, float* mx) {
  for (int64_t j = 0; j < n; ++j)
    if (!std::isfinite(x[j])) return false;
  fused::row_min_max(x, n, mn, mx);
  return true;
}
void quantize_scalar(const RowLayout& L, const QuantParams& p, const float* x, uint8_t* row) {
  fused::quantize_range(L, p, x, 0, L.dim, row);
}
void dequant_tail(const RowLayout& L, const uint8_t* row, int64_t j0, float* out, uint16_t* out16) {
  const float scale = fused::row_scale(L, row), bias = fused::row_bias(L, row);
  for (int64_t j = j0; j < L.dim; ++j) {
    float v = fused::dequantize_value(scale, bias, fused::code(L, row, j));
    if (out16)
      out16[j] = f32_to_f16(v);
    else
      out[j] = v;
  }
}
void dequantize_scalar(const RowLayout& L, const uint8_t* row, float* out, uint16_t* out16) {
  dequant_tail(L, row, 0, out, out16);
}
void f16_to_f32_scalar(const uint16_t* s, int64_t n, float* d) {
  for (int64_t j = 0; j < n; ++j) d[j] = f16_to_f32(s[j]);
}

// ---- AVX2 (8 lanes) ----

// An opaque copy: the compiler cannot see through it, so it cannot fuse the multiply into the add.
template <class V>
inline V no_contract(V v) {
  __asm__("" : "+x"(v));
  return v;
}

QJ_AVX2 bool min_max_avx2(const float* x, int64_t n, float* mn, float* mx) {
  const __m256i expmask = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  __m256 lo = _mm256_set1_ps(x[0]), hi = lo;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_loadu_ps(x + j);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), expmask), expmask));
    lo = _mm256_min_ps(lo, v);
    hi = _mm256_max_ps(hi, v);
  }
  if (!_mm256_testz_si256(bad, bad)) return false;
  alignas(32) float l[8], h[8];
  _mm256_store_ps(l, lo);
  _mm256_store_ps(h, hi);
  float a = l[0], b = h[0];
  for (int k = 1; k < 8; ++k) {
    a = l[k] < a ? l[k] : a;
    b = h[k] > b ? h[k] : b;
  }
  for (; j < n; ++j) {
    if (!std::isfinite(x[j])) return false;
    a = x[j] < a ? x[j] : a;
    b = x[j] > b ? x[j] : b;
  }
  *mn = fix_zero(x, n, a);
  *mx = fix_zero(x, n, b);
  return true;
}

QJ_AVX2 inline __m256i codes_avx2(const QuantParams& p, const float* x) {
  __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x), _mm256_set1_ps(p.minimum)),
                           _mm256_set1_ps(p.inv));
  __m256i q = _mm256_cvtps_epi32(v);
  if (p.clamp) {
    q = _mm256_max_epi32(q, _mm256_setzero_si256());
    q = _mm256_min_epi32(q, _mm256_set1_epi32(p.qmax));
  }
  return _mm256_and_si256(q, _mm256_set1_epi32(0xff));
}

QJ_AVX2 void quantize_avx2(const RowLayout& L, const QuantParams& p, const float* x, uint8_t* row) {
  uint8_t* data = row + fused::data_offset(L.bits, L.sb_first);
  int64_t j = 0;
  for (; j + 8 <= L.dim; j += 8) {
    __m256i q = codes_avx2(p, x + j);
    if (L.bits == 8) {
      __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(data + j), _mm_packus_epi16(w, w));
    } else if (L.bits == 4) {
      __m256i t = _mm256_sllv_epi32(q, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
      t = _mm256_or_si256(t, _mm256_srli_epi64(t, 32));
      uint8_t* d = data + j / 2;
      d[0] = static_cast<uint8_t>(_mm256_extract_epi32(t, 0));
      d[1] = static_cast<uint8_t>(_mm256_extract_epi32(t, 2));
      d[2] = static_cast<uint8_t>(_mm256_extract_epi32(t, 4));
      d[3] = static_cast<uint8_t>(_mm256_extract_epi32(t, 6));
    } else {
      __m256i t = _mm256_sllv_epi32(q, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
      t = _mm256_or_si256(t, _mm256_srli_epi64(t, 32));
      t = _mm256_or_si256(t, _mm256_bsrli_epi128(t, 8));
      uint8_t* d = data + j / 4;
      d[0] = static_cast<uint8_t>(_mm256_extract_epi32(t, 0));
      d[1] = static_cast<uint8_t>(_mm256_extract_epi32(t, 4));
    }
  }
  fused::quantize_range(L, p, x, j, L.dim, row);
}

// In-order codes of 8 elements starting at element j (j a multiple of 8).
QJ_AVX2 inline __m256i load_codes_avx2(const RowLayout& L, const uint8_t* data, int64_t j) {
  if (L.bits == 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + j)));
  if (L.bits == 4) {
    int32_t w;
    std::memcpy(&w, data + j / 2, 4);
    __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128(w), _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0));
    __m256i q = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(b), _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    return _mm256_and_si256(q, _mm256_set1_epi32(0xf));
  }
  uint16_t w;
  std::memcpy(&w, data + j / 4, 2);
  __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128(w), _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
  __m256i q = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(b), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
  return _mm256_and_si256(q, _mm256_set1_epi32(0x3));
}

QJ_AVX2 void dequantize_avx2(const RowLayout& L, const uint8_t* row, float* out, uint16_t* out16) {
  const uint8_t* data = row + fused::data_offset(L.bits, L.sb_first);
  const __m256 s = _mm256_set1_ps(fused::row_scale(L, row));
  const __m256 b = _mm256_set1_ps(fused::row_bias(L, row));
  int64_t j = 0;
  for (; j + 8 <= L.dim; j += 8) {
    __m256 v = _mm256_add_ps(no_contract(_mm256_mul_ps(_mm256_cvtepi32_ps(load_codes_avx2(L, data, j)), s)), b);
    if (out16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out16 + j), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    else
      _mm256_storeu_ps(out + j, v);
  }
  dequant_tail(L, row, j, out, out16);
}

QJ_AVX2 void f16_to_f32_avx2(const uint16_t* s, int64_t n, float* d) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(d + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j))));
  for (; j < n; ++j) d[j] = f16_to_f32(s[j]);
}

// ---- AVX-512 (16 lanes) ----

QJ_AVX512 bool min_max_avx512(const float* x, int64_t n, float* mn, float* mx) {
  __m512 lo = _mm512_set1_ps(x[0]), hi = lo;
  __mmask16 bad = 0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 v = _mm512_loadu_ps(x + j);
    bad |= _mm512_fpclass_ps_mask(v, 0x99);  // QNaN | SNaN | +inf | -inf
    lo = _mm512_min_ps(lo, v);
    hi = _mm512_max_ps(hi, v);
  }
  if (j < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(m, x + j);
    bad |= _mm512_mask_fpclass_ps_mask(m, v, 0x99);
    lo = _mm512_mask_min_ps(lo, m, lo, v);
    hi = _mm512_mask_max_ps(hi, m, hi, v);
  }
  if (bad) return false;
  *mn = fix_zero(x, n, _mm512_reduce_min_ps(lo));
  *mx = fix_zero(x, n, _mm512_reduce_max_ps(hi));
  return true;
}

QJ_AVX512 void quantize_avx512(const RowLayout& L, const QuantParams& p, const float* x, uint8_t* row) {
  uint8_t* data = row + fused::data_offset(L.bits, L.sb_first);
  const __m512 mn = _mm512_set1_ps(p.minimum), inv = _mm512_set1_ps(p.inv);
  const __m512i qmax = _mm512_set1_epi32(p.qmax);
  int64_t j = 0;
  for (; j + 16 <= L.dim; j += 16) {
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), mn), inv));
    if (p.clamp) q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_setzero_si512()), qmax);
    q = _mm512_and_si512(q, _mm512_set1_epi32(0xff));
    if (L.bits == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(data + j), _mm512_cvtepi32_epi8(q));
    } else if (L.bits == 4) {
      __m512i t = _mm512_sllv_epi32(q, _mm512_set4_epi32(4, 0, 4, 0));
      t = _mm512_or_si512(t, _mm512_srli_epi64(t, 32));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(data + j / 2), _mm512_cvtepi64_epi8(t));
    } else {
      __m512i t = _mm512_sllv_epi32(q, _mm512_set4_epi32(6, 4, 2, 0));
      t = _mm512_or_si512(t, _mm512_srli_epi64(t, 32));
      t = _mm512_or_si512(t, _mm512_bsrli_epi128(t, 8));
      t = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t);
      int32_t w = _mm_cvtsi128_si32(_mm_cvtepi32_epi8(_mm512_castsi512_si128(t)));
      std::memcpy(data + j / 4, &w, 4);
    }
  }
  fused::quantize_range(L, p, x, j, L.dim, row);
}

QJ_AVX512 inline __m512i load_codes_avx512(const RowLayout& L, const uint8_t* data, int64_t j) {
  if (L.bits == 8) return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + j)));
  if (L.bits == 4) {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + j / 2));
    b = _mm_shuffle_epi8(b, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    __m512i q = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(b), _mm512_set4_epi32(4, 0, 4, 0));
    return _mm512_and_si512(q, _mm512_set1_epi32(0xf));
  }
  int32_t w;
  std::memcpy(&w, data + j / 4, 4);
  __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128(w), _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  __m512i q = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(b), _mm512_set4_epi32(6, 4, 2, 0));
  return _mm512_and_si512(q, _mm512_set1_epi32(0x3));
}

QJ_AVX512 void dequantize_avx512(const RowLayout& L, const uint8_t* row, float* out, uint16_t* out16) {
  const uint8_t* data = row + fused::data_offset(L.bits, L.sb_first);
  const __m512 s = _mm512_set1_ps(fused::row_scale(L, row));
  const __m512 b = _mm512_set1_ps(fused::row_bias(L, row));
  int64_t j = 0;
  for (; j + 16 <= L.dim; j += 16) {
    __m512 v = _mm512_add_ps(no_contract(_mm512_mul_ps(_mm512_cvtepi32_ps(load_codes_avx512(L, data, j)), s)), b);
    if (out16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out16 + j), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    else
      _mm512_storeu_ps(out + j, v);
  }
  dequant_tail(L, row, j, out, out16);
}

QJ_AVX512 void f16_to_f32_avx512(const uint16_t* s, int64_t n, float* d) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(d + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + j))));
  for (; j < n; ++j) d[j] = f16_to_f32(s[j]);
}

const Kernels& kernels() {
  static const Kernels scalar{min_max_scalar, quantize_scalar, dequantize_scalar, f16_to_f32_scalar};
  static const Kernels avx2{min_max_avx2, quantize_avx2, dequantize_avx2, f16_to_f32_avx2};
  static const Kernels avx512{min_max_avx512, quantize_avx512, dequantize_avx512, f16_to_f32_avx512};
  qj_isa isa = max_isa();
  if (isa >= QJ_ISA_AVX512) return avx512;
  if (isa >= QJ_ISA_AVX2) return avx2;
  return scalar;
}

const char* issue_text(fused::RowIssue i) {
  switch (i) {
    case fused::RowIssue::kRangeOverflow: return "max - min overflows fp32";
    case fused::RowIssue::kFp16Overflow: return "the min or the scale does not fit fp16 (|min| >= 65520 or (max - min) / (2^bits - 1) >= 65520)";
    default: return "";
  }
}

// Pointer to row r of the plain matrix as fp32 (converted into buf for fp16 sources).
const float* plain_row(const Kernels& k, const RowwiseConvert& c, const void* src, int64_t r,
                       std::vector<float>& buf) {
  if (c.plain_type == QJ_F32) return static_cast<const float*>(src) + r * c.dim;
  k.f16_to_f32(static_cast<const uint16_t*>(src) + r * c.dim, c.dim, buf.data());
  return buf.data();
}

}  // namespace

qj_status quantize_rowwise(const RowwiseConvert& c, const void* src, void* dst) {
  const RowLayout L{fused::bits_of(c.fused_type), c.dim, c.sb_first};
  const int64_t stride = c.fused_stride ? c.fused_stride : L.bytes();
  const Kernels& k = kernels();
  // fp16 rows are widened into one row of fp32 at a time.
  std::vector<float> buf;
  const size_t buf_floats = static_cast<size_t>(c.plain_type == QJ_F16 ? c.dim : 0);
  try {
    buf.resize(buf_floats);
  } catch (const std::bad_alloc&) {
    return fail(QJ_ERR_OUT_OF_MEMORY, "quantize_rowwise: cannot allocate %zu bytes for one fp32 row of dim=%lld",
                buf_floats * sizeof(float), static_cast<long long>(c.dim));
  }
  // Pass 1: check every row, so that a bad row leaves dst untouched.
  for (int64_t r = 0; r < c.rows; ++r) {
    const float* x = plain_row(k, c, src, r, buf);
    float mn, mx;
    if (!k.min_max(x, c.dim, &mn, &mx)) {
      int64_t col = 0;
      while (col < c.dim && std::isfinite(x[col])) ++col;
      return fail(QJ_ERR_INVALID_ARGUMENT, "quantize_rowwise: src row %lld column %lld is %g (not finite)",
                  static_cast<long long>(r), static_cast<long long>(col), static_cast<double>(x[col]));
    }
    QuantParams p;
    fused::RowIssue issue = fused::row_params(L, mn, mx, &p);
    if (issue != fused::RowIssue::kOk)
      return fail(QJ_ERR_INVALID_ARGUMENT, "quantize_rowwise: src row %lld (min %g, max %g): %s",
                  static_cast<long long>(r), static_cast<double>(mn), static_cast<double>(mx),
                  issue_text(issue));
  }
  // Pass 2: encode.
  for (int64_t r = 0; r < c.rows; ++r) {
    const float* x = plain_row(k, c, src, r, buf);
    float mn, mx;
    k.min_max(x, c.dim, &mn, &mx);
    QuantParams p;
    fused::row_params(L, mn, mx, &p);
    uint8_t* row = static_cast<uint8_t*>(dst) + r * stride;
    fused::begin_row(L, p, row);
    k.quantize(L, p, x, row);
  }
  return QJ_OK;
}

qj_status dequantize_rowwise(const RowwiseConvert& c, const void* src, void* dst) {
  const RowLayout L{fused::bits_of(c.fused_type), c.dim, c.sb_first};
  const int64_t stride = c.fused_stride ? c.fused_stride : L.bytes();
  const Kernels& k = kernels();
  for (int64_t r = 0; r < c.rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(src) + r * stride;
    if (c.plain_type == QJ_F32)
      k.dequantize(L, row, static_cast<float*>(dst) + r * c.dim, nullptr);
    else
      k.dequantize(L, row, nullptr, static_cast<uint16_t*>(dst) + r * c.dim);
  }
  return QJ_OK;
}

}  // namespace qj
