#include "src/ref/gemm_ref.h"

#include <cmath>
#include <cstring>

#include "src/formats/half.h"

namespace qj::ref {

float IntWeights::scale(int64_t g, int64_t col) const {
  switch (gran) {
    case QJ_GRAN_TENSOR: return scales[0];
    case QJ_GRAN_CHANNEL: return scales[col];
    default: return scales[g * n + col];
  }
}

int32_t IntWeights::zp(int64_t g, int64_t col) const {
  if (zero_points.empty()) return 0;
  switch (gran) {
    case QJ_GRAN_TENSOR: return zero_points[0];
    case QJ_GRAN_CHANNEL: return zero_points[col];
    default: return zero_points[g * n + col];
  }
}

static float load_float_a(const qj_gemm_desc& d, const void* a, int64_t idx) {
  if (d.a_type == QJ_BF16) return bf16_to_f32(static_cast<const uint16_t*>(a)[idx]);
  return static_cast<const float*>(a)[idx];
}

namespace {

// q = clamp(rne((v * pre) * inv), -127, 127) over one span of a row with amax `amax` (see the
// header); returns the span's scale amax / 127 (1 when amax == 0: q = 0).
float quantize_span(const qj_gemm_desc& d, const void* a, int64_t base, int64_t len, float amax,
                    int32_t* q) {
  if (amax == 0.0f) {
    for (int64_t j = 0; j < len; ++j) q[j] = 0;
    return 1.0f;
  }
  // When 127 / amax overflows (amax < ~3.7e-37), v and amax are first scaled by 2^100 (exact),
  // so that zeros stay zeros and the row still spans [-127, 127].
  float pre = 1.0f, inv = 127.0f / amax;
  if (std::isinf(inv)) {
    pre = 0x1p100f;
    inv = 127.0f / (amax * pre);
  }
  for (int64_t j = 0; j < len; ++j) {
    float t = std::nearbyint((load_float_a(d, a, base + j) * pre) * inv);
    t = std::fmin(std::fmax(t, -127.0f), 127.0f);
    q[j] = static_cast<int32_t>(t);
  }
  return amax / 127.0f;
}

}  // namespace

bool dynamic_quantize_rows(const qj_gemm_desc& d, int64_t m, int64_t k, const void* a, int64_t lda,
                           std::vector<int32_t>* q, std::vector<float>* row_scale) {
  q->assign(m * k, 0);
  row_scale->assign(m, 1.0f);
  std::vector<float> amax(m, 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) {
      float v = load_float_a(d, a, i * lda + j);
      if (!std::isfinite(v)) return false;
      amax[i] = std::fmax(amax[i], std::fabs(v));
    }
  if (d.a_granularity == QJ_GRAN_TENSOR) {
    float t = 0.0f;
    for (float x : amax) t = std::fmax(t, x);
    for (float& x : amax) x = t;
  }
  for (int64_t i = 0; i < m; ++i)
    (*row_scale)[i] = quantize_span(d, a, i * lda, k, amax[i], q->data() + i * k);
  return true;
}

bool dynamic_quantize_groups(const qj_gemm_desc& d, int64_t m, int64_t k, int64_t gk, const void* a,
                             int64_t lda, std::vector<int32_t>* q, std::vector<float>* scale) {
  const int64_t groups = k / gk;
  q->assign(m * k, 0);
  scale->assign(m * groups, 1.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      for (int64_t j = g * gk; j < (g + 1) * gk; ++j) {
        float v = load_float_a(d, a, i * lda + j);
        if (!std::isfinite(v)) return false;
        amax = std::fmax(amax, std::fabs(v));
      }
      (*scale)[i * groups + g] = quantize_span(d, a, i * lda + g * gk, gk, amax, q->data() + i * k + g * gk);
    }
  return true;
}

float out_multiplier(const qj_gemm_desc& d, double a_scale, double b_scale) {
  double mlt = a_scale * b_scale;
  if (d.c_type == QJ_U8 || d.c_type == QJ_S8) mlt /= d.c_scale;
  return static_cast<float>(mlt);
}

float out_bias(const qj_gemm_desc& d, int64_t col) {
  if (!d.bias) return 0.0f;
  if (d.c_type == QJ_U8 || d.c_type == QJ_S8)
    return static_cast<float>(static_cast<double>(d.bias[col]) / d.c_scale);
  return d.bias[col];
}

void store_output(const qj_gemm_desc& d, float y, void* c, int64_t ldc, int64_t row, int64_t col) {
  int64_t idx = row * ldc + col;
  if (d.c_type == QJ_F32 || d.c_type == QJ_BF16) {
    if (d.activation == QJ_ACT_RELU) y = y > 0.0f ? y : 0.0f;
    if (d.c_type == QJ_F32) {
      float* cf = static_cast<float*>(c);
      if (d.beta != 0.0f) y = std::fma(d.beta, cf[idx], y);
      cf[idx] = y;
    } else {
      static_cast<uint16_t*>(c)[idx] = f32_to_bf16(y);
    }
    return;
  }
  // u8 / s8: clamp to +-2^24 (exact in fp32, keeps the integer add below from overflowing),
  // round half to even, add the zero point, saturate (ReLU clamps at the zero point).
  float t = std::fmin(std::fmax(y, -16777216.0f), 16777216.0f);
  int32_t q = static_cast<int32_t>(std::nearbyint(t)) + d.c_zero_point;
  int32_t lo = d.c_type == QJ_U8 ? 0 : -128, hi = d.c_type == QJ_U8 ? 255 : 127;
  if (d.activation == QJ_ACT_RELU && d.c_zero_point > lo) lo = d.c_zero_point;
  q = q < lo ? lo : (q > hi ? hi : q);
  if (d.c_type == QJ_U8)
    static_cast<uint8_t*>(c)[idx] = static_cast<uint8_t>(q);
  else
    static_cast<int8_t*>(c)[idx] = static_cast<int8_t>(q);
}

void gemm_int(const qj_gemm_desc& d, const IntWeights& w, int64_t m, const void* a, int64_t lda,
              void* c, int64_t ldc) {
  const int64_t k = w.k, n = w.n;
  const bool dynamic = d.a_type == QJ_F32 || d.a_type == QJ_BF16;
  std::vector<int32_t> qa;
  std::vector<float> rs;
  int32_t za = 0;
  int64_t qa_ld = k;
  const int64_t groups = w.groups();
  const int64_t gk = groups == 1 ? k : w.group_size;
  const bool per_group_a = dynamic && d.a_granularity == QJ_GRAN_GROUP && w.gran == QJ_GRAN_GROUP;
  std::vector<float> ags;  // per (row, group) scales of A (per_group_a)
  if (per_group_a) {
    dynamic_quantize_groups(d, m, k, gk, a, lda, &qa, &ags);
  } else if (dynamic) {
    dynamic_quantize_rows(d, m, k, a, lda, &qa, &rs);
  } else {
    qa.resize(m * k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j)
        qa[i * k + j] = d.a_type == QJ_U8 ? static_cast<const uint8_t*>(a)[i * lda + j]
                                          : static_cast<const int8_t*>(a)[i * lda + j];
    za = d.a_zero_point;
  }
  const double a_scale = dynamic ? 1.0 : d.a_scale;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t col = 0; col < n; ++col) {
      float y;
      if (w.gran != QJ_GRAN_GROUP) {
        int64_t acc = 0;
        for (int64_t j = 0; j < k; ++j)
          acc += static_cast<int64_t>(qa[i * qa_ld + j] - za) * (w.q[j * n + col] - w.zp(0, col));
        if (d.c_type == QJ_S32) {
          static_cast<int32_t*>(c)[i * ldc + col] = static_cast<int32_t>(acc);
          continue;
        }
        float f = static_cast<float>(static_cast<int32_t>(acc));
        if (dynamic) f = f * rs[i];
        float mlt = out_multiplier(d, a_scale, w.scale(0, col));
        y = d.bias ? std::fma(f, mlt, out_bias(d, col)) : f * mlt;
      } else {
        float facc = 0.0f;
        for (int64_t g = 0; g < groups; ++g) {
          int64_t acc = 0;
          for (int64_t j = g * gk; j < (g + 1) * gk; ++j)
            acc += static_cast<int64_t>(qa[i * qa_ld + j] - za) * (w.q[j * n + col] - w.zp(g, col));
          float t = static_cast<float>(static_cast<int32_t>(acc));
          if (per_group_a) t *= ags[i * groups + g];
          facc = std::fma(t, w.scale(g, col), facc);
        }
        float f = dynamic && !per_group_a ? facc * rs[i] : facc;
        float mlt = out_multiplier(d, a_scale, 1.0);
        y = d.bias ? std::fma(f, mlt, out_bias(d, col)) : f * mlt;
      }
      store_output(d, y, c, ldc, i, col);
    }
  }
}

void gemm_int_group_a(const qj_gemm_desc& d, const IntWeights& w, int64_t m, const int32_t* qa,
                      const float* ags, void* c, int64_t ldc) {
  const int64_t k = w.k, n = w.n, groups = w.groups(), gk = w.group_size;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t col = 0; col < n; ++col) {
      float facc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t acc = 0;
        for (int64_t j = g * gk; j < (g + 1) * gk; ++j)
          acc += static_cast<int64_t>(qa[i * k + j]) * (w.q[j * n + col] - w.zp(g, col));
        const float t = static_cast<float>(static_cast<int32_t>(acc)) * ags[i * groups + g];
        facc = std::fma(t, w.scale(g, col), facc);
      }
      const float mlt = out_multiplier(d, 1.0, 1.0);
      const float y = d.bias ? std::fma(facc, mlt, out_bias(d, col)) : facc * mlt;
      store_output(d, y, c, ldc, i, col);
    }
}

}  // namespace qj::ref
