// Scalar reference of GEMM with MX weights (see gemm_mx_ref.h).
#include "src/ref/gemm_mx_ref.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "src/formats/half.h"
#include "src/formats/mx_bdr.h"
#include "src/ref/gemm_ref.h"
#include "src/ref/mx_ref.h"

namespace qj::ref {

bool gemm_mxfp8(const qj_gemm_desc& d, const MxWeights& w, int64_t m, const void* a, int64_t lda,
                std::vector<double>* y, std::vector<double>* mag) {
  const int64_t k = w.k, n = w.n, groups = k / 32;
  std::vector<double> wv(n * k);  // value * 2^(b - 127), exact in double (NaN for b = 0xFF)
  for (int64_t c = 0; c < n; ++c)
    for (int64_t j = 0; j < k; ++j) {
      const uint8_t b = w.scales[c * groups + j / 32];
      wv[c * k + j] = b == 0xFF ? std::numeric_limits<double>::quiet_NaN()
                                : mx_elem_value(w.type, w.codes[c * k + j]) * std::ldexp(1.0, b - 127);
    }
  y->assign(m * n, 0.0);
  mag->assign(m * n, 0.0);
  std::vector<double> row(k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; ++j)
      row[j] = d.a_type == QJ_BF16 ? bf16_to_f32(static_cast<const uint16_t*>(a)[i * lda + j])
                                   : static_cast<const float*>(a)[i * lda + j];
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0, abs = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double t = row[j] * wv[c * k + j];  // exact: 24 x 4 significant bits, in range
        acc += t;
        abs += std::fabs(t);
      }
      const double bias = d.bias ? d.bias[c] : 0.0;
      (*y)[i * n + c] = acc + bias;
      (*mag)[i * n + c] = abs + std::fabs(bias);
    }
  }
  return true;
}

int64_t mx_ref_block(qj_dtype t) { return t == QJ_BDR_MX9 || t == QJ_BDR_MX6 || t == QJ_BDR_MX4 ? 16 : 32; }

bool gemm_mx(const qj_gemm_desc& d, const MxWeights& w, int64_t m, const void* a, int64_t lda,
             std::vector<double>* y, std::vector<double>* mag) {
  const int64_t blk = mx_ref_block(w.type);
  const int64_t k = w.k, n = w.n, groups = k / blk;
  if (w.type == QJ_MXFP8_E4M3 || w.type == QJ_MXFP8_E5M2) return gemm_mxfp8(d, w, m, a, lda, y, mag);
  const bool dynamic = d.a_type == QJ_F32 || d.a_type == QJ_BF16;
  std::vector<int32_t> qa;
  std::vector<float> sc;  // per (row, group) scale of A
  if (dynamic && d.a_granularity == QJ_GRAN_GROUP) {
    if (!dynamic_quantize_groups(d, m, k, blk, a, lda, &qa, &sc)) return false;
  } else if (dynamic) {
    std::vector<float> rs;
    if (!dynamic_quantize_rows(d, m, k, a, lda, &qa, &rs)) return false;
    sc.resize(m * groups);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t g = 0; g < groups; ++g) sc[i * groups + g] = rs[i];
  } else {
    qa.resize(m * k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j)
        qa[i * k + j] = (d.a_type == QJ_U8 ? static_cast<const uint8_t*>(a)[i * lda + j]
                                           : static_cast<const int8_t*>(a)[i * lda + j]) -
                        d.a_zero_point;
    sc.assign(m * groups, d.a_scale);
  }
  // Dequantized weights (exact in double).
  std::vector<double> wv(n * k);
  if (blk == 16) {
    std::vector<float> col(k);
    const int64_t bb = static_cast<int64_t>(w.bdr.size()) / (n * groups);  // bytes per block
    for (int64_t c = 0; c < n; ++c) {
      bdr_dequantize(w.type, &w.bdr[c * groups * bb], k, col.data());  // exact values (or NaN)
      for (int64_t j = 0; j < k; ++j) wv[c * k + j] = col[j];
    }
  }
  for (int64_t c = 0; c < n && blk == 32; ++c)
    for (int64_t j = 0; j < k; ++j) {
      const uint8_t b = w.scales[c * groups + j / 32];
      wv[c * k + j] = b == 0xFF ? std::numeric_limits<double>::quiet_NaN()
                                : mx_elem_value(w.type, w.codes[c * k + j]) * std::ldexp(1.0, b - 127);
    }
  y->assign(m * n, 0.0);
  mag->assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0, abs = 0;
      for (int64_t g = 0; g < groups; ++g) {
        double s = 0;  // exact: blk products of an integer and value * 2^e share a power-of-two grid
        for (int64_t j = g * blk; j < g * blk + blk; ++j) s += qa[i * k + j] * wv[c * k + j];
        const double t = s * sc[i * groups + g];
        acc += t;
        abs += std::fabs(t);
      }
      const double bias = d.bias ? d.bias[c] : 0.0;
      (*y)[i * n + c] = acc + bias;
      (*mag)[i * n + c] = abs + std::fabs(bias);
    }
  return true;
}

namespace {

// Finest exponent of a type, negated: every value * 2^shift is an integer (< 2^32).
int fine_shift(qj_dtype t) {
  switch (t) {
    case QJ_MXFP8_E4M3: return 9;    // min subnormal 2^-9
    case QJ_MXFP8_E5M2: return 16;   // 2^-16
    case QJ_MXFP6_E3M2: return 4;    // 2^-4
    case QJ_MXFP6_E2M3: return 3;    // 2^-3
    case QJ_MXFP4_E2M1: return 1;    // 2^-1
    default: return 6;               // MXINT8: code * 2^-6
  }
}

}  // namespace

void gemm_mx_mx(const qj_gemm_desc& d, const MxActivations& a, const MxWeights& w,
                std::vector<double>* y, std::vector<double>* mag) {
  const int64_t m = a.m, k = w.k, n = w.n, groups = k / 32;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (const bdr::BdrFormat* bf = bdr::format(w.type)) {
    // BDR weights: blocks of 16 (A block g / 2), element +-M * 2^(1 - mu) * 2^(E - 127 - m).
    const int sha = fine_shift(a.type);
    const int64_t gb = k / bdr::kBlock;
    y->assign(m * n, 0.0);
    mag->assign(m * n, 0.0);
    std::vector<double> av(m * k);
    for (int64_t i = 0; i < m * k; ++i) av[i] = mx_elem_value(a.type, a.codes[i]);
    std::vector<bdr::Fields> fl(n * gb);
    for (int64_t b = 0; b < n * gb; ++b) bdr::unpack(*bf, &w.bdr[b * bf->block_bytes], &fl[b]);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < n; ++c) {
        double acc = 0, abs = 0;
        for (int64_t g = 0; g < gb; ++g) {
          const bdr::Fields& f = fl[c * gb + g];
          const uint8_t sa = a.scales[i * groups + g / 2];
          double t;
          if (sa == 0xFF || f.e == 0xFF) {
            t = nan;
          } else {
            __int128 s = 0;
            double sd = 0;
            bool finite = true;
            for (int j = 0; j < bdr::kBlock; ++j) {
              const double x = av[i * k + g * bdr::kBlock + j];
              const int64_t q = static_cast<int64_t>(bdr::int_value(*bf, f.code[j])) << (1 - ((f.mu >> (j / 2)) & 1));
              sd += x * static_cast<double>(q);
              if (!std::isfinite(x)) {
                finite = false;
                continue;
              }
              s += static_cast<__int128>(static_cast<int64_t>(std::ldexp(x, sha))) * q;
            }
            const int e = sa + f.e - 254 - bf->m;
            t = finite ? std::ldexp(static_cast<double>(s), e - sha) : sd * std::ldexp(1.0, e);
          }
          acc += t;
          abs += std::fabs(t);
        }
        const double bias = d.bias ? d.bias[c] : 0.0;
        (*y)[i * n + c] = acc + bias;
        (*mag)[i * n + c] = abs + std::fabs(bias);
      }
    return;
  }
  const int sha = fine_shift(a.type), shb = fine_shift(w.type);
  // Values of every code of both sides (exact in double), and their integer forms.
  std::vector<double> av(m * k), wv(n * k);
  for (int64_t i = 0; i < m * k; ++i) av[i] = mx_elem_value(a.type, a.codes[i]);
  for (int64_t i = 0; i < n * k; ++i) wv[i] = mx_elem_value(w.type, w.codes[i]);
  // Integer forms value * 2^shift (exact; 0 for the non-finite codes, which take the double sum).
  std::vector<int64_t> ai(m * k), wi(n * k);
  for (int64_t i = 0; i < m * k; ++i) ai[i] = std::isfinite(av[i]) ? static_cast<int64_t>(std::ldexp(av[i], sha)) : 0;
  for (int64_t i = 0; i < n * k; ++i) wi[i] = std::isfinite(wv[i]) ? static_cast<int64_t>(std::ldexp(wv[i], shb)) : 0;
  y->assign(m * n, 0.0);
  mag->assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0, abs = 0;
      for (int64_t g = 0; g < groups; ++g) {
        const uint8_t sa = a.scales[i * groups + g], sb = w.scales[c * groups + g];
        double t;
        if (sa == 0xFF || sb == 0xFF) {
          t = nan;
        } else {
          __int128 s = 0;
          double sd = 0;
          bool finite = true;
          for (int64_t j = g * 32; j < g * 32 + 32; ++j) {
            const double x = av[i * k + j], v = wv[c * k + j];
            sd += x * v;
            if (!std::isfinite(x) || !std::isfinite(v)) {
              finite = false;
              continue;
            }
            s += static_cast<__int128>(ai[i * k + j]) * wi[c * k + j];
          }
          const int e = sa + sb - 254;
          t = finite ? std::ldexp(static_cast<double>(s), e - sha - shb) : sd * std::ldexp(1.0, e);
        }
        acc += t;
        abs += std::fabs(t);
      }
      const double bias = d.bias ? d.bias[c] : 0.0;
      (*y)[i * n + c] = acc + bias;
      (*mag)[i * n + c] = abs + std::fabs(bias);
    }
}

}  // namespace qj::ref
