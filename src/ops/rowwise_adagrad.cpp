// Fused row-wise AdaGrad / SGD driver and its vectorized row update (see rowwise_adagrad.h).
//
// Where the time goes (perf on this machine, 1000 lookups per call, fp32 rows): a call is about
// one memory round trip per row plus the row's arithmetic, so the driver is built to keep the row
// loads in flight and the per-row arithmetic short:
//  - coalescing is a hash grouping (open addressing, reused thread-local scratch, no clearing:
//    slots carry the call's generation) that finds the rows occurring more than once and chains
//    their occurrences in position order. The order in which rows are updated does not affect
//    any result (each row is written once, from its own occurrences only), so no sort is needed.
//  - a row that occurs once has G = fma(e, g_bag, 0) with its occurrence's factor e: exactly what
//    the per-occurrence mode applies. So both modes share the bag loop (occurrence_range), the
//    coalesced one skipping the repeated rows' positions, which it updates afterwards. For
//    unweighted pooling (e = 1 or 1 / len for the whole bag) G and its sum of squares are the
//    bag's, computed once per bag (as FBGEMM computes its per-bag square sum once); a row then
//    costs one fused load-fma-store pass, like FBGEMM's per-occurrence kernel.
//  - the rows (and momentum entries) of the rows a few places ahead are prefetched (small rows
//    of tables larger than the L3 also farther ahead into L2, see run_tier).
//  - indices are range-checked while they are grouped (per-occurrence mode: one branch-free pass
//    first); the exact error message is then produced by the shared scalar validator. Either way
//    this happens before anything is written.
// Every path performs the reference's operations in the reference's order (G summed over the
// row's occurrences by position, the 8-lane sum of squares in increasing j), so every tier and
// every thread count gives the reference's bits.
#include "src/ops/rowwise_adagrad.h"

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their own "undefined" vector
// temporaries ('__Y') once inlined into the per-tier loops here; the values are never used.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "src/core/isa.h"
#include "src/core/status.h"
#include "src/core/threading.h"
#include "src/formats/fp16_stochastic.h"
#include "src/formats/half.h"
#include "src/ops/embedding_bag.h"

namespace qj {
namespace {

#define QJ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QJ_AVX2_INL __attribute__((target("avx2,fma,f16c"), always_inline))
#define QJ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define QJ_AVX512_LAMBDA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"), always_inline))
#define QJ_AVX512_INL __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"), always_inline))

int64_t load_int(const void* p, int bits, int64_t i) {
  if (bits == 32) return static_cast<const int32_t*>(p)[i];
  return static_cast<const int64_t*>(p)[i];
}

// prefetchw (PREFETCHW, in every x86-64 CPU with AVX2): the rows are written back. Every line of
// the row (the first and last may be shared with neighbours). Prefetching all of a row's lines
// matters for cold rows: the first line only is 3x slower at dim 128.
inline void prefetch_w(const void* p) { asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p))); }
// The prefetch of a line of a row ahead (and of its momentum entry): prefetchw into L1, or
// prefetcht1 into L2 (l2) for rows of 512 bytes or more in tables larger than the last-level
// cache, whose rows come from DRAM. A prefetch into L1 holds one of L1's few miss buffers until
// the line arrives, which caps the rows in flight; L2 tracks many more misses. Measured on Zen 4
// (1M-row tables on 2 MiB pages, rows flushed before each call, ~1000 lookups, us per call,
// prefetchw -> prefetcht1): fp32 dim 128 51 -> 27, dim 1024 385 -> 210; fp16 dim 256 66 -> 25,
// dim 1024 275 -> 142; with the rows already cached within a few percent. Smaller rows keep
// prefetchw (plus a farther prefetcht1, Job::far_dist): prefetcht1 alone was bimodal on them
// (fp16 dim 64: 14 or 53 against 24; again 2026-12-01, 12-16 or 51-52), slow whenever
// the table sat on 4 KiB pages (measured with --pages 4k: a prefetcht1 that misses the TLB seems
// to be dropped, prefetchw walks the page table). On Zen 5 every row takes prefetchw alone
// (run_tier). The flag is a constant in each instantiation of the driver, so the branch folds
// away.
__attribute__((always_inline)) inline void prefetch_ahead(const void* p, bool l2) {
  if (l2)
    asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
  else
    prefetch_w(p);
}
// ---- scalar tails / scalar tier (the reference's formulas) ----
float finish_mean(const float* P, int64_t dim) {
  return (((P[0] + P[1]) + (P[2] + P[3])) + ((P[4] + P[5]) + (P[6] + P[7]))) / static_cast<float>(dim);
}
void upd32_tail(float* w, const float* G, float step, int64_t j, int64_t dim) {
  for (; j < dim; ++j) w[j] = std::fma(-step, G[j], w[j]);
}
void upd16_tail(uint16_t* w, const float* G, float step, int64_t j, int64_t dim, bool sr, uint32_t key) {
  for (; j < dim; ++j) {
    float v = std::fma(-step, G[j], f16_to_f32(w[j]));
    w[j] = sr ? f32_to_f16_stochastic(v, sr_bits(key, static_cast<uint32_t>(j))) : f32_to_f16(v);
  }
}

// One row of a run of rows updated with the same G (see rows below): the row, its step and
// stochastic-rounding key, and the row to prefetch while updating it.
struct RowRef {
  char* w;
  float step;
  uint32_t key;
  const char* pf;
};

// The row operations of one tier (static members; the driver template below is instantiated once
// per tier and calls them directly):
//   first(G, g, e, dim, want)  G[j] = fma(e, g[j], 0); returns the mean of squares if want
//   acc(G, g, e, dim)          G[j] = fma(e, g[j], G[j])
//   mean_sq(G, dim)            the reference's 8-lane sum of squares / dim
//   upd32(w, G, step, dim)     w[j] = fma(-step, G[j], w[j])
//   upd16(w, G, step, dim, sr, key)  widen, fma, round (nearest even or stochastic)
//   kRegisterRows, rows_ok(dim, half), rows<kTable>(G, dim, n, next)  (AVX-512) the rows
//                              next(0 .. n-1) (a RowRef each) updated in order with G (up to 256
//                              values of it) held in registers, for the dims rows_ok accepts (for
//                              others the driver updates them one by one)
struct ScalarOps {
  static constexpr bool kRegisterRows = false;
  static float mean_sq(const float* G, int64_t dim) {
    float P[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < dim; ++j) P[j % 8] = std::fma(G[j], G[j], P[j % 8]);
    return finish_mean(P, dim);
  }
  static float first(float* G, const float* g, float e, int64_t dim, bool want) {
    for (int64_t j = 0; j < dim; ++j) G[j] = std::fma(e, g[j], 0.0f);
    return want ? mean_sq(G, dim) : 0.0f;
  }
  static void acc(float* G, const float* g, float e, int64_t dim) {
    for (int64_t j = 0; j < dim; ++j) G[j] = std::fma(e, g[j], G[j]);
  }
  static void upd32(float* w, const float* G, float step, int64_t dim, const char*, bool) {
    upd32_tail(w, G, step, 0, dim);
  }
  static void upd16(uint16_t* w, const float* G, float step, int64_t dim, bool sr, uint32_t key, const char*, bool) {
    upd16_tail(w, G, step, 0, dim, sr, key);
  }
};

// ---- AVX2 ----

struct Avx2Ops {
  static constexpr bool kRegisterRows = false;
  QJ_AVX2 static float mean_sq(const float* G, int64_t dim) {
    __m256 P = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8) {
      __m256 v = _mm256_loadu_ps(G + j);
      P = _mm256_fmadd_ps(v, v, P);
    }
    alignas(32) float p[8];
    _mm256_store_ps(p, P);
    for (int k = 0; j < dim; ++j, ++k) p[k] = std::fma(G[j], G[j], p[k]);
    return finish_mean(p, dim);
  }
  QJ_AVX2 static float first(float* G, const float* g, float e, int64_t dim, bool want) {
    const __m256 ev = _mm256_set1_ps(e), z = _mm256_setzero_ps();
    __m256 P = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8) {
      const __m256 v = _mm256_fmadd_ps(ev, _mm256_loadu_ps(g + j), z);
      _mm256_storeu_ps(G + j, v);
      P = _mm256_fmadd_ps(v, v, P);
    }
    alignas(32) float p[8];
    _mm256_store_ps(p, P);
    for (int k = 0; j < dim; ++j, ++k) {
      G[j] = std::fma(e, g[j], 0.0f);
      p[k] = std::fma(G[j], G[j], p[k]);
    }
    return want ? finish_mean(p, dim) : 0.0f;
  }
  QJ_AVX2 static void acc(float* G, const float* g, float e, int64_t dim) {
    const __m256 ev = _mm256_set1_ps(e);
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8)
      _mm256_storeu_ps(G + j, _mm256_fmadd_ps(ev, _mm256_loadu_ps(g + j), _mm256_loadu_ps(G + j)));
    for (; j < dim; ++j) G[j] = std::fma(e, g[j], G[j]);
  }
  QJ_AVX2_INL static void upd32(float* w, const float* G, float step, int64_t dim, const char* pf, bool l2) {
    const __m256 s = _mm256_set1_ps(-step);
    int64_t j = 0;
    for (; j + 16 <= dim; j += 16) {
      prefetch_ahead(pf + 4 * j, l2);
      const __m256 a = _mm256_fmadd_ps(s, _mm256_loadu_ps(G + j), _mm256_loadu_ps(w + j));
      const __m256 b = _mm256_fmadd_ps(s, _mm256_loadu_ps(G + j + 8), _mm256_loadu_ps(w + j + 8));
      _mm256_storeu_ps(w + j, a);
      _mm256_storeu_ps(w + j + 8, b);
    }
    for (; j + 8 <= dim; j += 8)
      _mm256_storeu_ps(w + j, _mm256_fmadd_ps(s, _mm256_loadu_ps(G + j), _mm256_loadu_ps(w + j)));
    prefetch_ahead(pf + 4 * dim - 1, l2);
    upd32_tail(w, G, step, j, dim);
  }
  QJ_AVX2_INL static void upd16(uint16_t* w, const float* G, float step, int64_t dim, bool sr, uint32_t key, const char* pf, bool l2) {
    const __m256 s = _mm256_set1_ps(-step);
    // sr_bits: the vectors at j % 32 = 0 and 8 form the products P(j + lane) (j * golden advances
    // by 8 * golden per vector) and use their top fields; those at 16 and 24 reuse them (low fields)
    __m256i jg = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                    _mm256_set1_epi32(static_cast<int>(0x9E3779B9u)));
    const __m256i jstep = _mm256_set1_epi32(static_cast<int>(8u * 0x9E3779B9u));
    const __m256i keyv = _mm256_set1_epi32(static_cast<int>(key));
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), big = _mm256_set1_epi32(0x477fffff);
    const __m256i mulv = _mm256_set1_epi32(static_cast<int>(0x2C1B3C6Du));
    const __m256i low13 = _mm256_set1_epi32(0x1fff);
    __m256i P[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    int64_t j = 0;
    prefetch_ahead(pf + 2 * dim - 1, l2);
    for (; j + 8 <= dim; j += 8) {
      if ((j & 31) == 0) prefetch_ahead(pf + 2 * j, l2);
      __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + j)));
      __m256 v = _mm256_fmadd_ps(s, _mm256_loadu_ps(G + j), x);
      __m128i h;
      if (sr) {
        const int slot = static_cast<int>((j >> 3) & 1);
        __m256i r;
        if ((j & 16) == 0) {
          P[slot] = _mm256_mullo_epi32(_mm256_xor_si256(keyv, jg), mulv);
          r = _mm256_srli_epi32(P[slot], 19);
        } else {
          r = _mm256_and_si256(_mm256_srli_epi32(P[slot], 6), low13);
        }
        __m256i vb = _mm256_castps_si256(v);
        // add r where |v| < 65536 only (f32_to_f16_stochastic): the others as a lane mask
        __m256i large = _mm256_cmpgt_epi32(_mm256_and_si256(vb, absmask), big);
        vb = _mm256_add_epi32(vb, _mm256_andnot_si256(large, r));
        h = _mm256_cvtps_ph(_mm256_castsi256_ps(vb), _MM_FROUND_TO_ZERO);
        jg = _mm256_add_epi32(jg, jstep);
      } else {
        h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
      }
      asm("" : "+x"(h));  // keeps vcvtps2ph in its register form (the memory form is slow on Zen 4)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(w + j), h);
    }
    upd16_tail(w, G, step, j, dim, sr, key);
  }
};

// ---- AVX-512 tier: 256-bit vectors with AVX-512VL masks for the tails ----
// Measured on Zen 4: 512-bit vcvtph2ps / vcvtps2ph run at about half the per-element rate of two
// 256-bit ones, and a 512-bit vcvtps2ph with a memory destination at about a third; fp32 rows are
// no faster with zmm either (stores are the limit), so the row operations stay on ymm and use the
// masks only to finish a row without a scalar tail.
QJ_AVX512 inline __mmask8 tail8(int64_t n) {
  return n >= 8 ? static_cast<__mmask8>(0xff) : static_cast<__mmask8>((1u << n) - 1u);
}
// keeps vcvtps2ph in its register form (the memory form is slow on Zen 4)
#define QJ_IN_REGISTER(x) asm("" : "+v"(x))


struct Avx512Ops {
  static constexpr bool kRegisterRows = true;
  QJ_AVX512 static float mean_sq(const float* G, int64_t dim) {
    __m256 P = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8) {
      __m256 v = _mm256_loadu_ps(G + j);
      P = _mm256_fmadd_ps(v, v, P);
    }
    if (j < dim) {
      __mmask8 m = tail8(dim - j);
      __m256 v = _mm256_maskz_loadu_ps(m, G + j);
      P = _mm256_mask3_fmadd_ps(v, v, P, m);
    }
    alignas(32) float p[8];
    _mm256_store_ps(p, P);
    return finish_mean(p, dim);
  }
  // (first / acc: whole vectors with plain stores, the tail masked: see upd16)
  QJ_AVX512 static float first(float* G, const float* g, float e, int64_t dim, bool want) {
    const __m256 ev = _mm256_set1_ps(e), z = _mm256_setzero_ps();
    __m256 P = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8) {
      const __m256 v = _mm256_fmadd_ps(ev, _mm256_loadu_ps(g + j), z);
      _mm256_storeu_ps(G + j, v);
      P = _mm256_fmadd_ps(v, v, P);
    }
    if (j < dim) {
      const __mmask8 m = tail8(dim - j);
      const __m256 v = _mm256_fmadd_ps(ev, _mm256_maskz_loadu_ps(m, g + j), z);
      _mm256_mask_storeu_ps(G + j, m, v);
      P = _mm256_mask3_fmadd_ps(v, v, P, m);  // lanes past the row keep their partial sums
    }
    if (!want) return 0.0f;
    alignas(32) float p[8];
    _mm256_store_ps(p, P);
    return finish_mean(p, dim);
  }
  QJ_AVX512 static void acc(float* G, const float* g, float e, int64_t dim) {
    const __m256 ev = _mm256_set1_ps(e);
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8)
      _mm256_storeu_ps(G + j, _mm256_fmadd_ps(ev, _mm256_loadu_ps(g + j), _mm256_loadu_ps(G + j)));
    if (j < dim) {
      const __mmask8 m = tail8(dim - j);
      _mm256_mask_storeu_ps(G + j, m, _mm256_fmadd_ps(ev, _mm256_maskz_loadu_ps(m, g + j), _mm256_maskz_loadu_ps(m, G + j)));
    }
  }
  QJ_AVX512_INL static void upd32(float* w, const float* G, float step, int64_t dim, const char* pf, bool l2) {
    const __m512 s = _mm512_set1_ps(-step);
    int64_t j = 0;
    for (; j + 16 <= dim; j += 16) {
      prefetch_ahead(pf + 4 * j, l2);
      _mm512_storeu_ps(w + j, _mm512_fmadd_ps(s, _mm512_loadu_ps(G + j), _mm512_loadu_ps(w + j)));
    }
    prefetch_ahead(pf + 4 * dim - 1, l2);
    if (j < dim) {
      const __mmask16 m = static_cast<__mmask16>((1u << (dim - j)) - 1u);
      _mm512_mask_storeu_ps(w + j, m, _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(m, G + j), _mm512_maskz_loadu_ps(m, w + j)));
    }
  }
  QJ_AVX512_INL static void upd16(uint16_t* w, const float* G, float step, int64_t dim, bool sr, uint32_t key, const char* pf, bool l2) {
    const __m256 s = _mm256_set1_ps(-step);
    prefetch_ahead(pf + 2 * dim - 1, l2);
    if (!sr) {
      // Whole vectors with plain loads and stores, the tail masked (a masked store in every
      // vector took 1.9x the time of the register-held-G rows at dim 512; see rows_nv).
      int64_t j = 0;
      for (; j + 8 <= dim; j += 8) {
        if ((j & 31) == 0) prefetch_ahead(pf + 2 * j, l2);
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + j)));
        __m256 v = _mm256_fmadd_ps(s, _mm256_loadu_ps(G + j), x);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        QJ_IN_REGISTER(h);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(w + j), h);
      }
      if (j < dim) {
        if ((j & 31) == 0) prefetch_ahead(pf + 2 * j, l2);
        const __mmask8 m = tail8(dim - j);
        __m256 x = _mm256_cvtph_ps(_mm_maskz_loadu_epi16(m, w + j));
        __m256 v = _mm256_fmadd_ps(s, _mm256_maskz_loadu_ps(m, G + j), x);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        QJ_IN_REGISTER(h);
        _mm_mask_storeu_epi16(w + j, m, h);
      }
      return;
    }
    // sr_bits per block of 32 elements: one product vector P(j + lane), its top fields for
    // w[j..j+16), its low fields for w[j+16..j+32). 512-bit here: measured 8-10% faster than ymm
    // with the hash (a zmm op is one dispatch slot on Zen 4), while the rounding-to-nearest path
    // is faster on ymm.
    const __m512 s5 = _mm512_set1_ps(-step);
    const __m512i keyv = _mm512_set1_epi32(static_cast<int>(key));
    // one 16-lane step: the stochastic rounding of w[j..j+16) under mask m with random bits r
    auto step16 = [&](int64_t j, __mmask16 m, __m512i r) QJ_AVX512_LAMBDA {
      __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + j));
      __m512 v = _mm512_fmadd_ps(s5, _mm512_maskz_loadu_ps(m, G + j), x);
      __m256i h = _mm512_cvtps_ph(sr_add(v, r), _MM_FROUND_TO_ZERO);
      QJ_IN_REGISTER(h);
      _mm256_mask_storeu_epi16(w + j, m, h);
    };
    auto mask16 = [&](int64_t j) QJ_AVX512_LAMBDA {
      return dim - j >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (dim - j)) - 1u);
    };
    // (j + lane) * golden advanced by a vector add: a broadcast of j * golden from a general
    // register per block cost 10% of this loop (fp16 dim 256 in L1: 6.6 -> 5.9 cycles per 16).
    __m512i jg = sr_lane_golden();
    const __m512i jstep = _mm512_set1_epi32(static_cast<int>(32u * 0x9E3779B9u));
    int64_t j = 0;
    for (; j + 32 <= dim; j += 32) {  // 64 bytes of the row: one prefetch
      prefetch_ahead(pf + 2 * j, l2);
      const __m512i P = sr_mix(keyv, jg);
      jg = _mm512_add_epi32(jg, jstep);
      step16(j, 0xffff, sr_top(P));  // constant masks: plain loads and stores
      step16(j + 16, 0xffff, sr_low(P));
    }
    if (j < dim) {
      const __m512i P = sr_mix(keyv, jg);
      step16(j, mask16(j), sr_top(P));
      if (j + 16 < dim) step16(j + 16, mask16(j + 16), sr_low(P));
    }
  }
  // sr_bits (src/formats/fp16_stochastic.h) for a block of 32 elements from j0 (a multiple of
  // 32): P(j0 + lane) for the 16 lanes, whose top fields serve w[j0..j0+16) and low fields
  // w[j0+16..j0+32). sr_mix makes P from jg = (j0 + lane) * golden, which the callers start at
  // sr_lane_golden() and advance by 32 * golden per block.
  QJ_AVX512_INL static __m512i sr_lane_golden() {  // lane * golden (a constant the compiler folds)
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32(static_cast<int>(0x9E3779B9u)));
  }
  QJ_AVX512_INL static __m512i sr_mix(__m512i keyv, __m512i jg) {
    return _mm512_mullo_epi32(_mm512_xor_si512(keyv, jg), _mm512_set1_epi32(static_cast<int>(0x2C1B3C6Du)));
  }
  // The stochastic-rounding add of f32_to_f16_stochastic: the random bits r added to the bits of
  // values with |v| < 65536; NaN and inf pass unchanged. |v| is first clamped to 65536 (vrangeps:
  // the smaller magnitude, v's sign), which rounds toward zero to +-65504 with or without r and
  // cannot carry into the exponent; vfixupimmps then puts v back in the lanes it classifies as
  // QNaN, SNaN, -inf or +inf (table nibbles 0, 1, 4, 5 = 1: pass the source; 0 elsewhere: keep
  // the sum). Measured slower (fp16 dim 256 warm, us per call, against ~21-23 with vrangeps or
  // with no clamp): a masked add on a compare of |v|'s bits 24.4-24.7, a signed and an unsigned
  // min of the bits 30.2-30.6; and before, vfpclassps + a masked add.
  QJ_AVX512_INL static __m512 sr_add(__m512 v, __m512i r) {
    const __m512 c = _mm512_range_ps(v, _mm512_set1_ps(65536.0f), 2);
    const __m512 sum = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(c), r));
    return _mm512_fixupimm_ps(sum, v, _mm512_set1_epi32(0x00110011), 0);
  }
  QJ_AVX512_INL static __m512i sr_top(__m512i P) { return _mm512_srli_epi32(P, 19); }
  QJ_AVX512_INL static __m512i sr_low(__m512i P) {
    return _mm512_and_si512(_mm512_srli_epi32(P, 6), _mm512_set1_epi32(0x1fff));
  }
  // Rows with G in registers: NV vectors of 16 (dim = 16 NV <= 256), loaded once for the whole
  // run instead of once per row. Measured on Zen 4 (warm, fp32 dim 128, 1000 rows): 14.7 -> 10.4
  // us per call. fp32 rows use zmm in this form; fp16 rows take ymm halves through vcvtph2ps /
  // vcvtps2ph (faster than zmm there, see above), with the stochastic rounding on zmm as upd16.
  // fp16 rows of 272 to 512 values (NV = 16, `extra` more vectors) hold the first 256 values of
  // G in registers and load the rest in a loop, as rows_f32_wide does (before, the per-row
  // update: 2026-12-02, Zen 4, warm, ~1000 rows, the two builds' calls alternating in one
  // process, median time ratio new / old: SR dim 512 / 320 0.980 / 0.969, with 16 MB read between
  // calls dim 512 / 400 0.959 / 1.009; round to nearest dim 512 / 320 0.536 / 0.558). Fully
  // unrolled (an instantiation per width) SR gained more (0.95 / 0.94) but took the
  // sanitizer build of this file from 236 to 408 s; this form 273 s.
  template <int kTable, int NV, class Next>
  QJ_AVX512_INL static void rows_nv(const float* G, int64_t n, Next&& next, bool l2, int64_t extra = 0) {
    __m512 gv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) gv[v] = _mm512_loadu_ps(G + 16 * v);
    // fp16 tables: the next row's step is formed first, as in rows_f32_wide (measured warm,
    // 1000 rows: dim 64 / 128 / 256 10.9 / 16.1 / 24.5 -> 9.8 / 14.1 / 23.4 us); fp32 rows up to
    // 256 values did not gain (within noise, dim 256 a few percent slower).
    RowRef nx = next(0);
    for (int64_t i = 0; i < n; ++i) {
      const RowRef r = kTable != 0 || i == 0 ? nx : next(i);
      if (kTable != 0 && i + 1 < n) nx = next(i + 1);
      const __m512 s = _mm512_set1_ps(-r.step);
      if constexpr (kTable == 0) {
        float* w = reinterpret_cast<float*>(r.w);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) {
          prefetch_ahead(r.pf + 64 * v, l2);
          _mm512_storeu_ps(w + 16 * v, _mm512_fmadd_ps(s, gv[v], _mm512_loadu_ps(w + 16 * v)));
        }
      } else {
        uint16_t* w = reinterpret_cast<uint16_t*>(r.w);
        const __m512i keyv = _mm512_set1_epi32(static_cast<int>(r.key));
        __m512i P = _mm512_setzero_si512();  // sr_mix of the block of 32 that vector v is in
        __m512i jg = sr_lane_golden();        // advanced by vector adds, as in upd16
        const __m512i jstep = _mm512_set1_epi32(static_cast<int>(32u * 0x9E3779B9u));
        // Vector v of the row with G's vector g; even: the first of its block of 32 (a constant
        // wherever this inlines).
        auto vec = [&](int64_t v, __m512 g, bool even) QJ_AVX512_LAMBDA {
          if (even) prefetch_ahead(r.pf + 32 * v, l2);
          if constexpr (kTable == 1) {
            const __m256 s8 = _mm512_castps512_ps256(s);
            for (int half = 0; half < 2; ++half) {
              const __m256 g8 = half ? _mm512_extractf32x8_ps(g, 1) : _mm512_castps512_ps256(g);
              uint16_t* p = w + 16 * v + 8 * half;
              __m128i h = _mm256_cvtps_ph(
                  _mm256_fmadd_ps(s8, g8, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))),
                  _MM_FROUND_TO_NEAREST_INT);
              QJ_IN_REGISTER(h);
              _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
            }
          } else {
            // as upd16's step16: sr_bits added to finite values
            const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 * v)));
            const __m512 val = _mm512_fmadd_ps(s, g, x);
            if (even) {
              P = sr_mix(keyv, jg);
              jg = _mm512_add_epi32(jg, jstep);
            }
            __m256i h = _mm512_cvtps_ph(sr_add(val, even ? sr_top(P) : sr_low(P)), _MM_FROUND_TO_ZERO);
            QJ_IN_REGISTER(h);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + 16 * v), h);
          }
        };
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) vec(v, gv[v], v % 2 == 0);
        // fp16 rows past 256 values (NV = 16): the rest of G loaded (NV is even)
        for (int64_t v = NV; v < NV + extra; v += 2) {
          vec(v, _mm512_loadu_ps(G + 16 * v), true);
          if (v + 1 < NV + extra) vec(v + 1, _mm512_loadu_ps(G + 16 * (v + 1)), false);
        }
      }
    }
  }
  // The dims rows() takes (fp16: half = true).
  static bool rows_ok(int64_t dim, bool half) { return dim % 16 == 0 && (dim <= 512 || !half); }
  // Requires rows_ok(dim, kTable != 0).
  template <int kTable, class Next>
  QJ_AVX512_INL static void rows(const float* G, int64_t dim, int64_t n, Next&& next, bool l2) {
    switch (dim / 16) {
#define QJ_NV(nv)                       \
  case nv:                              \
    rows_nv<kTable, nv>(G, n, next, l2); \
    return;
      QJ_NV(1) QJ_NV(2) QJ_NV(3) QJ_NV(4) QJ_NV(5) QJ_NV(6) QJ_NV(7) QJ_NV(8)
      QJ_NV(9) QJ_NV(10) QJ_NV(11) QJ_NV(12) QJ_NV(13) QJ_NV(14) QJ_NV(15) QJ_NV(16)
#undef QJ_NV
      default:
        if constexpr (kTable == 0) {
          rows_f32_wide(G, dim, n, next, l2);  // dim > 256 (rows_ok)
        } else {
          rows_nv<kTable, 16>(G, n, next, l2, dim / 16 - 16);  // fp16, 256 < dim <= 512 (rows_ok)
        }
    }
  }
  // fp32 rows with dim = 16 NV > 256: the first 256 values of G in registers, the rest loaded
  // (steady-state harness, 1000 rows, dim 512: 49.3 -> 41.5 us per call; FBGEMM 39.6).
  template <class Next>
  QJ_AVX512_INL static void rows_f32_wide(const float* G, int64_t dim, int64_t n, Next&& next, bool l2) {
    __m512 gv[16];
    for (int v = 0; v < 16; ++v) gv[v] = _mm512_loadu_ps(G + 16 * v);
    RowRef nx = next(0);
    for (int64_t i = 0; i < n; ++i) {
      // The next row's step is formed before this row's update (its latency then overlaps it;
      // measured warm, 1000 rows: dim 512 42.6 -> 38.3-40.0 us, dim 1024 within noise).
      const RowRef r = nx;
      if (i + 1 < n) nx = next(i + 1);
      const __m512 s = _mm512_set1_ps(-r.step);
      float* w = reinterpret_cast<float*>(r.w);
      for (int v = 0; v < 16; ++v) {
        prefetch_ahead(r.pf + 64 * v, l2);
        _mm512_storeu_ps(w + 16 * v, _mm512_fmadd_ps(s, gv[v], _mm512_loadu_ps(w + 16 * v)));
      }
      for (int64_t j = 256; j < dim; j += 16) {
        prefetch_ahead(r.pf + 4 * j, l2);
        _mm512_storeu_ps(w + j, _mm512_fmadd_ps(s, _mm512_loadu_ps(G + j), _mm512_loadu_ps(w + j)));
      }
    }
  }
};


// A row that occurs more than once, at positions head .. tail (chained through next[]); bag is
// the bag of its first occurrence.
struct MultiRow {
  int64_t row, head, tail, bag;
};

// The first position in [j, end) whose multi byte is set, or end. Reads whole 8-byte words: a
// byte at a time, this scan (every position of a coalesced call) took about half of the bag
// loop's own time. multi holds kMultiPad bytes past the positions (their values do not matter).
constexpr size_t kMultiPad = 8;
inline int64_t next_multi(const uint8_t* multi, int64_t j, int64_t end) {
  for (; j < end; j += 8) {
    uint64_t w;
    std::memcpy(&w, multi + j, 8);
    if (w) return std::min(j + __builtin_ctzll(w) / 8, end);  // (little-endian: lowest address first)
  }
  return end;
}

// Reused per-thread scratch (no allocation per call once warm).
struct Slot {
  int64_t row;
  uint64_t tag;  // generation << 40 | unique id
};
struct Scratch {
  std::vector<Slot> slots;
  uint64_t gen = 0;
  std::vector<uint64_t> cslots;  // compact slots (group_rows)
  uint64_t cgen = 0;
  std::vector<uint8_t> multi;             // per position: 1 if its row occurs more than once
                                          // (kMultiPad more bytes, for next_multi's word reads)
  std::vector<MultiRow> multi_rows;           // the rows that occur more than once
  std::vector<int64_t> mid;               // per first position of such a row: its multi_rows entry
  std::vector<int64_t> next, bag;         // per chained position: next position of the same row, its bag
  std::vector<float> e;                   // per position: its factor (weighted only)
  std::vector<int64_t> bstart;            // per bag: first position (num_bags + 1 entries)
  int64_t n_multi = 0;                    // multi_rows entries of the current call
  // Per worker thread: the cached bag's G and a row's own G, each gpad floats (a multiple of 16),
  // in one buffer that starts a 4 KiB page. With malloc's 16-byte alignment every 64-byte load of
  // G spanned two cache lines (warm fp32 rows 10-20% slower at dims 128-1024). The page start puts
  // every G at page offset 0 where the rows sit there too (dims that are multiples of 1024 in a
  // page-aligned table), and thread 0's first G always: there the page offset of G matters, most
  // likely through the store-to-load checks on the low 12 address bits (G loads against queued
  // stores to the row). Measured 2026-11-30, warm fp32 dim 1024, 1143 rows, alternating runs: G
  // at page offset 0, 64 or 2048 bytes 90-93 us per call; the earlier 64-byte alignment (at the
  // heap's offset) 104, and 64 bytes past it 115-117; FBGEMM 84-87. Dims 200-2048 with rows at
  // other offsets measured the same either way. (Padding every G to whole pages instead cost 8
  // KiB per thread for small dims and broke the 1000-thread start-failure test's address-space
  // budget.) Owned by the calling thread, so that an allocation failure is reported before any
  // worker runs.
  std::unique_ptr<float, decltype(&std::free)> gbuf{nullptr, &std::free};
  size_t gbuf_floats = 0;
};
// The calling thread's scratch, which the call's slices on every thread read. A call made on a
// thread whose scratch is in use by a call still running there (an installed pool that runs
// other queued work on the waiting caller, as work-stealing pools do) gets its own for the call.
class CallScratch {
 public:
  CallScratch() {
    if (depth()++ > 0) own_ = std::make_unique<Scratch>();
  }
  ~CallScratch() { --depth(); }
  CallScratch(const CallScratch&) = delete;
  CallScratch& operator=(const CallScratch&) = delete;
  Scratch& get() { return own_ ? *own_ : mine(); }

 private:
  static Scratch& mine() {
    thread_local Scratch s;
    return s;
  }
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
  std::unique_ptr<Scratch> own_;
};
struct Job {
  const qj_rowwise_adagrad_desc* d;
  float* gbuf;   // worker t: G buffers at gbuf + 2 * t * gpad (see Scratch)
  int64_t gpad;
  const AdagradCall* c;
  const Scratch* s;
  int64_t gstride, multi;  // multi: Scratch::n_multi
  int64_t pf_dist;    // rows ahead to prefetch
  int64_t far_dist;   // rows ahead to prefetch into L2 as well (0: none; see run_tier)
  bool pf_l2;         // prefetch into L2 (prefetcht1), not L1 (see prefetch_ahead)
  int64_t row_bytes;  // table row bytes
  uint32_t seed_key;  // sr_seed_key(seed)
};

__attribute__((always_inline)) inline void prefetch_lines(const char* p, int64_t bytes, bool l2) {
  const char* end = p + bytes;
  for (const char* q = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63}); q < end; q += 64)
    prefetch_ahead(q, l2);
}
__attribute__((always_inline)) inline void prefetch_row(const Job& job, int64_t row, bool l2) {
  prefetch_lines(static_cast<const char*>(job.c->table) + row * job.row_bytes, job.row_bytes, l2);
  if (job.d->optimizer == QJ_OPT_ROWWISE_ADAGRAD) prefetch_ahead(job.c->momentum + row, l2);
}

// The bag factor of unweighted pooling: 1, or 1 / len for mean pooling (as the reference: 1.0f *
// (1.0f / len), the product by 1 being exact).
inline float bag_factor(bool mean, int64_t len) { return mean ? 1.0f / static_cast<float>(len) : 1.0f; }
inline float bag_factor(const qj_rowwise_adagrad_desc& d, int64_t len) { return bag_factor(d.pooling == QJ_POOL_MEAN, len); }

inline float adagrad_step(float* momentum, int64_t row, float m, float lr, float eps) {
  const float h = momentum[row] + m;
  momentum[row] = h;
  return lr / (_mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(h))) + eps);  // sqrtf, without the errno path
}
// The optimizer's per-row scalar part: AdaGrad's momentum update and step (SGD: the rate).
inline float row_step(const Job& job, int64_t row, float m) {
  const auto& d = *job.d;
  if (d.optimizer != QJ_OPT_ROWWISE_ADAGRAD) return d.learning_rate;
  return adagrad_step(job.c->momentum, row, m, d.learning_rate, d.epsilon);
}
inline uint32_t row_key(const Job& job, int64_t row) {
  return job.d->stochastic_rounding ? sr_row_key_from(job.seed_key, static_cast<uint64_t>(row)) : 0u;
}
// The driver loops, compiled once per tier (see rowwise_adagrad_driver.inc).
namespace tier_scalar {
#include "src/ops/rowwise_adagrad_driver.inc"
}  // namespace tier_scalar
namespace tier_avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "src/ops/rowwise_adagrad_driver.inc"
#pragma GCC pop_options
}  // namespace tier_avx2
namespace tier_avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#include "src/ops/rowwise_adagrad_driver.inc"
#pragma GCC pop_options
}  // namespace tier_avx512

struct TierFns {
  qj_task_fn coalesced32, coalesced64, per_occurrence32, per_occurrence64;
};
template <class K>
TierFns tier_fns();
template <>
TierFns tier_fns<ScalarOps>() {
  return {tier_scalar::coalesced_slice<ScalarOps, int32_t>, tier_scalar::coalesced_slice<ScalarOps, int64_t>,
          tier_scalar::per_occurrence_slice<ScalarOps, int32_t>,
          tier_scalar::per_occurrence_slice<ScalarOps, int64_t>};
}
template <>
TierFns tier_fns<Avx2Ops>() {
  return {tier_avx2::coalesced_slice<Avx2Ops, int32_t>, tier_avx2::coalesced_slice<Avx2Ops, int64_t>,
          tier_avx2::per_occurrence_slice<Avx2Ops, int32_t>,
          tier_avx2::per_occurrence_slice<Avx2Ops, int64_t>};
}
template <>
TierFns tier_fns<Avx512Ops>() {
  return {tier_avx512::coalesced_slice<Avx512Ops, int32_t>, tier_avx512::coalesced_slice<Avx512Ops, int64_t>,
          tier_avx512::per_occurrence_slice<Avx512Ops, int32_t>,
          tier_avx512::per_occurrence_slice<Avx512Ops, int64_t>};
}

// Finds the rows that occur more than once: multi[i] for every position i, and for each such row
// a multi_rows entry (in order of second occurrence) with its occurrences chained in increasing
// position (next[], and bag[] for the chained positions). Open addressing without clearing: a
// slot belongs to this call if it carries this call's generation; it holds the row's first
// position. Compact slots (one uint64: row << 32 | first position << 8 | generation) when rows
// and positions fit (~1000 lookups: a 128 KiB table, 16 slots per lookup, see group_rows);
// otherwise 16-byte slots (row, generation << 40 | first position). Rows that occur once cost the
// probe and one byte (they are updated straight from the index array, see occurrence_range).
template <class Idx, bool kCompact>
bool group_rows_impl(Scratch& s, const Idx* idx, int64_t nbags, int logcap, uint64_t limit) {
  const size_t mask = (size_t{1} << logcap) - 1;
  uint8_t* multi = s.multi.data();
  MultiRow* mu = s.multi_rows.data();
  int64_t* mid = s.mid.data();
  int64_t* next = s.next.data();
  int64_t* bagof = s.bag.data();
  const int64_t* bstart = s.bstart.data();
  int64_t nm = 0;
  uint64_t* cslots = s.cslots.data();
  Slot* slots = s.slots.data();
  const uint8_t cgen = static_cast<uint8_t>(s.cgen);
  const uint64_t gtag = s.gen << 40, idmask = (uint64_t{1} << 40) - 1;
  std::memset(multi, 0, static_cast<size_t>(bstart[nbags]));  // (rows that occur once keep 0)
  for (int64_t b = 0; b < nbags; ++b) {
    for (int64_t i = bstart[b], end = bstart[b + 1]; i < end; ++i) {
      const int64_t row = idx[i];
      if (static_cast<uint64_t>(row) >= limit) return false;  // the caller reports it
      size_t h = static_cast<size_t>(rowwise_adagrad_row_hash(static_cast<uint64_t>(row)) >> (64 - logcap));
      int64_t first;
      for (;;) {
        if constexpr (kCompact) {
          const uint64_t v = cslots[h];
          if (static_cast<uint8_t>(v) != cgen) {  // empty in this generation: a new row
            cslots[h] = static_cast<uint64_t>(row) << 32 | static_cast<uint64_t>(i) << 8 | cgen;
            first = -1;
            break;
          }
          if (static_cast<int64_t>(v >> 32) == row) {
            first = static_cast<int64_t>((v >> 8) & 0xffffff);
            break;
          }
        } else {
          Slot& sl = slots[h];
          if ((sl.tag & ~idmask) != gtag) {
            sl.row = row;
            sl.tag = gtag | static_cast<uint64_t>(i);
            first = -1;
            break;
          }
          if (sl.row == row) {
            first = static_cast<int64_t>(sl.tag & idmask);
            break;
          }
        }
        h = (h + 1) & mask;
      }
      if (first < 0) continue;
      multi[i] = 1;
      if (!multi[first]) {  // the row's second occurrence: its entry, with the first occurrence's bag
        multi[first] = 1;
        mid[first] = nm;
        const int64_t fb = std::upper_bound(bstart, bstart + nbags + 1, first) - bstart - 1;
        mu[nm++] = MultiRow{row, first, first, fb};
      }
      MultiRow& q = mu[mid[first]];
      next[q.tail] = i;
      bagof[i] = b;
      q.tail = i;
    }
  }
  s.n_multi = nm;
  return true;
}

// Also the range check of the indices in the coalesced mode (false: an index is outside
// [0, num_rows); nothing has been written).
template <class Idx>
bool group_rows(Scratch& s, const Idx* idx, int64_t n, int64_t nbags, int64_t num_rows) {
  // At least 16 slots per lookup up to 2^15 slots (256 KiB of compact slots), then 2 per lookup.
  // The probes' branches are what a call's grouping costs when its indices are new (the branch
  // predictor learns a repeated index set): with 2 slots per lookup a probe found its first slot
  // taken about 1 time in 8 on average. Measured (2026-12-01, 1000 random lookups of a 1M-row
  // table, a microbenchmark of this loop, ns): 2 slots per lookup 5250 with new indices each call
  // against 1410 with the same ones; 4 / 8 / 16 / 64: 2810 / 1980 / 1620 / 1420 new, 1300 at 16
  // repeated. In whole calls (fresh indices, fp16 dim 32): 17.0 -> 13.2-13.6 us.
  int logcap = 4;
  while ((int64_t{1} << logcap) < 16 * n && logcap < 15) ++logcap;
  while ((int64_t{1} << logcap) < 2 * n) ++logcap;
  const size_t cap = size_t{1} << logcap;
  if (num_rows <= (int64_t{1} << 32) && n < (int64_t{1} << 24)) {  // rows and positions fit
    if (s.cslots.size() < cap) {
      s.cslots.assign(cap, 0);
      s.cgen = 0;
    }
    if (++s.cgen == 256) {  // generations wrapped: forget every slot
      std::fill(s.cslots.begin(), s.cslots.end(), uint64_t{0});
      s.cgen = 1;
    }
    return group_rows_impl<Idx, true>(s, idx, nbags, logcap, static_cast<uint64_t>(num_rows));
  }
  if (s.slots.size() < cap) {
    s.slots.assign(cap, Slot{0, 0});
    s.gen = 0;
  }
  if (++s.gen >= (uint64_t{1} << 24)) {
    std::fill(s.slots.begin(), s.slots.end(), Slot{0, 0});
    s.gen = 1;
  }
  return group_rows_impl<Idx, false>(s, idx, nbags, logcap, static_cast<uint64_t>(num_rows));
}

template <class Idx>
bool indices_in_range(const Idx* idx, int64_t n, uint64_t limit) {
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint64_t>(static_cast<int64_t>(idx[i])) >= limit;
  return !bad;
}

// The error for an index outside the table: the shared validator names the first bad index and
// its bag.
qj_status report_bad_index(const qj_rowwise_adagrad_desc& d, const AdagradCall& c) {
  const qj_status st = validate_indices_scalar("qj_rowwise_adagrad_fused", d.index_bits, c.indices, c.num_indices,
                                               static_cast<uint64_t>(c.num_rows), "table", d.offset_bits,
                                               d.use_lengths != 0, c.offsets_or_lengths, c.num_bags, false);
  return st != QJ_OK ? st : fail(QJ_ERR_INTERNAL, "qj_rowwise_adagrad_fused: index check disagreement");
}

std::atomic<int> g_force_prefetch_l2{-1};

template <class K>
qj_status run_tier(const qj_rowwise_adagrad_desc& d, const AdagradCall& c, int32_t num_threads) {
  CallScratch call_scratch;
  Scratch& s = call_scratch.get();
  // The scratch keeps its size between calls; after a much larger call it is given back (a
  // thread's one huge batch should not pin ~60 bytes per index for the thread's lifetime).
  if (s.next.capacity() > std::max<size_t>(8 * static_cast<size_t>(c.num_indices), size_t{1} << 20)) s = Scratch();
  Job job;
  job.d = &d;
  job.c = &c;
  job.s = &s;
  job.gstride = d.grad_stride ? d.grad_stride : d.dim;
  job.seed_key = sr_seed_key(c.seed);
  job.row_bytes = d.dim * (d.table_type == QJ_F32 ? 4 : 2);
  job.multi = 0;
  // Keep about 96 lines in flight (rows are written back too), 2 to 16 rows ahead; on Zen 5 see
  // below.
  const int64_t lines = (job.row_bytes + 63) / 64 + 1;
  const bool zen5 = amd_family() >= 0x1a;
  const int force = g_force_prefetch_l2.load(std::memory_order_relaxed);
  const bool big_table = static_cast<uint64_t>(c.num_rows) * static_cast<uint64_t>(job.row_bytes) > l3_cache_bytes();
  // Zen 5 (AMD family 0x1A; the other rules below were measured on Zen 4): prefetchw alone, up to
  // 48 rows ahead, about 96 lines in flight for fp32 rows and 160 for fp16 rows (whose stochastic
  // rounding takes longer per line). Measured 2026-12-02 against the earlier Zen 5 rule (prefetchw
  // 2-16 rows ahead plus a prefetcht1 twice as far), the two builds' calls alternating in one
  // process (1M-row tables, ~1140 lookups; the median of the per-pair time ratios new / old; warm
  // / fresh / cold): fp16 dims 32 / 64 / 128 / 256 / 512 / 1024 (48 / 48 / 32 / 17 / 9 / 4 rows
  // ahead) 0.86 / 0.86 / 0.64, 0.87 / 0.77 / 0.72, 0.91 / 0.80 / 0.81, 0.90 / 1.00 / 0.83, 0.95 /
  // 0.95 / 0.89, 0.89 / 0.93 / 0.88; fp32 dims 32 / 64 / 128 / 256 / 512 / 1024 (32 / 19 / 10 / 5 /
  // 2 / 2 ahead) 0.87 / 0.89 / 0.78, 0.79 / 0.81 / 0.92, 0.72 / 0.92 / 0.90, 0.78 / 1.04 / 1.02,
  // 0.80 / 1.11 / 1.24, 0.68 / 0.94 / 0.98 (fp32 dim 512 loses on DRAM rows). The farther
  // prefetcht1 cost cached rows 10-30%; in a sweep of distances without it (4-48 ahead) the longer
  // prefetchw distances above beat 16 on DRAM rows.
  job.pf_dist = zen5 ? std::clamp<int64_t>((d.table_type == QJ_F32 ? 96 : 160) / lines, 2, 48)
                     : std::clamp<int64_t>(96 / lines, 2, 16);
  job.pf_l2 = force >= 0 ? force == 1 : job.row_bytes >= 512 && big_table && !zen5;
  // Other CPUs: rows under 512 bytes of a table larger than the L3 are also prefetched into L2
  // (prefetcht1) twice as far ahead: prefetchw alone keeps few rows in flight, prefetcht1 alone is
  // bimodal on them (see prefetch_ahead). Measured 2026-12-01 (1M-row tables on 2 MiB pages, ~1000
  // lookups, us per call, without -> with, two runs each): new random rows every call ("fresh")
  // fp32 dim 32 25.5-25.9 -> 18.4-19.2, dim 64 40-42 -> 30-31, fp16 dim 32 22-23 -> 15-16, dim 64
  // 32-33 -> 23, dim 128 54-58 -> 45-48; rows flushed before each call fp16 dim 32 13.3-13.6 ->
  // 9.1-9.4, the others the same or faster in one of the two runs (fp16 dim 64 24.4 -> 11.3 / 24.6),
  // fp32 dim 32 19 -> 20; the same rows every call (cached) 5-23% slower: fp32 dim 32 4.9 -> 5.8,
  // dim 64 6.1-6.2 -> 7.5, fp16 dim 32 7.2 -> 8.4, dim 64 9.3 -> 10.4, dim 128 13.9 -> 14.6.
  // For rows of 512 bytes and more (already prefetcht1) a second, farther prefetch made cached
  // rows 1.4-1.5x slower (fp32 dim 512 / 1024).
  job.far_dist = (force >= 0 ? force == 2 : !zen5 && job.row_bytes < 512 && big_table) ? 2 * job.pf_dist : 0;
  const int64_t n = c.num_indices;
  const size_t nb = static_cast<size_t>(c.num_bags);
  s.bstart.resize(nb + 1);
  s.bstart[0] = 0;
  for (size_t b = 0; b < nb; ++b)
    s.bstart[b + 1] = d.use_lengths ? s.bstart[b] + load_int(c.offsets_or_lengths, d.offset_bits, static_cast<int64_t>(b))
                                    : load_int(c.offsets_or_lengths, d.offset_bits, static_cast<int64_t>(b) + 1);
  if (num_threads > c.num_indices) num_threads = static_cast<int32_t>(c.num_indices);
  job.gpad = (d.dim + 15) & ~int64_t{15};  // 64-byte multiples; whole pages when dim % 1024 == 0
  const size_t gneed = 2 * static_cast<size_t>(num_threads) * static_cast<size_t>(job.gpad);
  if (s.gbuf_floats < gneed) {
    const size_t bytes = (gneed * sizeof(float) + 4095) & ~size_t{4095};
    s.gbuf.reset(static_cast<float*>(std::aligned_alloc(4096, bytes)));
    s.gbuf_floats = s.gbuf ? gneed : 0;
    if (!s.gbuf)
      return fail(QJ_ERR_OUT_OF_MEMORY, "qj_rowwise_adagrad_fused: out of memory (%zu bytes of gradient buffers)",
                  gneed * sizeof(float));
  }
  job.gbuf = s.gbuf.get();
  // Rough single-thread time for the pool (threading.h): each row is read and written back.
  const int64_t work_ns = c.num_indices * (4 + job.row_bytes / 32);

  if (d.mode == QJ_UPDATE_PER_OCCURRENCE_RACY) {
    qj_task_fn fn = d.index_bits == 32 ? tier_fns<K>().per_occurrence32 : tier_fns<K>().per_occurrence64;
    return parallel_for(fn, &job, num_threads, work_ns);  // (one thread: the caller's)
  }

  const size_t un = static_cast<size_t>(n);
  s.multi.resize(un + kMultiPad);
  s.multi_rows.resize(un / 2);  // a repeated row takes at least two positions
  s.mid.resize(un);
  s.next.resize(un);
  s.bag.resize(un);
  if (d.weighted) s.e.resize(un);
  for (size_t b = 0; b < nb; ++b) {
    const int64_t start = s.bstart[b], end = s.bstart[b + 1];
    const float inv = bag_factor(d, end - start);
    if (d.weighted) {
      for (int64_t i = start; i < end; ++i) {
        float f = c.weights[d.positional ? i - start : i];
        if (d.pooling == QJ_POOL_MEAN) f = f * inv;
        s.e[i] = f;
      }
    }
  }
  const bool in_range = d.index_bits == 32 ? group_rows(s, static_cast<const int32_t*>(c.indices), n, c.num_bags, c.num_rows)
                                           : group_rows(s, static_cast<const int64_t*>(c.indices), n, c.num_bags, c.num_rows);
  if (!in_range) return report_bad_index(d, c);
  job.multi = s.n_multi;
  qj_task_fn fn = d.index_bits == 32 ? tier_fns<K>().coalesced32 : tier_fns<K>().coalesced64;
  return parallel_for(fn, &job, num_threads, work_ns);  // (one thread: the caller's)
}

}  // namespace

void rowwise_adagrad_force_prefetch_l2(int mode) { g_force_prefetch_l2.store(mode, std::memory_order_relaxed); }

qj_status rowwise_adagrad_fused(const qj_rowwise_adagrad_desc& d, const AdagradCall& c, int32_t num_threads) {
  const char* fn = "qj_rowwise_adagrad_fused";
  int64_t prefix;
  if (c.num_bags > 0 || c.num_indices > 0)
    QJ_TRY(validate_bags(fn, d.offset_bits, d.use_lengths != 0, c.offsets_or_lengths, c.num_bags, c.num_indices, 0,
                         &prefix));
  if (c.num_indices == 0) return QJ_OK;
  // The coalesced mode checks the indices while grouping them (before anything is written).
  if (d.mode != QJ_UPDATE_COALESCED) {
    const bool ok = d.index_bits == 32 ? indices_in_range(static_cast<const int32_t*>(c.indices), c.num_indices,
                                                          static_cast<uint64_t>(c.num_rows))
                                       : indices_in_range(static_cast<const int64_t*>(c.indices), c.num_indices,
                                                          static_cast<uint64_t>(c.num_rows));
    if (!ok) return report_bad_index(d, c);
  }
  if (c.num_indices >= (int64_t{1} << 40))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_indices=%" PRId64 " is not below 2^40", fn, c.num_indices);
  const qj_isa isa = max_isa();
  if (isa >= QJ_ISA_AVX512) return run_tier<Avx512Ops>(d, c, num_threads);
  if (isa >= QJ_ISA_AVX2) return run_tier<Avx2Ops>(d, c, num_threads);
  return run_tier<ScalarOps>(d, c, num_threads);
}

}  // namespace qj
