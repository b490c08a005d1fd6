// GEMM with MXFP8 weights (E4M3, E5M2; fp32 / bf16 A not quantized, fp32 accumulation) against
// src/ref/gemm_mx_ref (gemm_mxfp8: every weight decoded with the scalar decoder, products and sums
// in double) at every ISA tier, plus packing, quantize_pack, serialization and misuse.
//
// Error bound (u = 2^-24; s = sum_k a_k w_k exact, S = sum_k |a_k w_k|, w_k = value * 2^(b - 127)):
//  - the kernels form every product a_k * w_k from exact fp32 operands: a bf16 A widens exactly,
//    the decoded weight (E5M2 value, or E4M3 value * 2^-8) is exact in fp16 -> fp32, and its
//    product by the power-of-two scale is exact (a 4-bit significand times 2^(b-127) stays on the
//    fp32 grid down to 2^-144 >= 2^-149, and the tests keep every weight below FLT_MAX);
//  - each FMA or addition rounds once. Scaled weights: a term passes the K / sets FMAs of its
//    set and <= 2 additions of the sets (<= K + 2 roundings). Per-block accumulators: <= 32 FMAs
//    in its block, <= 2 set additions, the fma into the total and the G - 1 later ones (<= 34 + G).
//    Both are <= D = K + G + 2 (G = K / 32), and any summation tree whose terms see at most D
//    roundings errs by at most gamma_D * S, gamma_D = D u / (1 - D u) (Higham, Accuracy and
//    Stability of Numerical Algorithms, 2nd ed., eq. 4.4 and its proof, which holds for any order);
//  - E4M3 accumulates value * 2^-8 and the epilogue multiplies by 2^8 (exact);
//  - partial results in the fp32 subnormal range round with an absolute error <= 2^-150 each, in
//    the accumulator's units: + D * 2^-150 * 2^8 (E4M3) or D * 2^-150 (E5M2);
//  - y = fl(acc * mult + bias) (one fma): + u (|s + bias| + e); ReLU does not increase it (and
//    maps NaN to 0, as the reference's y > 0 ? y : 0 does);
//  - C = fl(y + beta C_old) (one fma): + u (|result| + e); bf16 C: + 2^-8 (|result| + e);
//  - the double reference itself errs by <= K 2^-53 S, added.
// Nothing in the bound is tuned to the kernels. NaN / Inf classes must match exactly (a NaN
// weight, a 0xFF scale or +Inf + -Inf in one column give NaN in every row; one signed Inf, Inf).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/gemm_float.h"
#include "src/core/kernel_key.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/ops/gemm.h"
#include "src/ops/int_weights.h"
#include "src/ref/gemm_mx_ref.h"
#include "src/ref/mx_ref.h"
#include "test/test_util.h"

namespace {

enum Codes { kRandomFinite, kExhaustive, kSpecials };

struct Fp8Case {
  qj_dtype w = QJ_MXFP8_E4M3;
  int64_t m = 1, n = 1, k = 32;
  qj_dtype a_type = QJ_F32;
  qj_dtype c_type = QJ_F32;
  bool bias = true, relu = false;
  float beta = 0.0f;
  int codes = kRandomFinite;
  bool quantize = false;            // qj_weights_quantize_pack of fp32 (else qj_weights_pack)
  qj_layout layout = QJ_LAYOUT_KN;  // quantize_pack only
  int64_t lda_pad = 0, ldc_pad = 0;
  int threads = 1;
  int pack_isa = -1;                // pack under this cap (the plan repacks)
  bool serialize = false;           // run from a serialize / deserialize round trip
  uint32_t seed = 1;
  std::string str() const {
    std::ostringstream o;
    o << qj_dtype_name(w) << " m=" << m << " n=" << n << " k=" << k << " a=" << qj_dtype_name(a_type)
      << " c=" << qj_dtype_name(c_type) << " bias=" << bias << " relu=" << relu << " beta=" << beta
      << " codes=" << codes << " quantize=" << quantize << " layout=" << layout
      << " threads=" << threads << " pack_isa=" << pack_isa << " ser=" << serialize
      << " seed=" << seed << " isa=" << qj_isa_name(qj_max_isa());
    return o.str();
  }
};

bool is_special_code(qj_dtype t, uint8_t c) {
  if (t == QJ_MXFP8_E4M3) return (c & 0x7F) == 0x7F;
  return (c & 0x7C) == 0x7C;  // E5M2 exponent 31: Inf / NaN
}

std::vector<uint8_t> finite_codes(qj_dtype t) {
  std::vector<uint8_t> v;
  for (int c = 0; c < 256; ++c)
    if (!is_special_code(t, static_cast<uint8_t>(c))) v.push_back(static_cast<uint8_t>(c));
  return v;
}

// The weights of a case: codes / scales (reference form), and the API's input for them.
struct Weights {
  qj::ref::MxWeights rw;
  std::vector<float> wf;       // fp32 source (quantize path), layout, ld wld
  int64_t wld = 0;
  std::vector<uint8_t> elems;  // SPLIT element bytes per column, ld eld
  int64_t eld = 0;
  std::vector<uint8_t> sc;     // scales per column, ld sld
  int64_t sld = 0;
};

Weights make_weights(const Fp8Case& t) {
  std::mt19937 rng(t.seed);
  const int64_t blocks = t.k / 32;
  Weights W;
  qj::ref::MxWeights& rw = W.rw;
  rw.type = t.w;
  rw.k = t.k;
  rw.n = t.n;
  rw.codes.resize(t.n * t.k);
  rw.scales.resize(t.n * blocks);
  // Scale bytes 110..140: weights up to 57344 * 2^13, far below FLT_MAX.
  for (auto& s : rw.scales) s = static_cast<uint8_t>(110 + rng() % 31);
  const std::vector<uint8_t> fin = finite_codes(t.w);
  if (t.quantize) {
    W.wld = (t.layout == QJ_LAYOUT_KN ? t.n : t.k) + 3;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    W.wf.assign((t.layout == QJ_LAYOUT_KN ? t.k : t.n) * W.wld, 0.0f);
    std::vector<float> col(t.k);
    for (int64_t c = 0; c < t.n; ++c) {
      const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
      for (int64_t j = 0; j < t.k; ++j) {
        col[j] = nd(rng) * mag;
        if (c == 1 && j == t.k - 1) col[j] = std::numeric_limits<float>::infinity();  // NaN block
        if (c == 2 && j < 32) col[j] = 0.0f;                                             // zero block
        if (c == 3 && j % 7 == 0) col[j] = std::ldexp(col[j], -30);  // E4M3/E5M2 subnormals
        (t.layout == QJ_LAYOUT_KN ? W.wf[j * W.wld + c] : W.wf[c * W.wld + j]) = col[j];
      }
      // The reference codes come from the C API's quantizer (what quantize_pack must match).
      std::vector<uint8_t> el(blocks * 32);
      EXPECT_EQ(qj_mx_quantize(t.w, QJ_ROUND_FLOOR, col.data(), t.k, el.data(), &rw.scales[c * blocks]), QJ_OK);
      std::memcpy(&rw.codes[c * t.k], el.data(), t.k);
    }
  } else {
    for (int64_t c = 0; c < t.n; ++c)
      for (int64_t j = 0; j < t.k; ++j) {
        uint8_t& code = rw.codes[c * t.k + j];
        if (t.codes == kRandomFinite)
          code = fin[rng() % fin.size()];
        else  // every finite code in every column once K >= 256 (and across columns for less)
          code = fin[(j + 37 * c) % fin.size()];
      }
    if (t.codes == kSpecials) {
      auto at = [&](int64_t c, int64_t j) -> uint8_t& { return rw.codes[(c % t.n) * t.k + j % t.k]; };
      auto scale = [&](int64_t c, int64_t g) -> uint8_t& { return rw.scales[(c % t.n) * blocks + g % blocks]; };
      if (t.w == QJ_MXFP8_E4M3) {
        at(1, 5) = 0x7F;           // +NaN code
        at(2, t.k - 1) = 0xFF;     // -NaN code in the last block
      } else {
        at(1, 5) = 0x7C;           // +Inf
        at(2, t.k - 1) = 0xFC;     // -Inf
        at(3, 0) = 0x7C;           // +Inf and -Inf: NaN
        at(3, t.k / 2) = 0xFC;
        at(4, 9) = 0x7D;           // NaN codes
        at(5, 1) = 0xFE;
      }
      scale(6, blocks - 1) = 0xFF;  // NaN scale
      for (int64_t g = 0; g < blocks; ++g) {
        scale(7, g) = 0x00;         // 2^-127: fp32-subnormal weights (outputs ~1e-35 without bias)
        scale(8, g) = 0x01;
      }
      for (int64_t j = 0; j < 32; ++j) at(9, j) = (j % 2) ? 0x80 : 0x00;  // a zero block (+-0)
      for (int64_t j = 0; j < t.k; j += 3) at(10, j) = t.w == QJ_MXFP8_E4M3 ? 0x7E : 0x7B;  // +max
      for (int64_t j = 1; j < t.k; j += 3) at(10, j) = t.w == QJ_MXFP8_E4M3 ? 0xFE : 0xFB;  // -max
      for (int64_t j = 0; j < t.k; ++j) at(11, j) = static_cast<uint8_t>(j % 8);  // subnormals
    }
  }
  // SPLIT element bytes per column (NK) and scales, both with padded strides.
  const qj::mx::ElemFormat& f = *qj::mx::format(t.w);
  W.eld = blocks * f.block_bytes + 5;
  W.elems.assign(t.n * W.eld, 0xCD);
  for (int64_t c = 0; c < t.n; ++c)
    for (int64_t b = 0; b < blocks; ++b)
      qj::mx::pack_block(f, &rw.codes[c * t.k + b * 32], &W.elems[c * W.eld + b * f.block_bytes]);
  W.sld = blocks + 2;
  W.sc.assign(t.n * W.sld, 0x7F);
  for (int64_t c = 0; c < t.n; ++c)
    for (int64_t b = 0; b < blocks; ++b) W.sc[c * W.sld + b] = rw.scales[c * blocks + b];
  return W;
}

qj_status pack(const Fp8Case& t, const Weights& W, qj_weights* w) {
  qj_weights_desc wd{};
  wd.dtype = t.w;
  wd.k = t.k;
  wd.n = t.n;
  wd.layout = t.quantize ? t.layout : QJ_LAYOUT_NK;
  if (t.quantize) return qj_weights_quantize_pack(&wd, W.wf.data(), W.wld, w);
  qj_mx_weights_data md{W.elems.data(), W.sc.data(), W.sld};
  return qj_weights_pack(&wd, &md, W.eld, w);
}

struct GemmRun {
  std::vector<uint8_t> c0, out;  // initial and computed C
  int64_t lda = 0, ldc = 0;
  std::vector<float> af;
  std::vector<uint16_t> ab;
  std::vector<float> bias;
  qj_gemm_desc gd{};
  const void* a() const { return gd.a_type == QJ_BF16 ? static_cast<const void*>(ab.data()) : af.data(); }
};

GemmRun make_run(const Fp8Case& t) {
  GemmRun r;
  r.lda = t.k + t.lda_pad;
  r.af = qjt::random_floats(t.m * r.lda, -3.0f, 3.0f, t.seed * 7 + 1);
  if (t.m > 1) r.af[r.lda + 1] = 40.0f;  // an outlier
  r.ab.resize(r.af.size());
  for (size_t i = 0; i < r.af.size(); ++i) {
    r.ab[i] = qj::f32_to_bf16(r.af[i]);
    if (t.a_type == QJ_BF16) r.af[i] = qj::bf16_to_f32(r.ab[i]);
  }
  r.bias = qjt::random_floats(t.n, -2.0f, 2.0f, t.seed + 5);
  r.gd.a_type = t.a_type;
  r.gd.c_type = t.c_type;
  r.gd.bias = t.bias ? r.bias.data() : nullptr;
  r.gd.activation = t.relu ? QJ_ACT_RELU : QJ_ACT_NONE;
  r.gd.beta = t.beta;
  r.gd.a_scale = 123.0f;  // ignored by float weights
  r.ldc = t.n + t.ldc_pad;
  const int eb = t.c_type == QJ_BF16 ? 2 : 4;
  r.c0.assign(t.m * r.ldc * eb, 0xEE);
  if (t.c_type == QJ_F32) {
    std::vector<float> cf = qjt::random_floats(t.m * r.ldc, -4.0f, 4.0f, t.seed + 9);
    std::memcpy(r.c0.data(), cf.data(), cf.size() * 4);
  }
  return r;
}

// Packs (optionally through serialization / another tier), plans and runs into r->out.
std::string run_api(const Fp8Case& t, const Weights& W, GemmRun* r) {
  qj_weights w = nullptr;
  const qj_isa run_isa = qj_max_isa();
  if (t.pack_isa >= 0) qj_set_max_isa(static_cast<qj_isa>(t.pack_isa));
  qj_status st = pack(t, W, &w);
  qj_set_max_isa(run_isa);
  if (st != QJ_OK) return std::string("pack: ") + qj_last_error();
  if (t.serialize) {
    std::vector<uint8_t> img(qj_weights_serialized_size(w));
    st = qj_weights_serialize(w, img.data(), img.size());
    qj_weights_destroy(w);
    w = nullptr;
    if (st != QJ_OK) return "serialize failed";
    if (qj_weights_deserialize(img.data(), img.size(), &w) != QJ_OK)
      return std::string("deserialize: ") + qj_last_error();
  }
  qj_gemm_plan plan = nullptr;
  const std::string plan_err = qjt::create_jit_plan(r->gd, w, &plan);
  qj_weights_destroy(w);
  if (!plan_err.empty()) return plan_err;
  r->out = r->c0;
  for (int th = 0; th < t.threads; ++th) {
    qj_partition part{th, t.threads};
    st = qj_gemm_run(plan, t.m, r->a(), r->lda, r->out.data(), r->ldc, &part);
    if (st != QJ_OK) {
      qj_gemm_plan_destroy(plan);
      return std::string("run: ") + qj_last_error();
    }
  }
  qj_gemm_plan_destroy(plan);
  return "";
}

double out_at(const Fp8Case& t, const std::vector<uint8_t>& buf, int64_t idx) {
  if (t.c_type == QJ_BF16) {
    uint16_t h;
    std::memcpy(&h, &buf[idx * 2], 2);
    return qj::bf16_to_f32(h);
  }
  float v;
  std::memcpy(&v, &buf[idx * 4], 4);
  return v;
}

// The bound of the file comment; padding of C untouched.
std::string check(const Fp8Case& t, const Weights& W, const GemmRun& r) {
  std::vector<double> y, mag;
  if (!qj::ref::gemm_mx(r.gd, W.rw, t.m, r.a(), r.lda, &y, &mag)) return "ref failed";
  const double u = std::ldexp(1.0, -24);
  const int64_t D = t.k + t.k / 32 + 2;
  const double gamma = D * u / (1.0 - D * u);
  const double tiny = D * std::ldexp(1.0, -150) * (t.w == QJ_MXFP8_E4M3 ? 256.0 : 1.0);
  const size_t eb = t.c_type == QJ_BF16 ? 2 : 4;
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t c = 0; c < r.ldc; ++c) {
      const int64_t idx = i * r.ldc + c;
      if (c >= t.n) {
        if (std::memcmp(&r.out[idx * eb], &r.c0[idx * eb], eb) != 0)
          return "padding of C written at row " + std::to_string(i);
        continue;
      }
      const double s = y[i * t.n + c] - (t.bias ? r.bias[c] : 0.0), S = mag[i * t.n + c];
      double want = y[i * t.n + c];
      if (t.relu) want = want > 0 ? want : 0;  // NaN -> 0
      double e = std::isfinite(want) && std::isfinite(S) ? gamma * S + t.k * std::ldexp(1.0, -53) * S + tiny : 0.0;
      e += u * (std::fabs(want) + e);
      if (t.beta != 0.0f) {
        float c_old;
        std::memcpy(&c_old, &r.c0[idx * 4], 4);
        want += t.beta * static_cast<double>(c_old);
        e += u * (std::fabs(want) + e);
      }
      if (t.c_type == QJ_BF16) e += qjt::bf16_rounding_slack(want, e);
      const double got = out_at(t, r.out, idx);
      std::ostringstream o;
      o.precision(17);
      o << "C[" << i << "][" << c << "]=" << got << " want " << want << " (sum " << s << ", bound " << e << ")";
      if (std::isnan(want)) {
        if (!std::isnan(got)) return o.str() + " want NaN";
        continue;
      }
      if (std::isinf(want)) {
        if (!(std::isinf(got) && (got > 0) == (want > 0))) return o.str() + " want the same Inf";
        continue;
      }
      if (!(std::fabs(got - want) <= e)) return o.str();
    }
  return "";
}

std::string run_case(const Fp8Case& t) {
  Weights W = make_weights(t);
  GemmRun r = make_run(t);
  std::string err = run_api(t, W, &r);
  if (!err.empty()) return err;
  err = check(t, W, r);
  if (!err.empty() || t.c_type != QJ_BF16) return err;
  // bf16 C must be exactly the RNE of the fp32 C of the same plan shape.
  Fp8Case f = t;
  f.c_type = QJ_F32;
  f.beta = 0.0f;
  GemmRun r32 = make_run(f);
  err = run_api(f, W, &r32);
  if (!err.empty()) return err;
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t c = 0; c < t.n; ++c) {
      float v;
      uint16_t h;
      std::memcpy(&v, &r32.out[(i * r32.ldc + c) * 4], 4);
      std::memcpy(&h, &r.out[(i * r.ldc + c) * 2], 2);
      const uint16_t want = qj::f32_to_bf16(v);
      if (h != want && !(std::isnan(v) && (h & 0x7fff) > 0x7f80))
        return "bf16 C[" + std::to_string(i) + "][" + std::to_string(c) + "] is not the RNE of the fp32 C";
    }
  return "";
}

const qj_dtype kTypes[] = {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2};

// Register-tile heights the plan may use for the tier (the largest kernel gemm_float generates),
// with scaled weights (flags 0) or per-block accumulators (flags 2).
int tile_mr(qj_isa isa, int64_t n, int flags) {
  if (isa < QJ_ISA_AVX2) return 4;  // the scalar reference has no tile: any small M
  qj::KernelKey key = qj::KernelKey::zeroed();
  key.op = qj::KernelOp::kGemmFloat;
  key.isa = static_cast<uint8_t>(isa);
  key.a_type = QJ_F32;
  key.b_type = QJ_MXFP8_E4M3;
  key.c_type = QJ_F32;
  key.nr = static_cast<uint16_t>(qj::weights_nr(isa, n, QJ_MXFP8_E4M3));
  key.param[0] = 1;
  key.flags = static_cast<uint8_t>(flags);
  return qj::gemm_float_max_mr(key, 14);
}

// Forces one way of applying the block scales for the plans of its lifetime (-1: the default).
class Fp8Mode {
 public:
  explicit Fp8Mode(int mode) { qj::gemm_fp8_force_block_accumulators(mode); }
  ~Fp8Mode() { qj::gemm_fp8_force_block_accumulators(-1); }
};

// Both ways of applying the scales (scaled weights, per-block accumulators) at every tier, and
// the default choice.
TEST(GemmMxFp8, ShapeSweep) {
  for (int mode : {-1, 0, 1})
  for (qj_isa isa : qjt::supported_isas()) {
    if (mode >= 0 && isa == QJ_ISA_SCALAR) continue;
    Fp8Mode fm(mode);
    qjt::IsaCap cap(isa);
    uint32_t seed = 1 + 1000 * static_cast<uint32_t>(mode + 1);
    for (qj_dtype wt : kTypes)
      for (int64_t n : {1, 15, 16, 17, 33}) {
        // M in {1, 2, 3, MR - 1, MR, MR + 1, 97} for the MR of both ways of applying the scales.
        std::vector<int64_t> ms = {1, 2, 3, 97};
        for (int flags : {0, 2}) {
          const int mr = tile_mr(isa, n, flags);
          ASSERT_GE(mr, 2);
          for (int64_t m : {mr - 1, mr, mr + 1})
            if (std::find(ms.begin(), ms.end(), m) == ms.end()) ms.push_back(m);
        }
        for (int64_t m : ms)
          for (int64_t k : {32, 64, 96, 512}) {
            Fp8Case t;
            t.w = wt;
            t.m = m;
            t.n = n;
            t.k = k;
            t.seed = seed++;
            t.a_type = seed % 3 == 0 ? QJ_BF16 : QJ_F32;
            t.c_type = seed % 4 == 0 ? QJ_BF16 : QJ_F32;
            t.bias = seed % 2 == 0;
            t.relu = seed % 5 == 0;
            t.beta = t.c_type == QJ_F32 && seed % 3 == 1 ? 0.5f : 0.0f;
            t.lda_pad = seed % 3;
            t.ldc_pad = seed % 2;
            EXPECT_EQ(run_case(t), "") << t.str();
          }
      }
  }
}

// Both ways the zmm kernels take A (an embedded {1to16} broadcast in each FMA, or each A element
// broadcast into a register once: qj::gemm_force_register_broadcast), with both ways of applying
// the scales, at every tile height.
TEST(GemmMxFp8, ABroadcastForms) {
  for (qj_isa isa : qjt::supported_isas()) {
    if (isa < QJ_ISA_AVX512) continue;  // (ymm kernels always broadcast into a register)
    qjt::IsaCap cap(isa);
    uint32_t seed = 7000;
    for (int mode : {0, 1})
      for (int scales : {0, 1}) {
        qj::ScopedRegisterBroadcast force(mode);
        Fp8Mode fm(scales);
        for (qj_dtype wt : kTypes)
          for (int64_t m : {1, 2, 7, 13, 14, 15})
            for (int64_t n : {17, 64}) {
              Fp8Case t;
              t.w = wt, t.m = m, t.n = n, t.k = n == 17 ? 32 : 256, t.seed = ++seed;
              t.c_type = seed % 2 ? QJ_BF16 : QJ_F32;
              t.bias = seed % 3 != 0;
              EXPECT_EQ(run_case(t), "") << t.str() << " mode " << mode << " scales " << scales;
            }
      }
  }
}

// The large and FBGEMM shapes (qjt::large_and_fbgemm_shapes, K rounded up to whole blocks), both
// weight types in turn, at every tier.
TEST(GemmMxFp8, LargeAndFbgemmShapes) {
  qjt::each_large_shape_at_every_tier(32, [](const qjt::Shape& s, uint32_t seed) {
    Fp8Case t;
    t.w = kTypes[seed % (sizeof kTypes / sizeof kTypes[0])];
    t.m = s.m, t.n = s.n, t.k = s.k, t.seed = seed;
    t.c_type = seed % 3 == 0 ? QJ_BF16 : QJ_F32;
    EXPECT_EQ(run_case(t), "") << t.str();
  });
}

// Seeded random sample of combinations of every dimension, both ways of applying the scales
// (QJ_TEST_ITERATIONS / QJ_TEST_SEED scale it up for a long local run, test/test_util.h).
TEST(GemmMxFp8, RandomCombinations) {
  qjt::for_each_random_case(22001u, 30, [&](qj_isa isa, qjt::Picker& pick, uint32_t seed) {
    Fp8Mode fm(isa == QJ_ISA_SCALAR ? -1 : pick(3) - 1);
    Fp8Case t;
    t.seed = seed;
    t.w = kTypes[pick(2)];
    t.m = pick.rows(100, 100, 200);
    t.n = 1 + pick(pick(4) == 0 ? 300 : 80);
    t.k = 32 * (1 + pick(pick(4) == 0 ? 24 : 6));
    t.a_type = pick(3) == 0 ? QJ_BF16 : QJ_F32;
    t.c_type = pick(3) == 0 ? QJ_BF16 : QJ_F32;
    t.bias = pick(2);
    t.relu = pick(3) == 0;
    t.beta = t.c_type == QJ_F32 && pick(4) == 0 ? 0.5f : 0.0f;
    t.quantize = pick(3) == 0;
    t.layout = static_cast<qj_layout>(pick(2));
    if (!t.quantize) t.codes = pick(5) == 0 ? kSpecials : kRandomFinite;
    t.lda_pad = pick(3) == 0 ? pick(9) : 0;
    t.ldc_pad = pick(3) == 0 ? pick(9) : 0;
    t.threads = pick(4) == 0 ? 2 + pick(4) : 1;
    t.serialize = pick(8) == 0;
    // One case in eight with the weights packed at a random tier (the plan repacks them).
    if (pick(8) == 0) t.pack_isa = qjt::supported_isas()[pick(static_cast<int>(qjt::supported_isas().size()))];
    EXPECT_EQ(run_case(t), "") << t.str();
  });
}

// Every finite code (subnormals, +-0, +-max included) in every column, fp32-subnormal weights.
TEST(GemmMxFp8, ExhaustiveCodes) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (int64_t m : {1, 2, 7}) {
        Fp8Case t;
        t.w = wt;
        t.m = m;
        t.n = 40;
        t.k = 512;
        t.codes = kExhaustive;
        t.seed = 50 + static_cast<uint32_t>(m);
        EXPECT_EQ(run_case(t), "") << t.str();
      }
  }
}

// NaN / Inf codes, NaN scale blocks, scales 0x00 / 0x01, a zero block, +-max, subnormal columns.
TEST(GemmMxFp8, SpecialCodesAndScales) {
  for (int mode : {-1, 0, 1})
  for (qj_isa isa : qjt::supported_isas()) {
    if (mode >= 0 && isa == QJ_ISA_SCALAR) continue;
    Fp8Mode fm(mode);
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (int64_t m : {1, 2, 5, 14})
        for (bool relu : {false, true}) {
          Fp8Case t;
          t.w = wt;
          t.m = m;
          t.n = 35;
          t.k = 96;
          t.codes = kSpecials;
          t.relu = relu;
          t.bias = relu;  // without bias the tiny columns (scales 0x00, 0x01) are tested closely
          t.c_type = m == 5 ? QJ_BF16 : QJ_F32;
          t.seed = 80 + static_cast<uint32_t>(m);
          EXPECT_EQ(run_case(t), "") << t.str();
        }
  }
}

TEST(GemmMxFp8, OutputStages) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 100;
    for (qj_dtype wt : kTypes)
      for (qj_dtype ct : {QJ_F32, QJ_BF16})
        for (float beta : {0.0f, 1.0f, -0.5f})
          for (bool relu : {false, true})
            for (bool bias : {false, true}) {
              if (ct == QJ_BF16 && beta != 0.0f) continue;
              Fp8Case t;
              t.w = wt;
              t.c_type = ct;
              t.beta = beta;
              t.relu = relu;
              t.bias = bias;
              t.m = 17;
              t.n = 45;
              t.k = 64;
              t.seed = ++seed;
              EXPECT_EQ(run_case(t), "") << t.str();
            }
  }
}

// qj_weights_quantize_pack = qj_mx_quantize (FLOOR) per column, code for code and byte for byte,
// in both layouts, at every tier; then the GEMM through it.
TEST(GemmMxFp8, QuantizePackMatchesMxQuantize) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (qj_layout l : {QJ_LAYOUT_KN, QJ_LAYOUT_NK}) {
        Fp8Case t;
        t.w = wt;
        t.m = 6;
        t.n = 37;
        t.k = 128;
        t.quantize = true;
        t.layout = l;
        t.seed = 200 + l;
        Weights W = make_weights(t);
        qj_weights_desc wd{};
        wd.dtype = wt;
        wd.k = t.k;
        wd.n = t.n;
        wd.layout = l;
        std::shared_ptr<qj::PackedWeights> pw;
        ASSERT_EQ(qj::quantize_int_weights(wd, W.wf.data(), W.wld, isa, &pw), QJ_OK) << t.str();
        ASSERT_EQ(pw->layout, qj::PackLayout::kMxFp8);
        for (int64_t c = 0; c < t.n; ++c) {
          for (int64_t j = 0; j < t.k; ++j)
            ASSERT_EQ(pw->mx_code(j, c), W.rw.codes[c * t.k + j]) << "k=" << j << " col=" << c << " " << t.str();
          for (int64_t g = 0; g < t.k / 32; ++g)
            ASSERT_EQ(pw->mx_scale_byte(g, c), W.rw.scales[c * (t.k / 32) + g]) << "g=" << g << " col=" << c;
        }
        EXPECT_EQ(run_case(t), "") << t.str();
      }
  }
}

// qj_weights_pack keeps every code and scale byte; an E4M3 block holding a NaN code reads back
// a NaN scale (the packer's marking) and nothing else changes.
TEST(GemmMxFp8, PackKeepsCodesAndMarksNaNBlocks) {
  for (qj_isa isa : qjt::supported_isas())
    for (qj_dtype wt : kTypes)
      for (int64_t n : {5, 16, 33}) {
        Fp8Case t;
        t.w = wt;
        t.n = n;
        t.k = 96;
        t.codes = kSpecials;
        t.seed = 300;
        Weights W = make_weights(t);
        qj_weights_desc wd{};
        wd.dtype = wt;
        wd.k = t.k;
        wd.n = t.n;
        wd.layout = QJ_LAYOUT_NK;
        qj_mx_weights_data md{W.elems.data(), W.sc.data(), W.sld};
        std::shared_ptr<qj::PackedWeights> pw;
        ASSERT_EQ(qj::pack_int_weights(wd, &md, W.eld, isa, &pw), QJ_OK);
        for (int64_t c = 0; c < n; ++c)
          for (int64_t g = 0; g < t.k / 32; ++g) {
            bool nan_code = false;
            for (int64_t j = g * 32; j < g * 32 + 32; ++j) {
              const uint8_t code = W.rw.codes[c * t.k + j];
              ASSERT_EQ(pw->mx_code(j, c), code) << qj_isa_name(isa) << " k=" << j << " col=" << c;
              nan_code |= wt == QJ_MXFP8_E4M3 && (code & 0x7F) == 0x7F;
            }
            const uint8_t want = nan_code ? 0xFF : W.rw.scales[c * (t.k / 32) + g];
            ASSERT_EQ(pw->mx_scale_byte(g, c), want) << qj_isa_name(isa) << " g=" << g << " col=" << c;
          }
      }
}

// Serialized images read back to the same output bits (same tier), and images of another tier
// are repacked: an AVX2 image run at the best tier, every threads split.
TEST(GemmMxFp8, SerializeRepackThreads) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes) {
      Fp8Case t;
      t.w = wt;
      t.m = 70;
      t.n = 100;
      t.k = 256;
      t.codes = kSpecials;
      t.seed = 400;
      Weights W = make_weights(t);
      GemmRun a = make_run(t), b = make_run(t);
      ASSERT_EQ(run_api(t, W, &a), "") << t.str();
      EXPECT_EQ(check(t, W, a), "") << t.str();
      Fp8Case s = t;
      s.serialize = true;
      s.threads = 2;
      ASSERT_EQ(run_api(s, W, &b), "") << s.str();
      EXPECT_EQ(a.out, b.out) << "serialized weights / 2 threads changed the output: " << s.str();
      s.pack_isa = QJ_ISA_AVX2;
      s.threads = 1;
      s.m = 3;
      EXPECT_EQ(run_case(s), "") << s.str();
    }
  }
}

// K beyond the direct-A limit (fp32 A packed into tiles), and two threads splitting N (few rows)
// or M (many rows): every partition gives the same bits as one thread.
TEST(GemmMxFp8, LongKAndThreads) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 500;
    for (qj_dtype wt : kTypes)
      for (int64_t m : {1, 5, 40}) {
        Fp8Case t;
        t.w = wt;
        t.m = m;
        t.n = 100;
        t.k = 1024;
        t.seed = ++seed;
        Weights W = make_weights(t);
        GemmRun one = make_run(t), two = make_run(t);
        ASSERT_EQ(run_api(t, W, &one), "") << t.str();
        EXPECT_EQ(check(t, W, one), "") << t.str();
        Fp8Case t2 = t;
        t2.threads = 2;
        ASSERT_EQ(run_api(t2, W, &two), "") << t2.str();
        EXPECT_EQ(one.out, two.out) << "two threads changed the output: " << t2.str();
      }
  }
}

TEST(GemmMxFp8, Misuse) {
  for (qj_dtype wt : kTypes) {
    qj_weights_desc wd{};
    wd.dtype = wt;
    wd.k = 40;
    wd.n = 8;
    wd.layout = QJ_LAYOUT_NK;
    std::vector<float> wf(8 * 40, 1.0f);
    std::vector<uint8_t> el(64 * 8, 0), sc(16, 0x7F);
    qj_mx_weights_data md{el.data(), sc.data(), 2};
    qj_weights w = nullptr;
    EXPECT_EQ(qj_weights_quantize_pack(&wd, wf.data(), 40, &w), QJ_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(qj_last_error()).find("multiple of 32"), std::string::npos) << qj_last_error();
    EXPECT_EQ(qj_weights_pack(&wd, &md, 64, &w), QJ_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(qj_last_error()).find("k=40"), std::string::npos) << qj_last_error();
    wd.k = 32;
    const float s1 = 1.0f;
    wd.scales = &s1;
    EXPECT_EQ(qj_weights_pack(&wd, &md, 32, &w), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("desc->scales"), std::string::npos) << qj_last_error();
    EXPECT_EQ(qj_weights_quantize_pack(&wd, wf.data(), 32, &w), QJ_ERR_INVALID_ARGUMENT);
    wd.scales = nullptr;
    wd.layout = QJ_LAYOUT_KN;
    EXPECT_EQ(qj_weights_pack(&wd, &md, 32, &w), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("QJ_LAYOUT_KN"), std::string::npos) << qj_last_error();
    wd.layout = static_cast<qj_layout>(7);
    EXPECT_EQ(qj_weights_pack(&wd, &md, 32, &w), QJ_ERR_INVALID_ARGUMENT);
    wd.layout = QJ_LAYOUT_NK;
    EXPECT_EQ(qj_weights_pack(&wd, &md, 31, &w), QJ_ERR_INVALID_ARGUMENT);  // ld < 32 bytes
    EXPECT_NE(std::string(qj_last_error()).find("ld=31"), std::string::npos) << qj_last_error();
    md.scales_ld = 0;
    EXPECT_EQ(qj_weights_pack(&wd, &md, 32, &w), QJ_ERR_INVALID_ARGUMENT);
    md.scales_ld = int64_t(1) << 62;  // never dereferenced
    EXPECT_EQ(qj_weights_pack(&wd, &md, 32, &w), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("exceeds the address space"), std::string::npos) << qj_last_error();
    md.scales_ld = 1;
    md.elems = nullptr;
    EXPECT_EQ(qj_weights_pack(&wd, &md, 32, &w), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(w, nullptr);
    md.elems = el.data();
    ASSERT_EQ(qj_weights_pack(&wd, &md, 32, &w), QJ_OK);

    // Plans: quantized A / C types are not for float weights; C untouched on every failure.
    qj_gemm_desc gd{};
    gd.a_type = QJ_U8;
    gd.c_type = QJ_F32;
    gd.a_scale = 1.0f;
    qj_gemm_plan p = nullptr;
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("a_type"), std::string::npos) << qj_last_error();
    gd.a_type = QJ_F32;
    gd.c_type = QJ_U8;
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("c_type"), std::string::npos) << qj_last_error();
    EXPECT_EQ(p, nullptr);
    gd.c_type = QJ_F32;
    ASSERT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK);
    std::vector<float> a(32, 1.0f), c(8, 5.0f);
    EXPECT_EQ(qj_gemm_run(p, 1, a.data(), 16, c.data(), 8, nullptr), QJ_ERR_INVALID_ARGUMENT);  // lda < k
    for (float v : c) EXPECT_EQ(v, 5.0f);
    qj_gemm_plan_destroy(p);
    qj_weights_destroy(w);
  }
}

}  // namespace
