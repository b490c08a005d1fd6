#include "src/ops/pack_a.h"

// GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized on their own "undefined" vector
// temporaries ('__Y') once inlined here (as in rowwise_adagrad.cpp); the values are never used.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "src/core/isa.h"
#include "src/formats/half.h"

namespace qj {

namespace {

// The lanes of a 16-lane step with `left` elements left (all 16 when left >= 16).
inline __mmask16 tail_mask16(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

// 16 lanes (mask m) of fp32 or bf16 A as fp32 (bf16: the bits shifted up, exact).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), always_inline)) inline __m512 load16(const float* x,
                                                                                                __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, x);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), always_inline)) inline __m512 load16(const uint16_t* x,
                                                                                                __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x)), 16));
}

// 8 values of fp32 or bf16 A as fp32 (AVX2).
__attribute__((target("avx2"), always_inline)) inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
__attribute__((target("avx2"), always_inline)) inline __m256 load8(const uint16_t* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float scalar_value(float x) { return x; }
inline float scalar_value(uint16_t x) { return bits_f32(static_cast<uint32_t>(x) << 16); }

// The amax of the AVX-512 version below, 8 at a time (AVX2), the tail scalar.
template <class Src>
__attribute__((target("avx2"))) int64_t row_amax_avx2(const Src* a, int64_t lda, int64_t m, int64_t k, float* amax) {
  const __m256i mag = _mm256_set1_epi32(0x7fffffff);
  for (int64_t i = 0; i < m; ++i) {
    const Src* r = a + i * lda;
    __m256i mx = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 8 <= k; j += 8) mx = _mm256_max_epi32(mx, _mm256_and_si256(_mm256_castps_si256(load8(r + j)), mag));
    __m128i m4 = _mm_max_epi32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0x4e));
    m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, 0xb1));
    int32_t v = _mm_cvtsi128_si32(m4);
    for (; j < k; ++j) {
      const int32_t b = static_cast<int32_t>(f32_bits(scalar_value(r[j])) & 0x7fffffffu);
      v = b > v ? b : v;
    }
    if (v >= 0x7f800000) return i;  // inf or nan
    amax[i] = bits_f32(static_cast<uint32_t>(v));
  }
  return -1;
}

// fp32 / bf16 rows with AVX-512: the same integer maximum of the magnitude bits, 16 at a time, the
// tail under a mask. Returns the first row holding a non-finite value, or -1.
template <class Src>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) int64_t row_amax_avx512(const Src* a, int64_t lda,
                                                                                      int64_t m, int64_t k, float* amax) {
  const __m512i mag = _mm512_set1_epi32(0x7fffffff);
  for (int64_t i = 0; i < m; ++i) {
    const Src* r = a + i * lda;
    __m512i mx = _mm512_setzero_si512();
    for (int64_t j = 0; j < k; j += 16)
      mx = _mm512_max_epi32(mx, _mm512_and_si512(_mm512_castps_si512(load16(r + j, tail_mask16(k - j))), mag));
    const int32_t v = _mm512_reduce_max_epi32(mx);
    if (v >= 0x7f800000) return i;  // inf or nan
    amax[i] = bits_f32(static_cast<uint32_t>(v));
  }
  return -1;
}

}  // namespace

int64_t row_amax(qj_dtype t, const void* a, int64_t lda, int64_t m, int64_t k, float* amax) {
  if (max_isa() >= QJ_ISA_AVX512)
    return t == QJ_F32 ? row_amax_avx512(static_cast<const float*>(a), lda, m, k, amax)
                       : row_amax_avx512(static_cast<const uint16_t*>(a), lda, m, k, amax);
  if (max_isa() >= QJ_ISA_AVX2)
    return t == QJ_F32 ? row_amax_avx2(static_cast<const float*>(a), lda, m, k, amax)
                       : row_amax_avx2(static_cast<const uint16_t*>(a), lda, m, k, amax);
  // On the magnitude bits as int32: for non-negative floats the integer order is the value order,
  // inf / nan are the patterns >= 0x7f800000, and an integer max reduction vectorizes (a float one
  // does not without -ffast-math).
  for (int64_t i = 0; i < m; ++i) {
    int32_t mx = 0;
    if (t == QJ_F32) {
      const uint32_t* r = reinterpret_cast<const uint32_t*>(static_cast<const float*>(a) + i * lda);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t b = static_cast<int32_t>(r[j] & 0x7fffffffu);
        mx = b > mx ? b : mx;
      }
    } else {
      const uint16_t* r = static_cast<const uint16_t*>(a) + i * lda;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t b = static_cast<int32_t>((static_cast<uint32_t>(r[j]) << 16) & 0x7fffffffu);
        mx = b > mx ? b : mx;
      }
    }
    if (mx >= 0x7f800000) return i;  // inf or nan
    amax[i] = bits_f32(static_cast<uint32_t>(mx));
  }
  return -1;
}

int64_t row_group_amax(qj_dtype t, const void* a, int64_t lda, int64_t m, int64_t k, int64_t gk,
                       float* amax) {
  // A row's groups are rows gk apart: one row_amax call per row.
  const int64_t groups = k / gk;
  const size_t esz = t == QJ_F32 ? 4 : 2;
  for (int64_t i = 0; i < m; ++i)
    if (row_amax(t, static_cast<const uint8_t*>(a) + i * lda * esz, gk, groups, gk, &amax[i * groups]) >= 0)
      return i;
  return -1;
}

namespace {

// Round half to even for |t| < 2^22 without a libm call (exact: adding 1.5 * 2^23 leaves the
// integer part in the mantissa under the default rounding mode; matches nearbyint here).
inline float rne_small(float t) { return (t + 12582912.0f) - 12582912.0f; }

inline int32_t quant(float v, float inv, float pre) {
  float t = rne_small((v * pre) * inv);
  t = t < -127.0f ? -127.0f : (t > 127.0f ? 127.0f : t);
  return static_cast<int32_t>(t);
}

// One span of a row of dynamic A to int8 codes, and the sum of a span of codes. Plain loops with
// no calls, so that the compiler vectorizes them; compiled three times (baseline SSE2, AVX2,
// AVX-512) and chosen by the ISA cap, so every tier runs its own copy (and the tests of a tier
// cover it). Only IEEE mul / add / sub / compare / truncating conversion are used, and contraction
// is off: AVX-512F brings FMA, and GCC's default -ffp-contract=fast would fuse (v * inv) + 1.5*2^23
// of the rounding trick into one fma, which rounds differently (caught by the tests at the
// AVX-512 tiers). So every copy gives the same bytes as quant() element by element.
template <class Src>
inline __attribute__((always_inline)) void quant_span_impl(const Src* src, int64_t n, float inv,
                                                           float pre, uint8_t flip, int8_t* dst) {
  for (int64_t j = 0; j < n; ++j) {
    float v;
    if constexpr (sizeof(Src) == 4)
      v = src[j];
    else
      v = bits_f32(static_cast<uint32_t>(src[j]) << 16);
    dst[j] = static_cast<int8_t>(static_cast<uint8_t>(quant(v, inv, pre)) ^ flip);
  }
}

// Sum over n bytes of u8(q[j] ^ x), 16 at a time with psadbw (SSE2, every tier).
int32_t sum_bytes_xor(const uint8_t* q, int64_t n, uint8_t x) {
  const __m128i f = _mm_set1_epi8(static_cast<char>(x)), zero = _mm_setzero_si128();
  __m128i acc = zero;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j)), f), zero));
  int32_t sum = _mm_cvtsi128_si32(acc) + _mm_cvtsi128_si32(_mm_unpackhi_epi64(acc, acc));
  for (; j < n; ++j) sum += static_cast<uint8_t>(q[j] ^ x);
  return sum;
}

// Sum of n bytes read as u8 (as_u8) or as s8: an s8 value v is u8(v ^ 0x80) - 128.
int32_t sum_bytes(const int8_t* q, int64_t n, bool as_u8) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(q);
  return as_u8 ? sum_bytes_xor(b, n, 0) : sum_bytes_xor(b, n, 0x80) - static_cast<int32_t>(128 * n);
}

#define QJ_SPAN_FUNCS(suffix, attr)                                                             \
  attr void quant_f32_##suffix(const float* s, int64_t n, float inv, float pre, uint8_t flip,      \
                               int8_t* d) {                                                     \
    quant_span_impl(s, n, inv, pre, flip, d);                                                   \
  }                                                                                             \
  attr void quant_bf16_##suffix(const uint16_t* s, int64_t n, float inv, float pre, uint8_t flip, \
                                int8_t* d) {                                                    \
    quant_span_impl(s, n, inv, pre, flip, d);                                                   \
  }

#define QJ_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
QJ_SPAN_FUNCS(base, QJ_NO_CONTRACT)
QJ_SPAN_FUNCS(avx2, QJ_NO_CONTRACT __attribute__((target("avx2"))))

// AVX-512 spans written out (the loop above leaves a scalar tail of up to 15 values, which for
// short rows such as K = 36 was most of the work): the same IEEE operations in the same order as
// quant(), the tail under a mask.
#define QJ_AVX512_Q QJ_NO_CONTRACT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

// Lanes m of x quantized as quant() does, ^ flip, stored to d under the mask; returns the bytes
// (lanes outside m: garbage). Narrowed in a register (the empty asm keeps GCC from folding it
// into a masked narrowing store to memory, which is slow on Zen 4).
template <class Src>
QJ_AVX512_Q inline __attribute__((always_inline)) __m128i quant16_avx512(const Src* x, __mmask16 m, __m512 vpre,
                                                                         __m512 vinv, __m128i vflip, int8_t* d) {
  const __m512 magic = _mm512_set1_ps(12582912.0f), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  __m512 t = _mm512_mul_ps(_mm512_mul_ps(load16(x, m), vpre), vinv);
  t = _mm512_sub_ps(_mm512_add_ps(t, magic), magic);
  t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);  // (finite rows only: the plan rejects inf / nan)
  __m128i b = _mm_xor_si128(_mm512_cvtepi32_epi8(_mm512_cvttps_epi32(t)), vflip);
  asm("" : "+v"(b));
  _mm_mask_storeu_epi8(d, m, b);
  return b;
}

template <class Src>
QJ_AVX512_Q void quant_avx512_x(const Src* s, int64_t n, float inv, float pre, uint8_t flip, int8_t* d) {
  const __m128i vflip = _mm_set1_epi8(static_cast<char>(flip));
  const __m512 vinv = _mm512_set1_ps(inv), vpre = _mm512_set1_ps(pre);
  for (int64_t j = 0; j < n; j += 16) quant16_avx512(s + j, tail_mask16(n - j), vpre, vinv, vflip, d + j);
}

// A row of fp32 / bf16 A in groups of gk (AVX-512): group g quantized with inv[g * sc_stride] and
// pre[g * sc_stride] (sc_stride 0: one scale for the row), as quant_avx512_x does per span;
// and, when sums is set, each group's sum of the stored bytes (as u8 when flip is 0x80, else as
// s8: the sums pack_a_tile_dynamic takes), times mult, into sums[g * sum_stride], computed from
// the registers (summing the stored bytes back would wait on the masked stores). psadbw adds
// bytes as u8; an s8 value v is (v ^ 0x80) - 128.
template <class Src>
QJ_AVX512_Q void quant_groups_avx512(const Src* s, int64_t groups, int64_t gk, const float* inv,
                                         const float* pre, int64_t sc_stride, uint8_t flip, int8_t* d,
                                         int32_t* sums, int64_t sum_stride, uint32_t mult) {
  const __m128i vflip = _mm_set1_epi8(static_cast<char>(flip));
  const __m128i vsum = _mm_set1_epi8(static_cast<char>(flip ? 0x00 : 0x80));  // to u8 for psadbw
  for (int64_t g = 0; g < groups; ++g) {
    const __m512 vinv = _mm512_set1_ps(inv[g * sc_stride]), vpre = _mm512_set1_ps(pre[g * sc_stride]);
    __m128i acc = _mm_setzero_si128();
    for (int64_t j = 0; j < gk; j += 16) {
      const __mmask16 m = tail_mask16(gk - j);
      const __m128i b = quant16_avx512(s + g * gk + j, m, vpre, vinv, vflip, d + g * gk + j);
      // (lanes past the group zeroed: they add nothing)
      acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_maskz_mov_epi8(m, _mm_xor_si128(b, vsum)), _mm_setzero_si128()));
    }
    if (sums) {
      int32_t sum = _mm_cvtsi128_si32(acc) + _mm_cvtsi128_si32(_mm_unpackhi_epi64(acc, acc));
      if (!flip) sum -= static_cast<int32_t>(128 * gk);
      sums[g * sum_stride] = static_cast<int32_t>(static_cast<uint32_t>(sum) * mult);
    }
  }
}

// The AVX2 counterpart of quant_groups_avx512: 8 values per step through the same IEEE operations
// (packed to bytes by saturating packs, which leave |q| <= 127 unchanged), a group's last
// gk % 8 values by quant() itself; the sums by psadbw on the bytes as stored.
template <class Src>
QJ_NO_CONTRACT __attribute__((target("avx2"))) void quant_groups_avx2(const Src* s, int64_t groups, int64_t gk,
                                                                     const float* inv, const float* pre,
                                                                     int64_t sc_stride, uint8_t flip, int8_t* d,
                                                                     int32_t* sums, int64_t sum_stride, uint32_t mult) {
  const __m256 magic = _mm256_set1_ps(12582912.0f), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m128i vflip = _mm_set1_epi8(static_cast<char>(flip));
  const __m128i vsum = _mm_set1_epi8(static_cast<char>(flip ? 0x00 : 0x80));  // to u8 for psadbw
  for (int64_t g = 0; g < groups; ++g) {
    const float fi = inv[g * sc_stride], fp = pre[g * sc_stride];
    const __m256 vinv = _mm256_set1_ps(fi), vpre = _mm256_set1_ps(fp);
    const Src* x = s + g * gk;
    int8_t* o = d + g * gk;
    __m128i acc = _mm_setzero_si128();
    int64_t j = 0;
    for (; j + 8 <= gk; j += 8) {
      __m256 t = _mm256_mul_ps(_mm256_mul_ps(load8(x + j), vpre), vinv);
      t = _mm256_sub_ps(_mm256_add_ps(t, magic), magic);
      t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);
      const __m256i q32 = _mm256_cvttps_epi32(t);
      const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
      const __m128i b = _mm_xor_si128(_mm_packs_epi16(q16, q16), vflip);  // bytes 0..7
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + j), b);
      acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_move_epi64(_mm_xor_si128(b, vsum)), _mm_setzero_si128()));
    }
    int32_t sum = _mm_cvtsi128_si32(acc) + _mm_cvtsi128_si32(_mm_unpackhi_epi64(acc, acc));
    for (; j < gk; ++j) {
      o[j] = static_cast<int8_t>(static_cast<uint8_t>(quant(scalar_value(x[j]), fi, fp)) ^ flip);
      sum += static_cast<uint8_t>(o[j]) ^ (flip ? 0x00 : 0x80);
    }
    if (sums) {
      if (!flip) sum -= static_cast<int32_t>(128 * gk);
      sums[g * sum_stride] = static_cast<int32_t>(static_cast<uint32_t>(sum) * mult);
    }
  }
}

struct SpanFuncs {
  // q = quant(v) ^ flip (flip 0x80: the u8 form q + 128)
  void (*f32)(const float*, int64_t, float, float, uint8_t, int8_t*);
  void (*bf16)(const uint16_t*, int64_t, float, float, uint8_t, int8_t*);
};

SpanFuncs span_funcs() {
  const qj_isa isa = max_isa();
  if (isa >= QJ_ISA_AVX512) return {quant_avx512_x<float>, quant_avx512_x<uint16_t>};
  if (isa >= QJ_ISA_AVX2) return {quant_f32_avx2, quant_bf16_avx2};
  return {quant_f32_base, quant_bf16_base};
}


// Integer A in s16 pairs (the vpmaddwd layout of the AVX2 / AVX-512 tiers): each pair of K values
// widened (u8 zero-, s8 sign-extended) into one dword, the partial last pair and the padding
// pairs zero-filled, rows past mr_t zero. Same result as the general loop, without its per-value
// type dispatch (which made packing most of a tall GEMM with small N and K on these tiers).
// With AVX2, 4 rows x 16 K at a time: widened to 8 pairs per row, transposed 4 x 8 by unpacks so
// that each pair's 4 rows are one 16-byte store; when the whole pairs are not a multiple of 8 the
// last block is the row's last 8 whole pairs (rewriting some: same values). Returns the pairs
// done for rows [0, rows4): all whole pairs, or 0 when there are fewer than 8.
template <class T>
__attribute__((target("avx2"))) static int64_t pairs_x4_avx2(const T* a, int64_t lda, int rows4, int mr,
                                                             int64_t kfull, uint8_t* dst) {
  if (kfull < 8) return 0;
  const int64_t blocks = (kfull + 7) / 8;
  const int64_t stride = static_cast<int64_t>(mr) * 4;
  for (int i0 = 0; i0 < rows4; i0 += 4) {
    const T* r = a + i0 * lda;
    uint8_t* o = dst + i0 * 4;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t kk0 = std::min(8 * b, kfull - 8);
      __m256i y[4];
      for (int q = 0; q < 4; ++q) {
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + q * lda + 2 * kk0));
        y[q] = std::is_signed_v<T> ? _mm256_cvtepi8_epi16(x) : _mm256_cvtepu8_epi16(x);
      }
      // y[q] 128-bit half h holds pairs kk0 + 4h .. kk0 + 4h + 3 of row q
      const __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
      const __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
      const __m256i u[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                            _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
      uint8_t* ob = o + kk0 * stride;
      for (int p = 0; p < 4; ++p) {  // u[p]: pair p (low half) and pair p + 4 (high half), rows 0..3
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ob + p * stride), _mm256_castsi256_si128(u[p]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ob + (p + 4) * stride), _mm256_extracti128_si256(u[p], 1));
      }
    }
  }
  return kfull;
}

// One-row tiles (the GEMV): the pairs of a row are its values widened to s16 in order. Returns
// the whole pairs done (a multiple of 8, all of them when kfull is).
template <class T>
__attribute__((target("avx2"))) static int64_t pairs_x1_avx2(const T* r, int64_t kfull, uint8_t* dst) {
  int64_t kk = 0;
  for (; kk + 8 <= kfull; kk += 8) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * kk));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kk * 4),
                        std::is_signed_v<T> ? _mm256_cvtepi8_epi16(x) : _mm256_cvtepu8_epi16(x));
  }
  return kk;
}

template <class T>
static void pack_a_tile_int_pairs(const PackASpec& s, const T* a, int64_t lda, int mr, int mr_t,
                                  uint8_t* dst, int32_t* row_sum) {
  const int64_t kgroups = s.kp / 2, kfull = s.k / 2;
  const bool avx2 = max_isa() >= QJ_ISA_AVX2;
  const bool one_row = avx2 && mr == 1 && mr_t == 1;
  const int rows4 = one_row ? 1 : avx2 ? mr_t / 4 * 4 : 0;  // rows the vector code starts
  const int64_t done = one_row ? pairs_x1_avx2(a, kfull, dst) : rows4 > 0 ? pairs_x4_avx2(a, lda, rows4, mr, kfull, dst) : 0;
  // Rows the vector loop finished (no odd K value, no padding pair, no row sums) need no more.
  const int first = done == kgroups && !s.row_sums ? rows4 : 0;
  const int64_t gk = s.row_sums ? s.k / s.groups : 0;
  for (int i = first; i < mr; ++i) {
    uint8_t* o = dst + i * 4;
    if (i >= mr_t) {
      for (int64_t kk = 0; kk < kgroups; ++kk) std::memset(o + kk * mr * 4, 0, 4);
      if (s.row_sums)
        for (int64_t g = 0; g < s.groups; ++g) row_sum[g * mr + i] = 0;
      continue;
    }
    const T* r = a + i * lda;
    for (int64_t kk = i < rows4 ? done : 0; kk < kfull; ++kk) {
      const uint32_t w = static_cast<uint16_t>(static_cast<int16_t>(r[2 * kk])) |
                         static_cast<uint32_t>(static_cast<uint16_t>(static_cast<int16_t>(r[2 * kk + 1]))) << 16;
      std::memcpy(o + kk * mr * 4, &w, 4);
    }
    for (int64_t kk = kfull; kk < kgroups; ++kk) {
      const int64_t j = 2 * kk;
      const uint32_t w = j < s.k ? static_cast<uint16_t>(static_cast<int16_t>(r[j])) : 0u;
      std::memcpy(o + kk * mr * 4, &w, 4);
    }
    if (s.row_sums) {
      for (int64_t g = 0; g < s.groups; ++g) {
        int32_t sum = 0;
        for (int64_t j = g * gk; j < (g + 1) * gk; ++j) sum += r[j];
        row_sum[g * mr + i] = static_cast<int32_t>(static_cast<uint32_t>(sum) * static_cast<uint32_t>(s.row_sum_mult));
      }
    }
  }
}

// Dynamic (fp32 / bf16) A: each row quantized into a contiguous int8 buffer first, then laid out
// as quads (kg = 4; shifted to u8 unless signed_quads) or s16 pairs (kg = 2). Same values and row
// sums as the general loop below.
void pack_a_tile_dynamic(const PackASpec& s, const void* a, int64_t lda, int mr, int mr_t,
                         const float* inv_scale, const float* pre_scale, uint8_t* dst,
                         int32_t* row_sum, PackAScratch& scratch) {
  reserve_pack_a_tile(s, mr, scratch);
  std::vector<int8_t>& buf = scratch.i8;
  const SpanFuncs fn = span_funcs();
  const int64_t kgroups = s.kp / s.kg;
  const int64_t gk = s.k / s.groups;
  const size_t esz = s.a_type == QJ_F32 ? 4 : 2;
  const bool to_u8 = s.kg == 4 && !s.signed_quads;  // the INT8 VNNI layout: q + 128
  // One row of quads is the quantized row itself: write it in place (the GEMV case). Otherwise
  // the tile's rows one after another in buf (kp apart), then laid out by transpose_quads (quads)
  // or pack_a_tile_int_pairs (s16 pairs of the int8 codes).
  const bool in_place = s.kg == 4 && mr == 1;
  const bool tile = !in_place;
  for (int i = 0; i < mr; ++i) {
    if (i >= mr_t) {  // padding rows of a partial tile: zeros
      std::memset(buf.data() + i * s.kp, 0, static_cast<size_t>(s.kp));
      if (s.row_sums)
        for (int64_t g = 0; g < s.groups; ++g) row_sum[g * mr + i] = 0;
      continue;
    }
    int8_t* q = in_place ? reinterpret_cast<int8_t*>(dst) : buf.data() + i * s.kp;
    const uint8_t* r = static_cast<const uint8_t*>(a) + i * lda * esz;
    const int64_t spans = s.group_quant ? s.groups : 1, len = s.group_quant ? gk : s.k;
    const uint8_t flip = to_u8 ? 0x80 : 0;
    // (k and kp in locals: q may alias the spec, so the loop would reload them per byte)
    const int64_t k = s.k, kp = s.kp;
    // AVX2 / AVX-512: the whole row in one pass with its group sums; otherwise span by span.
    const qj_isa isa = max_isa();
    const bool one_pass = (s.group_quant || s.row_sums) && isa >= QJ_ISA_AVX2;
    if (one_pass) {
      const int64_t sc_stride = s.group_quant ? mr : 0;
      const uint32_t mult = static_cast<uint32_t>(s.row_sum_mult);
      int32_t* sums = s.row_sums ? row_sum + i : nullptr;
      const float *fi = inv_scale + i, *fp = pre_scale + i;
      const float* rf = reinterpret_cast<const float*>(r);
      const uint16_t* rb = reinterpret_cast<const uint16_t*>(r);
      if (isa >= QJ_ISA_AVX512) {
        if (s.a_type == QJ_F32)
          quant_groups_avx512(rf, s.groups, gk, fi, fp, sc_stride, flip, q, sums, mr, mult);
        else
          quant_groups_avx512(rb, s.groups, gk, fi, fp, sc_stride, flip, q, sums, mr, mult);
      } else if (s.a_type == QJ_F32) {
        quant_groups_avx2(rf, s.groups, gk, fi, fp, sc_stride, flip, q, sums, mr, mult);
      } else {
        quant_groups_avx2(rb, s.groups, gk, fi, fp, sc_stride, flip, q, sums, mr, mult);
      }
    } else {
      for (int64_t g = 0; g < spans; ++g) {
        const int64_t f = s.group_quant ? g * mr + i : i;
        if (s.a_type == QJ_F32)
          fn.f32(reinterpret_cast<const float*>(r) + g * len, len, inv_scale[f], pre_scale[f], flip, q + g * len);
        else
          fn.bf16(reinterpret_cast<const uint16_t*>(r) + g * len, len, inv_scale[f], pre_scale[f], flip, q + g * len);
      }
    }
    for (int64_t j = k; j < kp; ++j) q[j] = 0;
    if (s.row_sums && !one_pass)
      for (int64_t g = 0; g < s.groups; ++g)
        row_sum[g * mr + i] = static_cast<int32_t>(static_cast<uint32_t>(sum_bytes(q + g * gk, gk, to_u8)) *
                                                   static_cast<uint32_t>(s.row_sum_mult));
  }
  if (!tile) return;
  if (s.kg == 4) {
    transpose_quads(reinterpret_cast<const uint8_t*>(buf.data()), s.kp, mr, kgroups, dst);
    return;
  }
  PackASpec codes = s;  // the whole padded rows (zeros past k), no row sums (done above)
  codes.k = s.kp;
  codes.groups = 1;
  codes.row_sums = false;
  pack_a_tile_int_pairs(codes, buf.data(), s.kp, mr, mr, dst, nullptr);
}

}  // namespace

// Integer A in quads (the VNNI layout, and the s8 quads of decoded weights): whole 4-byte groups
// laid out by transpose_quads and then sign-flipped in place where the type changes (s8 -> u8 for
// VNNI, u8 -> s8 for signed_quads), the partial last group and the padding groups filled per row.
// Row sums per group over the flipped values, in a loop that vectorizes. Same result as the
// general loop.
static void pack_a_tile_int_quads(const PackASpec& s, const uint8_t* a, int64_t lda, int mr,
                                  uint8_t* dst, int32_t* row_sum) {
  const int64_t kgroups = s.kp / 4, kfull = s.k / 4, k = s.k;
  const bool flip_sign = s.signed_quads ? s.a_type == QJ_U8 : s.a_type == QJ_S8;
  const uint8_t flip = flip_sign ? 0x80 : 0;
  transpose_quads(a, lda, mr, kfull, dst);
  if (flip)
    for (int64_t j = 0, n = kfull * mr * 4; j < n; ++j) dst[j] ^= flip;
  for (int i = 0; i < mr; ++i) {
    const uint8_t* r = a + i * lda;
    for (int64_t kk = kfull; kk < kgroups; ++kk) {
      uint8_t tail[4] = {0, 0, 0, 0};
      for (int64_t j = kk * 4; j < k && j < kk * 4 + 4; ++j) tail[j - kk * 4] = r[j] ^ flip;
      std::memcpy(dst + (kk * mr + i) * 4, tail, 4);
    }
    if (s.row_sums) {
      // The stored value is x ^ flip, read as s8 (signed_quads) or u8.
      const int64_t gk = k / s.groups;
      const uint32_t mult = static_cast<uint32_t>(s.row_sum_mult);
      for (int64_t g = 0; g < s.groups; ++g) {
        const int32_t sum = s.signed_quads ? sum_bytes_xor(r + g * gk, gk, flip ^ 0x80) - static_cast<int32_t>(128 * gk)
                                           : sum_bytes_xor(r + g * gk, gk, flip);
        row_sum[g * mr + i] = static_cast<int32_t>(static_cast<uint32_t>(sum) * mult);
      }
    }
  }
}

// dst[(kk * mr + i) * 4, + 4) = src[i * ld + 4 kk, + 4) for rows [0, mr) and quads [0, kq): 4 rows x
// 4 quads per step by a 4 x 4 dword transpose (SSE2), the last step of a row group overlapping
// the one before when kq is not a multiple of 4; leftover rows (and kq < 4) quad by quad.
void transpose_quads(const uint8_t* src, int64_t ld, int mr, int64_t kq, uint8_t* dst) {
  const int rows4 = kq >= 4 ? mr / 4 * 4 : 0;
  const int64_t stride = static_cast<int64_t>(mr) * 4;
  for (int i0 = 0; i0 < rows4; i0 += 4) {
    for (int64_t k0 = 0; k0 < kq; k0 += 4) {
      const int64_t kk = k0 + 4 <= kq ? k0 : kq - 4;
      const uint8_t* r = src + i0 * ld + 4 * kk;
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + ld));
      const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * ld));
      const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 3 * ld));
      const __m128i t0 = _mm_unpacklo_epi32(x0, x1), t1 = _mm_unpackhi_epi32(x0, x1);
      const __m128i t2 = _mm_unpacklo_epi32(x2, x3), t3 = _mm_unpackhi_epi32(x2, x3);
      uint8_t* o = dst + kk * stride + i0 * 4;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi64(t0, t2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + stride), _mm_unpackhi_epi64(t0, t2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * stride), _mm_unpacklo_epi64(t1, t3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * stride), _mm_unpackhi_epi64(t1, t3));
    }
  }
  for (int i = rows4; i < mr; ++i)
    for (int64_t kk = 0; kk < kq; ++kk) std::memcpy(dst + kk * stride + i * 4, src + i * ld + 4 * kk, 4);
}

void dynamic_scales(float amax, float* inv_scale, float* pre_scale, float* row_scale) {
  *pre_scale = 1.0f;
  *inv_scale = amax > 0.0f ? 127.0f / amax : 0.0f;
  *row_scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  if (std::isinf(*inv_scale)) {  // tiny amax: scale v and amax up by 2^100 first (exact)
    *pre_scale = 0x1p100f;
    *inv_scale = 127.0f / (amax * 0x1p100f);
  }
}

namespace {

// 16 rows per step: both divisions of dynamic_scales as vdivps, the tiny-amax rows (127 / amax
// overflows) redone by the scalar function.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void dynamic_scales_avx512(
    const float* amax, int64_t n, float* inv_scale, float* pre_scale, float* row_scale) {
  const __m512 c127 = _mm512_set1_ps(127.0f), one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, amax + i);
    const __mmask16 pos = _mm512_mask_cmp_ps_mask(m, x, zero, _CMP_GT_OQ);
    const __m512 inv = _mm512_maskz_div_ps(pos, c127, x);                     // else 0
    const __m512 rsc = _mm512_mask_div_ps(one, pos, x, c127);                 // else 1
    _mm512_mask_storeu_ps(inv_scale + i, m, inv);
    _mm512_mask_storeu_ps(row_scale + i, m, rsc);
    _mm512_mask_storeu_ps(pre_scale + i, m, one);
    uint32_t big = _mm512_mask_cmp_ps_mask(m, inv, inf, _CMP_EQ_OQ);
    for (; big; big &= big - 1) {
      const int64_t r = i + __builtin_ctz(big);
      dynamic_scales(amax[r], &inv_scale[r], &pre_scale[r], &row_scale[r]);
    }
  }
}

}  // namespace

void dynamic_scales_n(const float* amax, int64_t n, float* inv_scale, float* pre_scale, float* row_scale) {
  if (max_isa() >= QJ_ISA_AVX512) {
    dynamic_scales_avx512(amax, n, inv_scale, pre_scale, row_scale);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dynamic_scales(amax[i], &inv_scale[i], &pre_scale[i], &row_scale[i]);
}

void reserve_pack_a_tile(const PackASpec& s, int mr, PackAScratch& scratch) {
  // Dynamic A (pack_a_tile_dynamic) quantizes the tile's rows into i8 first, unless one row of
  // quads is written in place. Integer A needs no buffer.
  const bool dynamic = s.a_type == QJ_F32 || s.a_type == QJ_BF16;
  if (dynamic && !(s.kg == 4 && mr == 1)) grow(scratch.i8, static_cast<size_t>(s.kp) * mr);
}

void pack_a_tile(const PackASpec& s, const void* a, int64_t lda, int mr, int mr_t,
                 const float* inv_scale, const float* pre_scale, uint8_t* dst, int32_t* row_sum,
                 PackAScratch& scratch) {
  if (s.kg == 4 && mr_t == mr && (s.a_type == QJ_U8 || s.a_type == QJ_S8)) {
    pack_a_tile_int_quads(s, static_cast<const uint8_t*>(a), lda, mr, dst, row_sum);
    return;
  }
  if (s.a_type == QJ_F32 || s.a_type == QJ_BF16) {
    pack_a_tile_dynamic(s, a, lda, mr, mr_t, inv_scale, pre_scale, dst, row_sum, scratch);
    return;
  }
  if (s.kg == 2 && s.a_type == QJ_U8) {
    pack_a_tile_int_pairs(s, static_cast<const uint8_t*>(a), lda, mr, mr_t, dst, row_sum);
    return;
  }
  if (s.kg == 2 && s.a_type == QJ_S8) {
    pack_a_tile_int_pairs(s, static_cast<const int8_t*>(a), lda, mr, mr_t, dst, row_sum);
    return;
  }
  const int64_t kgroups = s.kp / s.kg;
  const int64_t gk = s.k / s.groups;  // K per scale group
  if (s.row_sums)
    for (int64_t g = 0; g < s.groups; ++g)
      for (int i = 0; i < mr; ++i) row_sum[g * mr + i] = 0;
  for (int i = 0; i < mr; ++i) {
    int32_t* rs = row_sum;
    if (i >= mr_t) {  // padding rows of a partial tile: zeros
      for (int64_t kk = 0; kk < kgroups; ++kk) std::memset(dst + (kk * mr + i) * 4, 0, 4);
      continue;
    }
    int32_t vals[4];
    for (int64_t kk = 0; kk < kgroups; ++kk) {
      for (int r = 0; r < s.kg; ++r) {
        int64_t j = kk * s.kg + r;
        int32_t v = 0;
        if (j < s.k) {
          switch (s.a_type) {
            case QJ_U8: v = static_cast<const uint8_t*>(a)[i * lda + j]; break;
            case QJ_S8: v = static_cast<const int8_t*>(a)[i * lda + j]; break;
            case QJ_F32: {
              const int64_t f = s.group_quant ? (j / gk) * mr + i : i;
              v = quant(static_cast<const float*>(a)[i * lda + j], inv_scale[f], pre_scale[f]);
              break;
            }
            default: {
              const int64_t f = s.group_quant ? (j / gk) * mr + i : i;
              v = quant(bf16_to_f32(static_cast<const uint16_t*>(a)[i * lda + j]), inv_scale[f], pre_scale[f]);
              break;
            }
          }
          if (s.signed_quads) {
            if (s.a_type == QJ_U8) v -= 128;  // the signed operand: u8 shifted into s8
          } else if (s.kg == 4 && s.a_type != QJ_U8) {
            v += 128;  // VNNI wants u8: shift s8 / dynamic values
          }
          if (s.row_sums) rs[(j / gk) * mr + i] += v;
        }
        vals[r] = v;
      }
      uint8_t* o = dst + (kk * mr + i) * 4;  // (s8 quads wrap into bytes as two's complement)
      if (s.kg == 4) {
        for (int r = 0; r < 4; ++r) o[r] = static_cast<uint8_t>(vals[r]);
      } else {
        int16_t w[2] = {static_cast<int16_t>(vals[0]), static_cast<int16_t>(vals[1])};
        std::memcpy(o, w, 4);
      }
    }
  }
  if (s.row_sums && s.row_sum_mult != 1)
    for (int64_t g = 0; g < s.groups; ++g)
      for (int i = 0; i < mr; ++i)
        row_sum[g * mr + i] = static_cast<int32_t>(static_cast<uint32_t>(row_sum[g * mr + i]) *
                                                   static_cast<uint32_t>(s.row_sum_mult));
}

void pack_a_float_tile(qj_dtype a_type, const void* a, int64_t lda, int mr, int mr_t, int64_t k,
                       int64_t kp, float* dst) {
  // K outer, rows inner: the writes are one sequential stream (the reads are mr_t short streams).
  if (a_type == QJ_F32) {
    const float* r = static_cast<const float*>(a);
    for (int64_t j = 0; j < k; ++j, dst += mr) {
      for (int i = 0; i < mr_t; ++i) dst[i] = r[i * lda + j];
      for (int i = mr_t; i < mr; ++i) dst[i] = 0.0f;
    }
  } else {
    const uint16_t* r = static_cast<const uint16_t*>(a);
    for (int64_t j = 0; j < k; ++j, dst += mr) {
      for (int i = 0; i < mr_t; ++i) dst[i] = bf16_to_f32(r[i * lda + j]);
      for (int i = mr_t; i < mr; ++i) dst[i] = 0.0f;
    }
  }
  for (int64_t j = k; j < kp; ++j, dst += mr)
    for (int i = 0; i < mr; ++i) dst[i] = 0.0f;
}

}  // namespace qj
