// Fused row-wise AdaGrad / SGD driver and its vectorized row update (see rowwise_adagrad.h).
#include "src/ops/rowwise_adagrad.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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
#define QJ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

int64_t load_int(const void* p, int bits, int64_t i) {
  if (bits == 32) return static_cast<const int32_t*>(p)[i];
  return static_cast<const int64_t*>(p)[i];
}

// The row operations, per tier. All are lane-wise except the 8-lane sum of squares, which every
// tier does on 8 lanes (j mod 8) in increasing j, as the reference.
struct RowOps {
  // G[j] = fma(e, g[j], G[j])
  void (*accumulate)(float* G, const float* g, float e, int64_t dim);
  // sum of squares in the reference's order, divided by dim
  float (*mean_sq)(const float* G, int64_t dim);
  // w[j] = fma(-step, G[j], w[j]) (fp32 table)
  void (*update_f32)(float* w, const float* G, float step, int64_t dim);
  // fp16 table: widen, fma, round (nearest even, or stochastic with the row key)
  void (*update_f16)(uint16_t* w, const float* G, float step, int64_t dim, bool sr, uint32_t key);
};

// ---- scalar tails / scalar tier (the reference's formulas) ----
void acc_tail(float* G, const float* g, float e, int64_t j, int64_t dim) {
  for (; j < dim; ++j) G[j] = std::fma(e, g[j], G[j]);
}
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

void acc_scalar(float* G, const float* g, float e, int64_t dim) { acc_tail(G, g, e, 0, dim); }
float mean_sq_scalar(const float* G, int64_t dim) {
  float P[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t j = 0; j < dim; ++j) P[j % 8] = std::fma(G[j], G[j], P[j % 8]);
  return finish_mean(P, dim);
}
void upd32_scalar(float* w, const float* G, float step, int64_t dim) { upd32_tail(w, G, step, 0, dim); }
void upd16_scalar(uint16_t* w, const float* G, float step, int64_t dim, bool sr, uint32_t key) {
  upd16_tail(w, G, step, 0, dim, sr, key);
}

// ---- AVX2 ----
QJ_AVX2 void acc_avx2(float* G, const float* g, float e, int64_t dim) {
  const __m256 ev = _mm256_set1_ps(e);
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8)
    _mm256_storeu_ps(G + j, _mm256_fmadd_ps(ev, _mm256_loadu_ps(g + j), _mm256_loadu_ps(G + j)));
  acc_tail(G, g, e, j, dim);
}
QJ_AVX2 float mean_sq_avx2(const float* G, int64_t dim) {
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
QJ_AVX2 void upd32_avx2(float* w, const float* G, float step, int64_t dim) {
  const __m256 s = _mm256_set1_ps(-step);
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8)
    _mm256_storeu_ps(w + j, _mm256_fmadd_ps(s, _mm256_loadu_ps(G + j), _mm256_loadu_ps(w + j)));
  upd32_tail(w, G, step, j, dim);
}
QJ_AVX2 inline __m256i fmix32_avx2(__m256i h) {
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85ebca6bu)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xc2b2ae35u)));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}
QJ_AVX2 void upd16_avx2(uint16_t* w, const float* G, float step, int64_t dim, bool sr, uint32_t key) {
  const __m256 s = _mm256_set1_ps(-step);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i golden = _mm256_set1_epi32(static_cast<int>(0x9E3779B9u));
  const __m256i keyv = _mm256_set1_epi32(static_cast<int>(key));
  const __m256i exp = _mm256_set1_epi32(0x7f800000);
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + j)));
    __m256 v = _mm256_fmadd_ps(s, _mm256_loadu_ps(G + j), x);
    __m128i h;
    if (sr) {
      __m256i jj = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(j)), lane);
      __m256i r = fmix32_avx2(_mm256_xor_si256(keyv, _mm256_mullo_epi32(jj, golden)));
      r = _mm256_and_si256(r, _mm256_set1_epi32(0x1fff));
      __m256i vb = _mm256_castps_si256(v);
      __m256i finite = _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_and_si256(vb, exp), exp), _mm256_set1_epi32(-1));
      vb = _mm256_add_epi32(vb, _mm256_and_si256(r, finite));
      h = _mm256_cvtps_ph(_mm256_castsi256_ps(vb), _MM_FROUND_TO_ZERO);
    } else {
      h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(w + j), h);
  }
  upd16_tail(w, G, step, j, dim, sr, key);
}

// ---- AVX-512 (16 lanes for the lane-wise steps; the sum of squares stays on 8 lanes) ----
QJ_AVX512 void acc_avx512(float* G, const float* g, float e, int64_t dim) {
  const __m512 ev = _mm512_set1_ps(e);
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16)
    _mm512_storeu_ps(G + j, _mm512_fmadd_ps(ev, _mm512_loadu_ps(g + j), _mm512_loadu_ps(G + j)));
  if (j < dim) {
    __mmask16 m = static_cast<__mmask16>((1u << (dim - j)) - 1u);
    _mm512_mask_storeu_ps(G + j, m, _mm512_fmadd_ps(ev, _mm512_maskz_loadu_ps(m, g + j), _mm512_maskz_loadu_ps(m, G + j)));
  }
}
QJ_AVX512 float mean_sq_avx512(const float* G, int64_t dim) {
  __m256 P = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    __m256 v = _mm256_loadu_ps(G + j);
    P = _mm256_fmadd_ps(v, v, P);
  }
  if (j < dim) {
    __mmask8 m = static_cast<__mmask8>((1u << (dim - j)) - 1u);
    __m256 v = _mm256_maskz_loadu_ps(m, G + j);
    P = _mm256_mask3_fmadd_ps(v, v, P, m);
  }
  alignas(32) float p[8];
  _mm256_store_ps(p, P);
  return finish_mean(p, dim);
}
QJ_AVX512 void upd32_avx512(float* w, const float* G, float step, int64_t dim) {
  const __m512 s = _mm512_set1_ps(-step);
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16)
    _mm512_storeu_ps(w + j, _mm512_fmadd_ps(s, _mm512_loadu_ps(G + j), _mm512_loadu_ps(w + j)));
  if (j < dim) {
    __mmask16 m = static_cast<__mmask16>((1u << (dim - j)) - 1u);
    _mm512_mask_storeu_ps(w + j, m, _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(m, G + j), _mm512_maskz_loadu_ps(m, w + j)));
  }
}
QJ_AVX512 inline __m512i fmix32_avx512(__m512i h) {
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x85ebca6bu)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0xc2b2ae35u)));
  return _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
}
QJ_AVX512 void upd16_avx512(uint16_t* w, const float* G, float step, int64_t dim, bool sr, uint32_t key) {
  const __m512 s = _mm512_set1_ps(-step);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i golden = _mm512_set1_epi32(static_cast<int>(0x9E3779B9u));
  const __m512i keyv = _mm512_set1_epi32(static_cast<int>(key));
  for (int64_t j = 0; j < dim; j += 16) {
    const __mmask16 m = dim - j >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (dim - j)) - 1u);
    __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + j));
    __m512 v = _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(m, G + j), x);
    __m256i h;
    if (sr) {
      __m512i jj = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(j)), lane);
      __m512i r = fmix32_avx512(_mm512_xor_si512(keyv, _mm512_mullo_epi32(jj, golden)));
      r = _mm512_and_si512(r, _mm512_set1_epi32(0x1fff));
      __mmask16 finite = static_cast<__mmask16>(~_mm512_fpclass_ps_mask(v, 0x99));  // not NaN / inf
      __m512i vb = _mm512_mask_add_epi32(_mm512_castps_si512(v), finite, _mm512_castps_si512(v), r);
      h = _mm512_cvtps_ph(_mm512_castsi512_ps(vb), _MM_FROUND_TO_ZERO);
    } else {
      h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    }
    _mm256_mask_storeu_epi16(w + j, m, h);
  }
}

const RowOps& row_ops() {
  static const RowOps scalar{acc_scalar, mean_sq_scalar, upd32_scalar, upd16_scalar};
  static const RowOps avx2{acc_avx2, mean_sq_avx2, upd32_avx2, upd16_avx2};
  static const RowOps avx512{acc_avx512, mean_sq_avx512, upd32_avx512, upd16_avx512};
  const qj_isa isa = max_isa();
  return isa >= QJ_ISA_AVX512 ? avx512 : isa >= QJ_ISA_AVX2 ? avx2 : scalar;
}

struct Job {
  const qj_rowwise_adagrad_desc* d;
  const AdagradCall* c;
  const RowOps* ops;
  int64_t gstride;
  // per occurrence
  std::vector<int64_t> bag;   // bag of each index position
  std::vector<float> e;       // its factor
  // coalesced: positions sorted by (row, position), and the start of each unique row's run
  std::vector<int64_t> order;
  std::vector<int64_t> runs;  // runs.size() - 1 unique rows
};

void update_row(const Job& job, int64_t row, const float* G) {
  const auto& d = *job.d;
  const auto& c = *job.c;
  float step = d.learning_rate;
  if (d.optimizer == QJ_OPT_ROWWISE_ADAGRAD) {
    const float m = job.ops->mean_sq(G, d.dim);
    const float h = c.momentum[row] + m;
    c.momentum[row] = h;
    step = d.learning_rate / (std::sqrt(h) + d.epsilon);
  }
  if (d.table_type == QJ_F32)
    job.ops->update_f32(static_cast<float*>(c.table) + row * d.dim, G, step, d.dim);
  else
    job.ops->update_f16(static_cast<uint16_t*>(c.table) + row * d.dim, G, step, d.dim, d.stochastic_rounding != 0,
                        sr_row_key(c.seed, static_cast<uint64_t>(row)));
}

void coalesced_slice(void* ctx, int32_t t, int32_t n) {
  const Job& job = *static_cast<const Job*>(ctx);
  const auto& d = *job.d;
  const auto& c = *job.c;
  const Range r = split_range(static_cast<int64_t>(job.runs.size()) - 1, t, n);
  std::vector<float> G(static_cast<size_t>(d.dim));
  for (int64_t u = r.begin; u < r.end; ++u) {
    std::fill(G.begin(), G.end(), 0.0f);
    const int64_t row = load_int(c.indices, d.index_bits, job.order[job.runs[u]]);
    for (int64_t k = job.runs[u]; k < job.runs[u + 1]; ++k) {
      const int64_t i = job.order[k];
      job.ops->accumulate(G.data(), c.grad + job.bag[i] * job.gstride, job.e[i], d.dim);
    }
    update_row(job, row, G.data());
  }
}

void per_occurrence_slice(void* ctx, int32_t t, int32_t n) {
  const Job& job = *static_cast<const Job*>(ctx);
  const auto& d = *job.d;
  const auto& c = *job.c;
  const Range r = split_range(c.num_bags, t, n);
  if (r.begin >= r.end) return;
  // first index of bag r.begin: the first position whose bag is >= r.begin
  int64_t i = std::lower_bound(job.bag.begin(), job.bag.end(), r.begin) - job.bag.begin();
  std::vector<float> G(static_cast<size_t>(d.dim));
  for (; i < c.num_indices && job.bag[i] < r.end; ++i) {
    std::fill(G.begin(), G.end(), 0.0f);
    job.ops->accumulate(G.data(), c.grad + job.bag[i] * job.gstride, job.e[i], d.dim);
    update_row(job, load_int(c.indices, d.index_bits, i), G.data());
  }
}

}  // namespace

qj_status rowwise_adagrad_fused(const qj_rowwise_adagrad_desc& d, const AdagradCall& c, int32_t num_threads) {
  const char* fn = "qj_rowwise_adagrad_fused";
  int64_t prefix;
  if (c.num_bags > 0 || c.num_indices > 0)
    QJ_TRY(validate_bags(fn, d.offset_bits, d.use_lengths != 0, c.offsets_or_lengths, c.num_bags, c.num_indices, 0,
                         &prefix));
  QJ_TRY(validate_indices_scalar(fn, d.index_bits, c.indices, c.num_indices, static_cast<uint64_t>(c.num_rows),
                                 "table", d.offset_bits, d.use_lengths != 0, c.offsets_or_lengths, c.num_bags,
                                 false));
  if (c.num_indices == 0) return QJ_OK;

  Job job;
  job.d = &d;
  job.c = &c;
  job.ops = &row_ops();
  job.gstride = d.grad_stride ? d.grad_stride : d.dim;
  job.bag.resize(static_cast<size_t>(c.num_indices));
  job.e.resize(job.bag.size());
  int64_t start = 0;
  for (int64_t b = 0; b < c.num_bags; ++b) {
    const int64_t end = d.use_lengths ? start + load_int(c.offsets_or_lengths, d.offset_bits, b)
                                      : load_int(c.offsets_or_lengths, d.offset_bits, b + 1);
    const float inv = d.pooling == QJ_POOL_MEAN ? 1.0f / static_cast<float>(end - start) : 1.0f;
    for (int64_t i = start; i < end; ++i) {
      float f = d.weighted ? c.weights[d.positional ? i - start : i] : 1.0f;
      if (d.pooling == QJ_POOL_MEAN) f = f * inv;
      job.bag[i] = b;
      job.e[i] = f;
    }
    start = end;
  }
  if (num_threads > c.num_indices) num_threads = static_cast<int32_t>(c.num_indices);

  if (d.mode == QJ_UPDATE_PER_OCCURRENCE_RACY) {
    if (num_threads <= 1)
      per_occurrence_slice(&job, 0, 1);
    else
      parallel_for(per_occurrence_slice, &job, num_threads);
    return QJ_OK;
  }
  // Positions sorted by (row, position): a stable LSD radix sort on the row (11-bit digits, as
  // many passes as the largest row needs), starting from positions in increasing order.
  const int64_t n = c.num_indices;
  std::vector<int64_t> keys(static_cast<size_t>(n)), tmp_keys(keys.size()), tmp_pos(keys.size());
  job.order.resize(keys.size());
  uint64_t max_row = 0;
  for (int64_t i = 0; i < n; ++i) {
    keys[i] = load_int(c.indices, d.index_bits, i);
    job.order[i] = i;
    max_row = std::max(max_row, static_cast<uint64_t>(keys[i]));
  }
  for (int shift = 0; shift < 64 && (max_row >> shift) != 0; shift += 11) {
    int64_t count[2049] = {0};
    for (int64_t i = 0; i < n; ++i) ++count[((static_cast<uint64_t>(keys[i]) >> shift) & 2047) + 1];
    for (int b = 0; b < 2048; ++b) count[b + 1] += count[b];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t dst = count[(static_cast<uint64_t>(keys[i]) >> shift) & 2047]++;
      tmp_keys[dst] = keys[i];
      tmp_pos[dst] = job.order[i];
    }
    keys.swap(tmp_keys);
    job.order.swap(tmp_pos);
  }
  job.runs.reserve(keys.size() + 1);
  for (int64_t k = 0; k < n; ++k)
    if (k == 0 || keys[k] != keys[k - 1]) job.runs.push_back(k);
  job.runs.push_back(n);
  const int64_t unique = static_cast<int64_t>(job.runs.size()) - 1;
  if (num_threads > unique) num_threads = static_cast<int32_t>(unique);
  if (num_threads <= 1)
    coalesced_slice(&job, 0, 1);
  else
    parallel_for(coalesced_slice, &job, num_threads);
  return QJ_OK;
}

}  // namespace qj
