// F16 / BF16 weight GEMM (fp32 or bf16 A, fp32 accumulation) against src/ref at every ISA tier.
//
// The kernels may sum K in any order (K-interleaved accumulator sets at small M), so general
// cases are compared with a rounding-error bound derived below; cases whose every partial sum is
// exact in fp32 are compared bit for bit with ref::gemm_float, for fp32 and bf16 output (the bf16
// round-to-nearest-even ties included); and a bf16 output must be exactly the bf16 rounding of
// the fp32 output of the same plan.
//
// Error bound (u = 2^-24, the fp32 unit roundoff; s = sum_k a_k w_k exact, S = sum_k |a_k w_k|):
//  - every a_k and w_k is an fp32 value (f16 / bf16 codes and bf16 A widen exactly), each FMA
//    rounds once, and any order of K additions combined into one sum (including adding
//    K-interleaved partial sums at the end) is a summation tree of depth <= K: the classic bound
//    |s^ - s| <= gamma_K S, gamma_K = K u / (1 - K u)              (Higham, Accuracy and
//    Stability of Numerical Algorithms, eq. 4.4, which holds for any order);
//  - y = fl(s^ + bias) adds u |s^ + bias|; ReLU does not increase the error;
//  - C = fl(y + beta C_old) (one fma) adds u |result|;
//  - bf16 output: the fp32 result rounded to 8 significant bits adds 2^-8 |result|.
//  e = gamma_K S, then e += u (|s + bias| + e), then e += u (|beta C_old + y| + e), then for bf16
//  e += 2^-8 (|value| + e). The double-precision reference sum itself errs by at most
//  K 2^-53 S, added to the bound. Nothing in the bound is tuned to the kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "src/formats/half.h"
#include "src/core/isa.h"
#include "src/ops/gemm.h"
#include "src/ops/int_weights.h"
#include "src/ref/gemm_float_ref.h"
#include "src/ref/gemm_ref.h"
#include "test/test_util.h"

namespace {

enum Values { kRandom, kSpecials, kExactInts };

struct FloatCase {
  int64_t m = 1, n = 1, k = 1;
  qj_dtype w_type = QJ_F16;
  qj_dtype a_type = QJ_F32;
  qj_dtype c_type = QJ_F32;
  bool bias = true;
  bool relu = false;
  float beta = 0.0f;
  qj_layout layout = QJ_LAYOUT_KN;
  int64_t lda_pad = 0, ldc_pad = 0, wld_pad = 1;
  int values = kRandom;
  bool from_fp32 = false;  // qj_weights_quantize_pack from fp32 instead of codes
  int threads = 1;
  uint32_t seed = 1;

  std::string str() const {
    std::ostringstream o;
    o << "m=" << m << " n=" << n << " k=" << k << " w=" << qj_dtype_name(w_type)
      << " a=" << qj_dtype_name(a_type) << " c=" << qj_dtype_name(c_type) << " bias=" << bias
      << " relu=" << relu << " beta=" << beta << " layout=" << layout << " values=" << values
      << " from_fp32=" << from_fp32 << " threads=" << threads << " seed=" << seed
      << " isa=" << qj_isa_name(qj_max_isa());
    return o.str();
  }
};

uint16_t to_code(qj_dtype t, float v) { return t == QJ_F16 ? qj::f32_to_f16(v) : qj::f32_to_bf16(v); }
float from_code(qj_dtype t, uint16_t h) { return t == QJ_F16 ? qj::f16_to_f32(h) : qj::bf16_to_f32(h); }

struct Data {
  std::vector<uint16_t> codes;  // weights as stored (layout, wld)
  std::vector<float> w32;       // the same weights as fp32 (for from_fp32), layout, wld
  int64_t wld = 0;
  qj::ref::FloatWeights rw;     // decoded K x N
  std::vector<uint8_t> a;
  int64_t lda = 0;
  std::vector<float> bias;
  std::vector<uint8_t> c0;      // the initial C
  int64_t ldc = 0;
};

size_t esz(qj_dtype t) { return t == QJ_F32 ? 4 : 2; }

Data make_data(const FloatCase& c) {
  std::mt19937 g(c.seed);
  Data d;
  const int64_t m = c.m, n = c.n, k = c.k;
  d.wld = (c.layout == QJ_LAYOUT_KN ? n : k) + c.wld_pad;
  const int64_t rows = c.layout == QJ_LAYOUT_KN ? k : n;
  d.codes.assign(rows * d.wld, 0x7e00);
  d.w32.assign(rows * d.wld, std::numeric_limits<float>::quiet_NaN());
  d.rw.k = k;
  d.rw.n = n;
  d.rw.w.resize(k * n);
  const bool f16 = c.w_type == QJ_F16;
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) {
      float v;
      int r = -1;
      if (c.values == kExactInts) {
        v = static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(g));
      } else {
        v = std::uniform_real_distribution<float>(-2.0f, 2.0f)(g);
        if (c.values == kSpecials) {
          r = std::uniform_int_distribution<int>(0, 19)(g);
          // The largest finite f16; for bf16 (whose max is near FLT_MAX, so any product with
          // |a| > 1 overflows fp32 and the double reference would not) a large exact value.
          const float fmax = f16 ? 65504.0f : 0x1p120f;
          if (r == 0) v = std::numeric_limits<float>::infinity();  // -> inf code
          if (r == 1) v = -std::numeric_limits<float>::infinity();
          if (r == 2) v = std::numeric_limits<float>::quiet_NaN();
          if (r == 3) v = fmax;
          if (r == 4) v = -fmax;
          if (r == 5) v = f16 ? 5.9604645e-8f * (1 + (kk % 1000)) : 1e-39f * (1 + kk % 7);  // subnormals
          if (r == 6) v = f16 ? -6.0e-5f : -9e-39f;
        }
      }
      uint16_t h = to_code(c.w_type, v);
      // NaNs whose payload fills the mantissa: a bf16 rounding that does not test for NaN carries
      // them into the sign (0x7fff... + 0x7fff -> +-0).
      if (r == 7) h = 0x7fff;
      if (r == 8) h = 0xffff;
      size_t idx = c.layout == QJ_LAYOUT_KN ? kk * d.wld + j : j * d.wld + kk;
      d.codes[idx] = h;
      d.w32[idx] = from_code(c.w_type, h);  // representable: conversion at pack is exact
      d.rw.w[kk * n + j] = from_code(c.w_type, h);
    }
  d.lda = k + c.lda_pad;
  d.a.assign(m * d.lda * esz(c.a_type), 0);
  for (int64_t i = 0; i < m * d.lda; ++i) {
    float v = c.values == kExactInts ? static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(g))
                                     : std::uniform_real_distribution<float>(-2.0f, 2.0f)(g);
    // specials: now and then an A NaN with every mantissa bit set (memset 0xff)
    if (c.values == kSpecials && std::uniform_int_distribution<int>(0, 199)(g) == 0) v = qj::bits_f32(0xffffffffu);
    if (c.a_type == QJ_F32) {
      std::memcpy(&d.a[i * 4], &v, 4);
    } else {
      uint16_t h = qj::f32_to_bf16(v);
      std::memcpy(&d.a[i * 2], &h, 2);
    }
  }
  d.bias.resize(n);
  for (auto& b : d.bias)
    b = c.values == kExactInts ? static_cast<float>(std::uniform_int_distribution<int>(200, 300)(g)) + 0.0f
                               : std::uniform_real_distribution<float>(-3.0f, 3.0f)(g);
  d.ldc = n + c.ldc_pad;
  d.c0.assign(m * d.ldc * esz(c.c_type) + 64, 0);
  for (size_t i = 0; i < d.c0.size(); ++i) d.c0[i] = static_cast<uint8_t>(i * 13 + 1);
  if (c.c_type == QJ_F32)
    for (int64_t i = 0; i < m * d.ldc; ++i) {
      float v = c.values == kExactInts ? static_cast<float>(std::uniform_int_distribution<int>(-4, 4)(g))
                                       : std::uniform_real_distribution<float>(-4.0f, 4.0f)(g);
      std::memcpy(&d.c0[i * 4], &v, 4);
    }
  return d;
}

qj_gemm_desc make_desc(const FloatCase& c, const Data& d) {
  qj_gemm_desc g{};
  g.a_type = c.a_type;
  g.c_type = c.c_type;
  g.bias = c.bias ? d.bias.data() : nullptr;
  g.activation = c.relu ? QJ_ACT_RELU : QJ_ACT_NONE;
  g.beta = c.beta;
  g.a_scale = 123.0f;  // ignored for float weights
  g.c_scale = 7.0f;
  return g;
}

// Runs the case through the C API into `out` (initialised from d.c0). Returns "" or the failure.
std::string run_api(const FloatCase& c, const Data& d, std::vector<uint8_t>* out) {
  qj_weights_desc wd{};
  wd.dtype = c.w_type;
  wd.k = c.k;
  wd.n = c.n;
  wd.layout = c.layout;
  qj_weights w = nullptr;
  qj_status st = c.from_fp32 ? qj_weights_quantize_pack(&wd, d.w32.data(), d.wld, &w)
                             : qj_weights_pack(&wd, d.codes.data(), d.wld, &w);
  if (st != QJ_OK) return std::string("pack: ") + qj_last_error();
  qj_gemm_desc g = make_desc(c, d);
  qj_gemm_plan p = nullptr;
  if (std::string e = qjt::create_jit_plan(g, w, &p); !e.empty()) {
    qj_weights_destroy(w);
    return e;
  }
  *out = d.c0;
  std::string err;
  for (int t = 0; t < c.threads && err.empty(); ++t) {
    qj_partition part{t, c.threads};
    if (qj_gemm_run(p, c.m, d.a.data(), d.lda, out->data(), d.ldc, &part) != QJ_OK)
      err = std::string("run: ") + qj_last_error();
  }
  qj_gemm_plan_destroy(p);
  qj_weights_destroy(w);
  return err;
}

float out_value(const FloatCase& c, const std::vector<uint8_t>& buf, int64_t idx) {
  if (c.c_type == QJ_F32) {
    float v;
    std::memcpy(&v, &buf[idx * 4], 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, &buf[idx * 2], 2);
  return qj::bf16_to_f32(h);
}

// Within the bound of the file comment; padding bytes untouched.
std::string check_bound(const FloatCase& c, const Data& d, const std::vector<uint8_t>& out) {
  qj_gemm_desc g = make_desc(c, d);
  std::vector<double> sum, abs_sum;
  qj::ref::gemm_float_f64(g, d.rw, c.m, d.a.data(), d.lda, &sum, &abs_sum);
  const double u = std::ldexp(1.0, -24), ku = c.k * u, gamma = ku / (1 - ku);
  const size_t e = esz(c.c_type);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < d.ldc; ++j) {
      const int64_t idx = i * d.ldc + j;
      if (j >= c.n) {
        if (std::memcmp(&out[idx * e], &d.c0[idx * e], e) != 0) return "padding of C was written";
        continue;
      }
      const double s = sum[i * c.n + j], S = abs_sum[i * c.n + j];
      const double b = c.bias ? d.bias[j] : 0.0;
      // ReLU maps NaN to 0 (as the reference and vmaxps with the constant second do).
      double y = s + b;
      if (c.relu) y = y > 0 ? y : 0;
      double exact = y, c_old = 0;
      if (c.beta != 0.0f) {
        float v;
        std::memcpy(&v, &d.c0[idx * 4], 4);
        c_old = v;
        exact += c.beta * c_old;
      }
      double err;
      if (std::isfinite(s)) {
        err = gamma * S + c.k * std::ldexp(1.0, -53) * S;
        err += u * (std::fabs(s + b) + err);
      } else {
        err = 0;  // a non-finite sum: only an exact 0 from ReLU can make the result finite
      }
      if (c.beta != 0.0f) err += u * (std::fabs(exact) + err);
      if (c.c_type == QJ_BF16) err += std::ldexp(1.0, -8) * (std::fabs(exact) + err);
      const float got = out_value(c, out, idx);
      std::ostringstream o;
      o << "row " << i << " col " << j << ": got " << got << " exact " << exact << " bound " << err;
      if (std::isnan(exact)) {
        if (!std::isnan(got)) return o.str() + " (want nan)";
        continue;
      }
      if (std::isinf(exact)) {
        if (!(std::isinf(got) && (got > 0) == (exact > 0))) return o.str() + " (want the same inf)";
        continue;
      }
      if (!(std::fabs(got - exact) <= err)) return o.str();
    }
  return "";
}

#define EXPECT_OK(expr) EXPECT_EQ((expr), "")

// Random values: within the bound; bf16 output = bf16(fp32 output of the same problem).
std::string check_case(FloatCase c) {
  Data d = make_data(c);
  std::vector<uint8_t> out;
  std::string err = run_api(c, d, &out);
  if (!err.empty()) return err;
  err = check_bound(c, d, out);
  if (!err.empty() || c.c_type != QJ_BF16) return err;
  FloatCase f = c;
  f.c_type = QJ_F32;
  f.beta = 0.0f;
  Data df = make_data(f);  // same seed: same A, weights, bias
  std::vector<uint8_t> out32;
  err = run_api(f, df, &out32);
  if (!err.empty()) return err;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      float v;
      uint16_t h;
      std::memcpy(&v, &out32[(i * df.ldc + j) * 4], 4);
      std::memcpy(&h, &out[(i * d.ldc + j) * 2], 2);
      if (h != qj::f32_to_bf16(v)) {
        std::ostringstream o;
        o << "bf16 output at row " << i << " col " << j << " is 0x" << std::hex << h
          << ", the RNE of the fp32 output " << v << " is 0x" << qj::f32_to_bf16(v);
        return o.str();
      }
    }
  return "";
}

// Integer data: every partial sum is an integer below 2^24, exact in fp32 in any order, so the
// kernel must equal ref::gemm_float bit for bit (bf16: the reference's RNE, ties included).
std::string check_exact(const FloatCase& c) {
  Data d = make_data(c);
  std::vector<uint8_t> out;
  std::string err = run_api(c, d, &out);
  if (!err.empty()) return err;
  std::vector<uint8_t> expect = d.c0;
  qj_gemm_desc g = make_desc(c, d);
  qj::ref::gemm_float(g, d.rw, c.m, d.a.data(), d.lda, expect.data(), d.ldc);
  if (out == expect) return "";
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != expect[i]) {
      std::ostringstream o;
      const int64_t elem = static_cast<int64_t>(i / esz(c.c_type));
      o << "byte " << i << " (row " << elem / d.ldc << ", col " << elem % d.ldc << "): got "
        << out_value(c, out, elem) << " want " << out_value(c, expect, elem);
      return o.str();
    }
  return "";
}

const qj_dtype kWTypes[] = {QJ_F16, QJ_BF16};

TEST(GemmF16, BasicEveryTier) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kWTypes)
      for (qj_dtype ct : {QJ_F32, QJ_BF16}) {
        FloatCase c;
        c.w_type = wt;
        c.c_type = ct;
        c.m = 9, c.n = 37, c.k = 53;
        EXPECT_OK(check_case(c)) << c.str();
        c.values = kExactInts;
        EXPECT_OK(check_exact(c)) << c.str();
      }
  }
}

// Which kernels of a plan prefetch their weight stream (src/ops/gemm.cpp float_prefetch_bytes)
// for weights below twice L2 (512 x 512, FBGEMM's FP16 shapes): on Zen 5 every f16 kernel; else
// those of more rows than a K unit's cache lines (nr columns of 2 bytes for f16, 4 for bf16 pairs).
// The predicate is written here, not taken from the library.
TEST(GemmF16, WeightPrefetchRule) {
  const int64_t k = 512, n = 512;
  for (qj_isa isa : qjt::supported_isas()) {
    if (isa < QJ_ISA_AVX2) continue;  // (no JIT kernels below AVX2)
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kWTypes) {
      qj_weights_desc wd{};
      wd.dtype = wt;
      wd.k = k;
      wd.n = n;
      wd.layout = QJ_LAYOUT_KN;
      std::vector<uint16_t> b(static_cast<size_t>(k * n), 0x3c00);  // 1.0 in f16 (1.0078125 in bf16)
      std::shared_ptr<qj::PackedWeights> w;
      std::unique_ptr<qj::GemmPlan> p;
      qj_gemm_desc gd{};
      gd.a_type = QJ_F32;
      gd.c_type = QJ_F32;
      ASSERT_EQ(qj::pack_int_weights(wd, b.data(), n, isa, &w), QJ_OK) << qj_last_error();
      ASSERT_EQ(qj::gemm_plan_create(gd, w, &p), QJ_OK) << qj_last_error();
      ASSERT_FALSE(p->kernels.empty());
      const int64_t unit_lines = (p->w->nr * (wt == QJ_BF16 ? 4 : 2) + 63) / 64;
      for (size_t r = 1; r <= p->kernels.size(); ++r) {
        const bool want = (wt == QJ_F16 && qj::amd_family() >= 0x1a) || static_cast<int64_t>(r) > unit_lines;
        const std::string& name = p->kernels[r - 1].name();
        EXPECT_EQ(name.find("_pf") != std::string::npos, want)
            << qj_isa_name(isa) << " " << qj_dtype_name(wt) << " rows " << r << ": " << name;
      }
    }
  }
}

// Both ways the zmm kernels take A (src/ops/gemm.cpp: an embedded {1to16} broadcast in each FMA,
// or each A element broadcast into a register once; the CPU picks one, the hook forces either)
// against the reference at every tile height, bit for bit on integer data; the kernels' names
// tell which way ran (`_rb`), and the default rule is the one written here (register broadcasts
// on Zen 5, elsewhere for one-row bf16 tiles only).
TEST(GemmF16, ABroadcastForms) {
  for (qj_isa isa : qjt::supported_isas()) {
    if (isa < QJ_ISA_AVX512) continue;  // (ymm kernels always broadcast into a register)
    qjt::IsaCap cap(isa);
    uint32_t seed = 900;
    for (int mode : {-1, 0, 1}) {
      qj::ScopedRegisterBroadcast force(mode);
      for (qj_dtype wt : kWTypes) {
        for (int64_t m : {1, 2, 5, 13, 14, 15})
          for (int64_t n : {17, 64})
            for (int64_t k : {33, 256}) {
              FloatCase c;
              c.w_type = wt, c.m = m, c.n = n, c.k = k, c.seed = ++seed;
              c.c_type = seed % 2 ? QJ_BF16 : QJ_F32;
              c.relu = seed % 3 == 0;
              EXPECT_OK(check_case(c)) << c.str() << " mode " << mode;
              c.values = kExactInts;
              EXPECT_OK(check_exact(c)) << c.str() << " mode " << mode;
            }
        qj_weights_desc wd{};
        wd.dtype = wt;
        wd.k = 256;
        wd.n = 64;
        wd.layout = QJ_LAYOUT_KN;
        std::vector<uint16_t> b(static_cast<size_t>(wd.k * wd.n), 0x3c00);
        std::shared_ptr<qj::PackedWeights> w;
        std::unique_ptr<qj::GemmPlan> p;
        qj_gemm_desc gd{};
        gd.a_type = QJ_F32;
        gd.c_type = QJ_F32;
        ASSERT_EQ(qj::pack_int_weights(wd, b.data(), wd.n, isa, &w), QJ_OK) << qj_last_error();
        ASSERT_EQ(qj::gemm_plan_create(gd, w, &p), QJ_OK) << qj_last_error();
        ASSERT_FALSE(p->kernels.empty());
        for (size_t r = 1; r <= p->kernels.size(); ++r) {
          const bool rule = qj::amd_family() >= 0x1a || (wt == QJ_BF16 && r == 1);
          const bool want = mode < 0 ? rule : mode == 1;
          const std::string& name = p->kernels[r - 1].name();
          EXPECT_EQ(name.find("_rb") != std::string::npos, want)
              << qj_isa_name(isa) << " " << qj_dtype_name(wt) << " mode " << mode << " rows " << r << ": " << name;
        }
      }
    }
  }
}

TEST(GemmF16, ShapeSweep) {
  const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 13, 14, 15, 29};
  const int64_t ns[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 65};
  const int64_t ks[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 64, 101};
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 10;
    for (int64_t m : ms)
      for (int64_t n : ns) {
        FloatCase c;
        c.m = m;
        c.n = n;
        c.k = ks[(m * 5 + n) % 11];
        c.w_type = kWTypes[(m + n) % 2];
        c.a_type = (m % 3 == 0) ? QJ_BF16 : QJ_F32;
        c.c_type = (n % 3 == 0) ? QJ_BF16 : QJ_F32;
        c.layout = (m % 2) ? QJ_LAYOUT_KN : QJ_LAYOUT_NK;
        c.bias = (m + n) % 4 != 0;
        c.relu = (m + n) % 5 == 0;
        c.beta = c.c_type == QJ_F32 && (m + n) % 3 == 1 ? 1.0f : 0.0f;
        c.lda_pad = m % 3;
        c.ldc_pad = n % 2;
        c.seed = ++seed;
        EXPECT_OK(check_case(c)) << c.str();
        c.values = kExactInts;
        EXPECT_OK(check_exact(c)) << c.str();
      }
  }
}

// The large and FBGEMM shapes (qjt::large_and_fbgemm_shapes), both weight types, within the
// bound; fp32 and bf16 A and C alternate.
TEST(GemmF16, LargeAndFbgemmShapes) {
  qjt::each_large_shape_at_every_tier(1, [](const qjt::Shape& s, uint32_t seed) {
    FloatCase c;
    c.m = s.m, c.n = s.n, c.k = s.k, c.seed = seed;
    c.w_type = kWTypes[seed % 2];
    c.a_type = seed % 3 == 0 ? QJ_BF16 : QJ_F32;
    c.c_type = seed % 4 == 1 ? QJ_BF16 : QJ_F32;
    c.layout = seed % 2 ? QJ_LAYOUT_KN : QJ_LAYOUT_NK;
    EXPECT_OK(check_case(c)) << c.str();
  });
}

// fp32 A is read in place while a 14-row tile of it fits L1 (K <= 585) and packed beyond: both
// sides of that switch, tiles of every height (balanced tiles: 15 rows run as 8 + 7).
TEST(GemmF16, DirectAndPackedA) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 30;
    for (int64_t k : {584, 585, 586, 700})
      for (int64_t m : {1, 5, 15, 30}) {
        FloatCase c;
        c.m = m;
        c.n = 33;
        c.k = k;
        c.w_type = kWTypes[(m + k) % 2];
        c.lda_pad = m % 2;
        c.seed = ++seed;
        EXPECT_OK(check_case(c)) << c.str();
        c.values = kExactInts;
        EXPECT_OK(check_exact(c)) << c.str();
      }
  }
}

// bias, ReLU, beta (FBGEMM's cblas_gemm_compute: C = A B + beta C) and bf16 output, exactly.
TEST(GemmF16, OutputStages) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 50;
    for (qj_dtype wt : kWTypes)
      for (qj_dtype ct : {QJ_F32, QJ_BF16})
        for (float beta : {0.0f, 1.0f, -0.5f})
          for (bool relu : {false, true})
            for (bool bias : {false, true}) {
              if (ct == QJ_BF16 && beta != 0.0f) continue;
              FloatCase c;
              c.w_type = wt;
              c.c_type = ct;
              c.beta = beta;
              c.relu = relu;
              c.bias = bias;
              c.m = 17, c.n = 45, c.k = 40;
              c.seed = ++seed;
              EXPECT_OK(check_case(c)) << c.str();
              c.values = kExactInts;
              EXPECT_OK(check_exact(c)) << c.str();
            }
  }
}

// fp16 / bf16 specials in the weights: inf, -inf, nan (also with a full payload, and in A), the
// largest finite value, subnormals; fp32 and bf16 output.
TEST(GemmF16, SpecialWeights) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 70;
    for (qj_dtype wt : kWTypes)
      for (int64_t m : {1, 3, 14}) for (qj_dtype ct : {QJ_F32, QJ_BF16}) {
        FloatCase c;
        c.values = kSpecials;
        c.w_type = wt;
        c.c_type = ct;
        c.m = m;
        c.n = 50;
        c.k = 20;
        c.relu = m == 3;
        c.seed = ++seed;
        EXPECT_OK(check_case(c)) << c.str();
      }
    // Subnormal-only weights: every product and sum is tiny but exact conversion matters.
    for (qj_dtype wt : kWTypes) {
      FloatCase c;
      c.w_type = wt;
      c.m = 4, c.n = 33, c.k = 64;
      Data d = make_data(c);
      const uint16_t sub = wt == QJ_F16 ? 0x0001 : 0x0001;  // smallest subnormal
      for (auto& h : d.codes) h = static_cast<uint16_t>(sub + (h & 0x8000) + (h & 0x3f));
      for (int64_t kk = 0; kk < c.k; ++kk)
        for (int64_t j = 0; j < c.n; ++j)
          d.rw.w[kk * c.n + j] = from_code(wt, d.codes[c.layout == QJ_LAYOUT_KN ? kk * d.wld + j : j * d.wld + kk]);
      std::vector<uint8_t> out;
      ASSERT_EQ(run_api(c, d, &out), "");
      EXPECT_OK(check_bound(c, d, out)) << c.str();
    }
  }
}

// fp32 weights converted at pack time: RNE, the values that would overflow to inf clamped to the
// format's max and counted (qj_weights_clamped); inf / nan kept and not counted.
TEST(GemmF16, Fp32ConversionClampsAndReports) {
  for (qj_dtype wt : kWTypes) {
    const bool f16 = wt == QJ_F16;
    const int64_t k = 4, n = 3;
    const float big = f16 ? 70000.0f : 3.4e38f;
    const float below = f16 ? 65519.0f : 3.39e38f;  // rounds to max: not a clamp
    std::vector<float> w = {big, -big, below, 1.0f, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), f16 ? 65520.0f : 3.3961776e38f,
                            0.5f, -0.25f, 1e-30f, 3.0f, -7.0f};
    qj_weights_desc wd{};
    wd.dtype = wt;
    wd.k = k;
    wd.n = n;
    wd.layout = QJ_LAYOUT_KN;
    qj_weights pw = nullptr;
    ASSERT_EQ(qj_weights_quantize_pack(&wd, w.data(), n, &pw), QJ_OK) << qj_last_error();
    int64_t clamped = -1;
    ASSERT_EQ(qj_weights_clamped(pw, &clamped), QJ_OK);
    EXPECT_EQ(clamped, 3) << qj_dtype_name(wt);  // big, -big and the first value rounding to inf
    std::vector<uint8_t> img(qj_weights_serialized_size(pw));
    ASSERT_EQ(qj_weights_serialize(pw, img.data(), img.size()), QJ_OK);
    qj_weights pw2 = nullptr;
    ASSERT_EQ(qj_weights_deserialize(img.data(), img.size(), &pw2), QJ_OK);
    clamped = -1;
    ASSERT_EQ(qj_weights_clamped(pw2, &clamped), QJ_OK);
    EXPECT_EQ(clamped, 3);
    qj_weights_destroy(pw2);
    // The packed values (white box): clamped to the max, inf / nan kept, the rest RNE.
    const float fmax = f16 ? 65504.0f : qj::bf16_to_f32(0x7f7f);
    std::shared_ptr<qj::PackedWeights> packed;
    ASSERT_EQ(qj::quantize_int_weights(wd, w.data(), n, qj_max_isa(), &packed), QJ_OK);
    EXPECT_EQ(packed->clamped, 3);
    EXPECT_EQ(packed->value(0, 0), fmax);
    EXPECT_EQ(packed->value(0, 1), -fmax);
    EXPECT_EQ(packed->value(0, 2), fmax);
    EXPECT_TRUE(std::isinf(packed->value(1, 1)) && packed->value(1, 1) > 0);
    EXPECT_TRUE(std::isnan(packed->value(1, 2)));
    EXPECT_EQ(packed->value(2, 0), fmax);
    for (int64_t i : {3, 7, 8, 9, 10, 11})
      EXPECT_EQ(packed->value(i / n, i % n), from_code(wt, to_code(wt, w[i]))) << i;
    // A GEMM on finite clamped weights sees the clamped values.
    std::vector<float> wf = {big, -big, 1.0f, 2.0f};
    qj_weights_desc wd2 = wd;
    wd2.k = 2;
    wd2.n = 2;
    qj_weights pw3 = nullptr;
    ASSERT_EQ(qj_weights_quantize_pack(&wd2, wf.data(), 2, &pw3), QJ_OK);
    qj_gemm_desc d{};
    d.a_type = QJ_F32;
    d.c_type = QJ_F32;
    qj_gemm_plan p = nullptr;
    ASSERT_EQ(qj_gemm_plan_create(&d, pw3, &p), QJ_OK) << qj_last_error();
    std::vector<float> a = {1.0f, 0.0f}, c(2, 0.0f);
    ASSERT_EQ(qj_gemm_run(p, 1, a.data(), 2, c.data(), 2, nullptr), QJ_OK);
    EXPECT_EQ(c[0], fmax);
    EXPECT_EQ(c[1], -fmax);
    qj_weights_destroy(pw3);
    qj_gemm_plan_destroy(p);
    qj_weights_destroy(pw);
  }
  // Weights made from codes never report clamps.
  std::vector<uint16_t> codes(8, 0x7bff);
  qj_weights_desc wd{};
  wd.dtype = QJ_F16;
  wd.k = 2;
  wd.n = 4;
  qj_weights pw = nullptr;
  ASSERT_EQ(qj_weights_pack(&wd, codes.data(), 4, &pw), QJ_OK);
  int64_t clamped = -1;
  ASSERT_EQ(qj_weights_clamped(pw, &clamped), QJ_OK);
  EXPECT_EQ(clamped, 0);
  EXPECT_EQ(qj_weights_clamped(pw, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(qj_weights_clamped(nullptr, &clamped), QJ_ERR_INVALID_ARGUMENT);
  qj_weights_destroy(pw);
}

TEST(GemmF16, FromFp32AndPartitions) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (int threads : {1, 2, 3}) {
      FloatCase c;
      c.from_fp32 = true;
      c.threads = threads;
      c.m = threads == 3 ? 2 : 31;
      c.n = 70;
      c.k = 33;
      c.w_type = kWTypes[threads % 2];
      c.seed = 90 + threads;
      EXPECT_OK(check_case(c)) << c.str();
    }
  }
}

// Seeded random sample of combinations of every dimension (QJ_TEST_ITERATIONS / QJ_TEST_SEED
// scale it up for a long local run, test/test_util.h): random values within the bound, integer
// values bit for bit.
TEST(GemmF16, RandomCombinations) {
  qjt::for_each_random_case(66001u, 40, [&](qj_isa, qjt::Picker& pick, uint32_t seed) {
    FloatCase c;
    c.seed = seed;
    c.w_type = kWTypes[pick(2)];
    c.a_type = pick(3) == 0 ? QJ_BF16 : QJ_F32;
    c.c_type = pick(3) == 0 ? QJ_BF16 : QJ_F32;
    c.m = pick.rows(120, 100, 300);
    c.n = 1 + pick(pick(4) == 0 ? 400 : 80);
    c.k = 1 + pick(pick(4) == 0 ? 700 : 90);
    c.bias = pick(2);
    c.relu = pick(3) == 0;
    c.beta = c.c_type == QJ_F32 && pick(3) == 0 ? (pick(2) ? 1.0f : -0.5f) : 0.0f;
    c.layout = static_cast<qj_layout>(pick(2));
    c.lda_pad = pick(3) == 0 ? pick(9) : 0;
    c.ldc_pad = pick(3) == 0 ? pick(9) : 0;
    c.wld_pad = pick(3);
    c.from_fp32 = pick(4) == 0;
    c.threads = pick(4) == 0 ? 2 + pick(4) : 1;
    if (pick(3) == 0) {
      c.values = kExactInts;
      EXPECT_OK(check_exact(c)) << c.str();
    } else {
      EXPECT_OK(check_case(c)) << c.str();
    }
  });
}

// Serialization round trip, and repacking when weights packed at one tier are planned at another.
TEST(GemmF16, SerializeAndRepack) {
  for (qj_dtype wt : kWTypes) {
    FloatCase c;
    c.w_type = wt;
    c.m = 6, c.n = 40, c.k = 31, c.values = kExactInts;
    Data d = make_data(c);
    qj_weights_desc wd{};
    wd.dtype = wt;
    wd.k = c.k;
    wd.n = c.n;
    qj_weights w0 = nullptr;
    {
      qjt::IsaCap cap(QJ_ISA_AVX2 <= qj_cpu_isa() ? QJ_ISA_AVX2 : QJ_ISA_SCALAR);
      ASSERT_EQ(qj_weights_pack(&wd, d.codes.data(), d.wld, &w0), QJ_OK);
    }
    std::vector<uint8_t> img(qj_weights_serialized_size(w0));
    ASSERT_EQ(qj_weights_serialize(w0, img.data(), img.size()), QJ_OK);
    std::vector<uint8_t> expect = d.c0;
    qj_gemm_desc g = make_desc(c, d);
    qj::ref::gemm_float(g, d.rw, c.m, d.a.data(), d.lda, expect.data(), d.ldc);
    for (qj_isa isa : qjt::supported_isas()) {
      qjt::IsaCap cap(isa);
      qj_weights w1 = nullptr;
      ASSERT_EQ(qj_weights_deserialize(img.data(), img.size(), &w1), QJ_OK) << qj_last_error();
      for (qj_weights w : {w0, w1}) {
        qj_gemm_plan p = nullptr;
        ASSERT_EQ(qj_gemm_plan_create(&g, w, &p), QJ_OK) << qj_last_error();
        std::vector<uint8_t> out = d.c0;
        ASSERT_EQ(qj_gemm_run(p, c.m, d.a.data(), d.lda, out.data(), d.ldc, nullptr), QJ_OK);
        EXPECT_TRUE(out == expect) << qj_isa_name(isa);
        qj_gemm_plan_destroy(p);
      }
      qj_weights_destroy(w1);
    }
    qj_weights_destroy(w0);
  }
}

TEST(GemmF16, BadInput) {
  std::vector<uint16_t> codes(64 * 64, 0x3c00);
  std::vector<float> scales(64, 1.0f);
  qj_weights_desc wd{};
  wd.dtype = QJ_F16;
  wd.k = 64;
  wd.n = 64;
  wd.scales = scales.data();
  qj_weights w = nullptr;
  EXPECT_EQ(qj_weights_pack(&wd, codes.data(), 64, &w), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("scales"), std::string::npos);
  EXPECT_EQ(w, nullptr);
  wd.scales = nullptr;
  EXPECT_EQ(qj_weights_pack(&wd, codes.data(), 63, &w), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("ld=63"), std::string::npos);
  ASSERT_EQ(qj_weights_pack(&wd, codes.data(), 64, &w), QJ_OK);
  qj_gemm_desc d{};
  d.a_type = QJ_U8;
  d.c_type = QJ_F32;
  qj_gemm_plan p = nullptr;
  EXPECT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("a_type"), std::string::npos) << qj_last_error();
  d.a_type = QJ_F32;
  d.c_type = QJ_U8;
  EXPECT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("c_type"), std::string::npos) << qj_last_error();
  d.c_type = QJ_BF16;
  d.beta = 1.0f;
  EXPECT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("beta"), std::string::npos) << qj_last_error();
  d.beta = 0.0f;
  std::vector<float> bias(64, 0.0f);
  bias[9] = std::numeric_limits<float>::infinity();
  d.bias = bias.data();
  EXPECT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("bias[9]"), std::string::npos) << qj_last_error();
  d.bias = nullptr;
  ASSERT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK);
  std::vector<float> a(4 * 64, 1.0f);
  std::vector<uint16_t> c(4 * 64, 0x1234);
  EXPECT_EQ(qj_gemm_run(p, 4, a.data(), 63, c.data(), 64, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("lda=63"), std::string::npos);
  for (uint16_t h : c) ASSERT_EQ(h, 0x1234);  // nothing written
  qj_gemm_plan_destroy(p);
  qj_weights_destroy(w);
}

}  // namespace
