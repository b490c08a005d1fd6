// GEMM with the int16-pair MX weights: OCP MXFP6 E3M2 and BDR MX9 / MX6 / MX4 (MX.md sections 6
// and 9), against src/ref/gemm_mx_ref at every ISA tier.
//
// The reference decodes every weight with the scalar decoders (OCP: value(code) * 2^(b - 127);
// BDR: +-M * 2^(E - 127 - mu + 1 - m)) and multiplies in double with A quantized to int8 exactly as
// the library defines it, so the kernels' per-block integer sums (int16 pairs, int32) are exact
// and the only differences allowed are the fp32 roundings of the scale products and of the fp32
// accumulation across blocks. Bound, per output (G blocks of 32 or 16):
//   exact      Y = sum_g T_g + bias,  T_g = S_g * sa_g * 2^(b_g - 127 - shift)  (S_g exact int32,
//              |S_g| <= 32 * 255 * 448 < 2^24, so float(S_g) is exact too)
//   computed   x_g = fl(S_g * sa_g) (per-block A scale; or the row / u8 scale applied once at the
//              end), facc = fl(facc + x_g * 2^(b_g - 127)) (power-of-two product exact),
//              y = fl(facc * fl(a_scale * 2^-shift) + bias)
//   Every T_g and the bias pass through at most G + 2 roundings of relative size u = 2^-24:
//   |y - Y| <= gamma_{G+2} (sum_g |T_g| + |bias|), gamma_j = j u / (1 - j u) (Higham 3.1),
//   plus (G + 2) 2^-149 for products in the fp32 subnormal range (scale byte / exponent 0x00).
//   bf16 C adds one RNE rounding to 8 significant bits: + 2^-8 (|Y| + the fp32 bound).
// ReLU is 1-Lipschitz and applied to both sides. A 0xFF scale byte / BDR exponent gives NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "src/core/isa.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ops/int_weights.h"
#include "src/ops/mx16_weights.h"
#include "src/ops/mx_weights.h"
#include "src/ref/gemm_mx_ref.h"
#include "src/ref/mx_ref.h"
#include "test/fp6_panels_check.h"
#include "test/test_util.h"

namespace {

bool is_bdr(qj_dtype t) { return t == QJ_BDR_MX9 || t == QJ_BDR_MX6 || t == QJ_BDR_MX4; }

struct Case {
  qj_dtype w = QJ_MXFP6_E3M2;
  int64_t m = 1, n = 1, k = 32;
  qj_dtype a_type = QJ_F32;
  qj_dtype c_type = QJ_F32;
  qj_granularity a_gran = QJ_GRAN_GROUP;
  int32_t a_zp = 0;
  float a_scale = 0.03125f;
  bool bias = true, relu = false;
  bool quantize = false;            // qj_weights_quantize_pack of fp32 (else qj_weights_pack)
  qj_layout layout = QJ_LAYOUT_KN;  // quantize_pack only
  int specials = 0;                 // zero / NaN blocks, extreme codes
  bool exhaustive = false;          // E3M2: every code in every column, one-hot u8 A
  bool mu_pairs = false;            // BDR quantize: pairs on both sides of the microexponent rule
  int64_t lda_pad = 0, ldc_pad = 0;
  int threads = 1;
  int pack_isa = -1;                // pack under this cap (the plan repacks)
  bool serialize = false;
  uint32_t seed = 1;
  std::string str() const {
    std::ostringstream o;
    o << qj_dtype_name(w) << " m=" << m << " n=" << n << " k=" << k << " a=" << qj_dtype_name(a_type)
      << " c=" << qj_dtype_name(c_type) << " a_gran=" << a_gran << " a_zp=" << a_zp << " bias=" << bias
      << " relu=" << relu << " quantize=" << quantize << " layout=" << layout << " specials=" << specials
      << " exhaustive=" << exhaustive << " mu_pairs=" << mu_pairs << " threads=" << threads
      << " pack_isa=" << pack_isa << " ser=" << serialize << " seed=" << seed
      << " isa=" << qj_isa_name(qj_max_isa());
    return o.str();
  }
};

// fp32 column of weights for the quantize path. mu_pairs: per block, pair 0 holds the block max
// (exponent E), the other pairs alternate between exponent E (mu = 0) and E - 1 or below (mu = 1),
// with one pair straddling (one value at E, one far below).
void fill_column(const Case& t, std::mt19937& rng, float* col) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
  for (int64_t j = 0; j < t.k; ++j) col[j] = nd(rng) * mag;
  if (!t.mu_pairs) return;
  for (int64_t b = 0; b < t.k; b += 16) {
    col[b] = 1.75f * mag;
    for (int p = 1; p < 8; ++p) {
      const float lo = std::ldexp(1.0f, -1 - static_cast<int>(rng() % 4)) * mag;  // below E
      const float hi = (1.0f + 0.0625f * static_cast<float>(rng() % 15)) * mag;    // at E
      const float s0 = rng() & 1 ? -1.0f : 1.0f, s1 = rng() & 1 ? -1.0f : 1.0f;
      if (p % 3 == 0) {
        col[b + 2 * p] = s0 * hi, col[b + 2 * p + 1] = s1 * lo;  // mixed: mu = 0
      } else if (p % 3 == 1) {
        col[b + 2 * p] = s0 * lo, col[b + 2 * p + 1] = s1 * lo * 0.75f;  // both below: mu = 1
      } else {
        col[b + 2 * p] = s0 * hi, col[b + 2 * p + 1] = s1 * hi;  // both at E: mu = 0
      }
    }
  }
}

std::string run_case(const Case& t) {
  std::mt19937 rng(t.seed);
  const bool bdr = is_bdr(t.w);
  const int64_t blk = bdr ? 16 : 32, blocks = t.k / blk;
  qj::ref::MxWeights rw;
  rw.type = t.w;
  rw.k = t.k;
  rw.n = t.n;
  const qj::bdr::BdrFormat* bf = bdr ? qj::bdr::format(t.w) : nullptr;
  const qj::mx::ElemFormat* ef = bdr ? nullptr : qj::mx::format(t.w);
  const int64_t bb = bdr ? bf->block_bytes : ef->block_bytes;  // bytes per block
  if (bdr) rw.bdr.assign(t.n * blocks * bb, 0);
  else rw.codes.resize(t.n * t.k), rw.scales.resize(t.n * blocks);
  std::vector<float> wf;  // fp32 weights (quantize path)
  const int64_t wld = (t.layout == QJ_LAYOUT_KN ? t.n : t.k) + 3;
  if (t.quantize) {
    wf.assign((t.layout == QJ_LAYOUT_KN ? t.k : t.n) * wld, 0.0f);
    std::vector<float> col(t.k);
    for (int64_t c = 0; c < t.n; ++c) {
      fill_column(t, rng, col.data());
      if (t.specials && c == 1) col[3] = NAN;                 // NaN / Inf blocks: NaN scale
      if (t.specials && c == 2) col[t.k - 1] = -INFINITY;
      if (t.specials && c == 3) std::fill(col.begin(), col.begin() + 32, 0.0f);  // zero blocks
      for (int64_t j = 0; j < t.k; ++j) (t.layout == QJ_LAYOUT_KN ? wf[j * wld + c] : wf[c * wld + j]) = col[j];
      // The reference weights come from the public quantizer (the round trip under test).
      std::vector<uint8_t> el(blocks * bb);
      if (qj_mx_quantize(t.w, QJ_ROUND_FLOOR, col.data(), t.k, el.data(), bdr ? nullptr : &rw.scales[c * blocks]) != QJ_OK)
        return std::string("qj_mx_quantize: ") + qj_last_error();
      if (bdr) {
        std::memcpy(&rw.bdr[c * blocks * bb], el.data(), el.size());
      } else {
        for (int64_t j = 0; j < t.k; ++j) rw.codes[c * t.k + j] = qj::mx::get_code(*ef, el.data(), j);
      }
    }
  } else if (bdr) {
    for (int64_t c = 0; c < t.n; ++c)
      for (int64_t b = 0; b < blocks; ++b) {
        qj::bdr::Fields f;
        f.e = static_cast<uint8_t>(110 + rng() % 30);
        f.mu = static_cast<uint8_t>(rng());
        for (int i = 0; i < 16; ++i) f.code[i] = static_cast<uint8_t>(rng() % (2u << bf->m));
        if (t.specials) {
          const int64_t id = c * blocks + b;
          if (id % 7 == 3) {  // zero block, as the quantizer writes it
            f.e = 0, f.mu = 0;
            std::memset(f.code, 0, sizeof f.code);
          } else if (id % 11 == 5) {
            f.e = 0xFF;  // NaN block
          } else if (id % 5 == 1) {
            for (int i = 0; i < 16; ++i) f.code[i] = static_cast<uint8_t>((i & 1) << bf->m | ((1 << bf->m) - 1));
            f.mu = static_cast<uint8_t>(id % 2 ? 0x00 : 0xFF);  // extreme magnitudes, both mu
          }
        }
        qj::bdr::pack(*bf, f, &rw.bdr[(c * blocks + b) * bb]);
      }
  } else if (t.exhaustive) {
    for (int64_t c = 0; c < t.n; ++c)
      for (int64_t j = 0; j < t.k; ++j) rw.codes[c * t.k + j] = static_cast<uint8_t>((j + c) % 64);
    for (auto& s : rw.scales) s = static_cast<uint8_t>(120 + rng() % 10);
  } else {
    for (auto& c : rw.codes) c = static_cast<uint8_t>(rng() % 64);
    for (auto& s : rw.scales) s = static_cast<uint8_t>(110 + rng() % 30);
    if (t.specials) {
      rw.scales[0] = 0x00;
      rw.scales[rw.scales.size() - 1] = 0xFF;
      if (t.n > 2) rw.scales[(t.n / 2) * blocks] = 254 - ef->emax - 20;
      for (int64_t j = 0; j < t.k; j += 5) rw.codes[j] = static_cast<uint8_t>(j % 2 ? 0x3F : 0x1F);  // +-28
    }
  }
  // qj_weights_pack input: per column (NK) the SPLIT elements (E3M2) or the BDR blocks.
  const int64_t eld = blocks * bb + 5;
  std::vector<uint8_t> elems(t.n * eld, 0xCD);
  for (int64_t c = 0; c < t.n; ++c) {
    if (bdr)
      std::memcpy(&elems[c * eld], &rw.bdr[c * blocks * bb], blocks * bb);
    else
      for (int64_t b = 0; b < blocks; ++b) qj::mx::pack_block(*ef, &rw.codes[c * t.k + b * 32], &elems[c * eld + b * bb]);
  }
  const int64_t sld = blocks + 2;
  std::vector<uint8_t> sc(t.n * sld, 0x7F);
  for (int64_t c = 0; c < t.n && !bdr; ++c)
    for (int64_t b = 0; b < blocks; ++b) sc[c * sld + b] = rw.scales[c * blocks + b];

  // A
  const int64_t lda = t.k + t.lda_pad;
  std::vector<float> af = qjt::random_floats(t.m * lda, -3.0f, 3.0f, t.seed * 7 + 1);
  if (t.m > 1) af[lda + 1] = 40.0f;  // an outlier
  std::vector<uint16_t> ab(af.size());
  std::vector<uint8_t> a8 = qjt::random_ints<uint8_t>(t.m * lda, t.a_type == QJ_U8 ? 0 : -128,
                                                      t.a_type == QJ_U8 ? 255 : 127, t.seed * 3 + 2);
  if (t.exhaustive) {  // one-hot rows: C[i][c] = value(code(i, c)) * scale
    std::fill(a8.begin(), a8.end(), static_cast<uint8_t>(t.a_zp));
    for (int64_t i = 0; i < t.m; ++i) a8[i * lda + i % t.k] = static_cast<uint8_t>(t.a_zp + 1);
  }
  for (size_t i = 0; i < af.size(); ++i) {
    ab[i] = qj::f32_to_bf16(af[i]);
    af[i] = t.a_type == QJ_BF16 ? qj::bf16_to_f32(ab[i]) : af[i];
  }
  const void* a = t.a_type == QJ_BF16 ? static_cast<const void*>(ab.data())
                  : t.a_type == QJ_F32 ? static_cast<const void*>(af.data())
                                       : static_cast<const void*>(a8.data());
  std::vector<float> bias = qjt::random_floats(t.n, -2.0f, 2.0f, t.seed + 5);

  qj_gemm_desc gd{};
  gd.a_type = t.a_type;
  gd.a_granularity = t.a_gran;
  gd.a_scale = t.a_scale;
  gd.a_zero_point = t.a_zp;
  gd.c_type = t.c_type;
  gd.c_scale = 0.25f;
  gd.c_zero_point = t.c_type == QJ_U8 ? 100 : -20;
  gd.bias = t.bias ? bias.data() : nullptr;
  gd.activation = t.relu ? QJ_ACT_RELU : QJ_ACT_NONE;

  qj_weights_desc wd{};
  wd.dtype = t.w;
  wd.k = t.k;
  wd.n = t.n;
  wd.layout = t.quantize ? t.layout : QJ_LAYOUT_NK;
  qj_weights w = nullptr;
  qj_isa run_isa = qj_max_isa();
  if (t.pack_isa >= 0) qj_set_max_isa(static_cast<qj_isa>(t.pack_isa));
  qj_status st;
  if (t.quantize) {
    st = qj_weights_quantize_pack(&wd, wf.data(), wld, &w);
  } else {
    qj_mx_weights_data md{elems.data(), bdr ? nullptr : sc.data(), bdr ? 0 : sld};
    st = qj_weights_pack(&wd, &md, eld, &w);
  }
  qj_set_max_isa(run_isa);
  if (st != QJ_OK) return std::string("pack: ") + qj_last_error();
  if (t.serialize) {
    std::vector<uint8_t> img(qj_weights_serialized_size(w));
    if (qj_weights_serialize(w, img.data(), img.size()) != QJ_OK) return "serialize failed";
    qj_weights_destroy(w);
    w = nullptr;
    if (qj_weights_deserialize(img.data(), img.size(), &w) != QJ_OK)
      return std::string("deserialize: ") + qj_last_error();
  }
  qj_gemm_plan plan = nullptr;
  const std::string plan_err = qjt::create_jit_plan(gd, w, &plan);
  qj_weights_destroy(w);
  if (!plan_err.empty()) return plan_err;
  const int64_t ldc = t.n + t.ldc_pad;
  const bool req = t.c_type == QJ_U8 || t.c_type == QJ_S8;
  const int eb = req ? 1 : (t.c_type == QJ_BF16 ? 2 : 4);
  std::vector<uint8_t> cbuf(t.m * ldc * eb, 0xEE);
  for (int th = 0; th < t.threads; ++th) {
    qj_partition part{th, t.threads};
    st = qj_gemm_run(plan, t.m, a, lda, cbuf.data(), ldc, &part);
    if (st != QJ_OK) {
      qj_gemm_plan_destroy(plan);
      return std::string("run: ") + qj_last_error();
    }
  }
  qj_gemm_plan_destroy(plan);

  std::vector<double> y, mag;
  if (!qj::ref::gemm_mx(gd, rw, t.m, a, lda, &y, &mag)) return "ref failed";
  const double u = std::ldexp(1.0, -24);
  const int gsteps = static_cast<int>(blocks) + 2;
  const double gamma = gsteps * u / (1.0 - gsteps * u);
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t c = 0; c < ldc; ++c) {
      const size_t idx = i * ldc + c;
      double got;
      if (req) {
        if (c >= t.n) {
          if (cbuf[idx] != 0xEE) return "padding written at row " + std::to_string(i);
          continue;
        }
        got = t.c_type == QJ_U8 ? cbuf[idx] : static_cast<int8_t>(cbuf[idx]);
      } else if (t.c_type == QJ_BF16) {
        uint16_t h;
        std::memcpy(&h, &cbuf[idx * 2], 2);
        if (c >= t.n) {
          if (h != 0xEEEE) return "padding written at row " + std::to_string(i);
          continue;
        }
        got = qj::bf16_to_f32(h);
      } else {
        float v;
        std::memcpy(&v, &cbuf[idx * 4], 4);
        if (c >= t.n) {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          if (bits != 0xEEEEEEEEu) return "padding written at row " + std::to_string(i);
          continue;
        }
        got = v;
      }
      double want = y[i * t.n + c];
      if (req) {
        // q = saturate(rne(y / c_scale) + zp), ReLU clamps at zp (docs/kernel-contract.md). The
        // plan folds 1 / c_scale into the fp32 multiplier and bias (2 more roundings of size u):
        // |got - (Y / c_scale + zp)| <= 1/2 + (fp32 bound + 4 u (sum |T_g| + |bias|)) / c_scale,
        // both sides clamped to the output range (clamping is 1-Lipschitz).
        const double lo = t.relu ? std::max<double>(gd.c_zero_point, t.c_type == QJ_U8 ? 0 : -128)
                                 : (t.c_type == QJ_U8 ? 0 : -128);
        const double hi = t.c_type == QJ_U8 ? 255 : 127;
        if (std::isnan(want)) {  // a NaN y gives the lower bound (docs/kernel-contract.md)
          if (got != lo)
            return "C[" + std::to_string(i) + "][" + std::to_string(c) + "]=" + std::to_string(got) +
                   " want the lower bound " + std::to_string(lo) + " for a NaN y";
          continue;
        }
        const double ws = std::min(hi, std::max(lo, want / gd.c_scale + gd.c_zero_point));
        const double tol = 0.5 + (gamma * mag[i * t.n + c] + gsteps * std::ldexp(1.0, -149) +
                                  4 * u * mag[i * t.n + c]) / gd.c_scale + 1e-9;
        if (!(std::fabs(got - ws) <= tol))
          return "C[" + std::to_string(i) + "][" + std::to_string(c) + "]=" + std::to_string(got) +
                 " want " + std::to_string(ws) + " (tol " + std::to_string(tol) + ")";
        continue;
      }
      if (std::isnan(want)) {  // ReLU maps NaN to +0 (quantjit.h), else NaN stays NaN
        const bool ok = t.relu ? (got == 0.0 && !std::signbit(got)) : std::isnan(got);
        if (!ok)
          return "C[" + std::to_string(i) + "][" + std::to_string(c) + "]=" + std::to_string(got) +
                 (t.relu ? " want +0 (ReLU of NaN)" : " want NaN");
        continue;
      }
      double bound = gamma * mag[i * t.n + c] + gsteps * std::ldexp(1.0, -149);
      if (t.c_type == QJ_BF16) bound += qjt::bf16_rounding_slack(want, bound);
      if (t.relu) want = want > 0 ? want : 0;
      if (!(std::fabs(got - want) <= bound)) {
        std::ostringstream o;
        o.precision(17);
        o << "C[" << i << "][" << c << "]=" << got << " want " << want << " (|diff| "
          << std::fabs(got - want) << " > bound " << bound << ")";
        return o.str();
      }
    }
  return "";
}

const qj_dtype kTypes[] = {QJ_MXFP6_E3M2, QJ_BDR_MX9, QJ_BDR_MX6, QJ_BDR_MX4};

// M covers 1..3, MR - 1 / MR / MR + 1 of every tier's tile and a large M.
TEST(GemmMx16, ShapeSweep) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 1;
    for (qj_dtype wt : kTypes) {
      const int64_t blk = is_bdr(wt) ? 16 : 32;
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 97})  // MR 3 5 6 7 12
        for (int64_t n : {1, 15, 16, 17, 33})
          for (int64_t kb : {1, 3, 8}) {
            Case t;
            t.w = wt;
            t.m = m;
            t.n = n;
            t.k = kb * blk;
            t.seed = seed++;
            t.a_type = seed % 3 == 0 ? QJ_BF16 : QJ_F32;
            t.c_type = seed % 4 == 0 ? QJ_BF16 : QJ_F32;
            t.a_gran = seed % 5 == 0 ? QJ_GRAN_ROW : QJ_GRAN_GROUP;
            t.bias = seed % 2 == 0;
            t.relu = seed % 7 == 0;
            t.lda_pad = seed % 3;
            t.ldc_pad = seed % 2;
            EXPECT_EQ(run_case(t), "") << t.str();
          }
    }
  }
}

// The large and FBGEMM shapes (qjt::large_and_fbgemm_shapes, K rounded up to whole blocks of 32,
// which BDR's 16 divide), each weight type in turn, at every tier.
TEST(GemmMx16, LargeAndFbgemmShapes) {
  qjt::each_large_shape_at_every_tier(32, [](const qjt::Shape& s, uint32_t seed) {
    Case t;
    t.w = kTypes[seed % (sizeof kTypes / sizeof kTypes[0])];
    t.m = s.m, t.n = s.n, t.k = s.k, t.seed = seed;
    t.c_type = seed % 3 == 0 ? QJ_BF16 : QJ_F32;
    EXPECT_EQ(run_case(t), "") << t.str();
  });
}

// Seeded random sample of combinations of every dimension (QJ_TEST_ITERATIONS / QJ_TEST_SEED
// scale it up for a long local run, test/test_util.h).
TEST(GemmMx16, RandomCombinations) {
  qjt::for_each_random_case(44001u, 30, [&](qj_isa, qjt::Picker& pick, uint32_t seed) {
    Case t;
    t.seed = seed;
    t.w = kTypes[pick(4)];
    const int64_t blk = is_bdr(t.w) ? 16 : 32;
    t.m = pick.rows(100, 100, 200);
    t.n = 1 + pick(pick(4) == 0 ? 300 : 80);
    t.k = blk * (1 + pick(pick(4) == 0 ? 40 : 8));
    const int at = pick(6);
    t.a_type = at == 0 ? QJ_U8 : at == 1 ? QJ_S8 : at == 2 ? QJ_BF16 : QJ_F32;
    if (t.a_type == QJ_U8) t.a_zp = pick(256);
    if (t.a_type == QJ_S8) t.a_zp = pick(2) ? 0 : -7;
    const int ct = pick(5);
    const bool int_a = t.a_type == QJ_U8 || t.a_type == QJ_S8;
    t.c_type = ct == 0 ? QJ_BF16 : (ct == 1 && int_a) ? (pick(2) ? QJ_U8 : QJ_S8) : QJ_F32;
    t.a_gran = pick(4) == 0 ? QJ_GRAN_ROW : QJ_GRAN_GROUP;
    t.bias = pick(2);
    t.relu = pick(3) == 0;
    t.quantize = pick(3) == 0;
    t.layout = static_cast<qj_layout>(pick(2));
    if (t.quantize && is_bdr(t.w)) t.mu_pairs = pick(2);
    if (!t.quantize) t.specials = pick(5) == 0;
    t.lda_pad = pick(3) == 0 ? pick(9) : 0;
    t.ldc_pad = pick(3) == 0 ? pick(9) : 0;
    t.threads = pick(4) == 0 ? 2 + pick(4) : 1;
    t.serialize = pick(8) == 0;
    // One case in four as on a VNNI CPU without AVX512-VBMI (its decoders keep other state).
    std::optional<qjt::HideVbmi> hide;
    if (pick(4) == 0) hide.emplace();
    // One case in eight with the weights packed at a random tier (the plan repacks them).
    if (pick(8) == 0) t.pack_isa = qjt::supported_isas()[pick(static_cast<int>(qjt::supported_isas().size()))];
    EXPECT_EQ(run_case(t), "") << t.str() << (hide ? " (VBMI hidden)" : "");
  });
}

TEST(GemmMx16, IntegerA) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (qj_dtype at : {QJ_U8, QJ_S8})
        for (int64_t m : {1, 5, 14}) {
          Case t;
          t.w = wt;
          t.m = m;
          t.n = 33;
          t.k = 128;
          t.a_type = at;
          t.a_zp = at == QJ_U8 ? 131 : -7;
          t.relu = m == 5;
          t.c_type = m == 14 ? QJ_BF16 : (m == 5 ? (at == QJ_U8 ? QJ_U8 : QJ_S8) : QJ_F32);
          t.seed = 50 + static_cast<uint32_t>(m) + (at == QJ_U8 ? 0 : 100);
          EXPECT_EQ(run_case(t), "") << t.str();
        }
  }
}

// Every E3M2 code at every K position (one-hot u8 rows pick single weights), at every tier.
TEST(GemmMx16, ExhaustiveE3m2Codes) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    Case t;
    t.w = QJ_MXFP6_E3M2;
    t.m = 64;
    t.n = 64;
    t.k = 64;
    t.a_type = QJ_U8;
    t.a_zp = 100;
    t.a_scale = 1.0f;
    t.bias = false;
    t.exhaustive = true;
    EXPECT_EQ(run_case(t), "") << t.str();
  }
}

TEST(GemmMx16, QuantizePackRoundTrip) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (qj_layout l : {QJ_LAYOUT_KN, QJ_LAYOUT_NK})
        for (bool mu : {false, true}) {
          if (mu && !is_bdr(wt)) continue;
          Case t;
          t.w = wt;
          t.m = 6;
          t.n = 40;
          t.k = 128;
          t.quantize = true;
          t.layout = l;
          t.mu_pairs = mu;
          t.seed = 100 + l + 2 * mu;
          EXPECT_EQ(run_case(t), "") << t.str();
          t.specials = 1;  // NaN / Inf / zero blocks in the fp32 weights
          EXPECT_EQ(run_case(t), "") << t.str();
        }
  }
}

TEST(GemmMx16, SpecialBlocks) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (int64_t m : {1, 4, 13}) {
        Case t;
        t.w = wt;
        t.m = m;
        t.n = 35;
        t.k = 96;
        t.specials = 1;
        t.seed = 200 + static_cast<uint32_t>(m);
        EXPECT_EQ(run_case(t), "") << t.str();
      }
  }
}

// bf16 output from a call of several panels, every tile height, with and without VBMI (see
// GemmMxPairs.Bf16OutputAcrossPanels): the 6-bit E3M2 / MX6 panels and MX9's mask registers.
TEST(GemmMx16, Bf16OutputAcrossPanels) {
  qjt::each_tile_height_with_and_without_vbmi(QJ_ISA_SCALAR, [](int64_t m, const char* note) {
    for (qj_dtype wt : kTypes) {
      Case t;
      t.w = wt, t.c_type = QJ_BF16;
      t.m = m, t.n = 100, t.k = 64;
      t.seed = 7500 + static_cast<uint32_t>(m);
      EXPECT_EQ(run_case(t), "") << t.str() << note;
    }
  });
}

TEST(GemmMx16, LargeThreadsRepackSerialize) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes) {
      Case t;
      t.w = wt;
      t.m = 70;
      t.n = 100;
      t.k = 512;
      t.threads = 2;
      t.seed = 300;
      EXPECT_EQ(run_case(t), "") << t.str();
      // Packed (or serialized) under every other tier, repacked for this one: the tiers' panels
      // differ in layout, or only in density (E3M2 / MX6: 6 bits per value on the VNNI tier, a
      // byte on the AVX-512 tier's panels of the same geometry).
      t.m = 3;
      t.threads = 1;
      for (qj_isa pack : qjt::supported_isas()) {
        if (pack == isa) continue;
        for (bool ser : {false, true}) {
          t.serialize = ser;
          t.pack_isa = pack;
          EXPECT_EQ(run_case(t), "") << t.str();
        }
      }
    }
  }
}

// E3M2 and MX6 panels of the VNNI tier hold 6 bits per value (int_weights.h kMx16, fp6_dense):
// the step's codes in the byte layout's order as one LSB-first 6-bit stream (MX6: q & 63), read
// here from the raw bits; read back, the same integer forms as the AVX-512 tier's panels. E3M2's,
// turned into one byte per code (fp6_panels_to_bytes), are byte for byte the AVX-512 tier's panels
// of the same weights (the same geometry, scale lines and padding). Several scale lines, a partial
// last panel; MX9 / MX4 and the lower tiers keep their layouts.
TEST(GemmMx16, DenseSixBitPanels) {
  for (qj_dtype wt : kTypes) {
    const int64_t blk = is_bdr(wt) ? 16 : 32, k = blk * 9, n = 40;
    std::vector<float> wf(static_cast<size_t>(k * n));
    for (size_t i = 0; i < wf.size(); ++i)
      wf[i] = std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(1 + i % 7) * (i % 11 == 0 ? 64.0f : 1.0f);
    const qj_weights_desc d = qjt::nk_desc(wt, k, n);
    std::shared_ptr<qj::PackedWeights> dense, bytes;
    ASSERT_EQ(qj::quantize_mx16_weights(d, wf.data(), k, QJ_ISA_AVX512_VNNI, &dense), QJ_OK) << qj_last_error();
    ASSERT_EQ(qj::quantize_mx16_weights(d, wf.data(), k, QJ_ISA_AVX512, &bytes), QJ_OK) << qj_last_error();
    ASSERT_FALSE(bytes->fp6_dense());
    for (int64_t c = 0; c < n; ++c)
      for (int64_t kk = 0; kk < k; ++kk)
        ASSERT_EQ(qj::mx16_q(*dense, kk, c), qj::mx16_q(*bytes, kk, c)) << qj_dtype_name(wt) << " " << kk << " " << c;
    if (wt != QJ_MXFP6_E3M2 && wt != QJ_BDR_MX6) {
      EXPECT_FALSE(dense->fp6_dense()) << qj_dtype_name(wt);
      continue;
    }
    ASSERT_TRUE(dense->fp6_dense());
    ASSERT_EQ(dense->nr, bytes->nr);
    ASSERT_EQ(dense->mx_col_step(), 6);
    ASSERT_EQ(dense->mx_panel_bytes(8), bytes->panel_bytes());
    // 6 bits a value plus the scale lines
    const size_t lines = static_cast<size_t>((dense->groups() + dense->mx_line_groups() - 1) / dense->mx_line_groups());
    EXPECT_EQ(dense->panel_bytes(), (lines * 64 + static_cast<size_t>(k * dense->nr * 6 / 8) + 63) / 64 * 64);
    // The stream order, read from the raw bytes: pair row o of column vector j of step st holds
    // the codes of columns 16 j + c, K 8 st + 2 o + e at index 32 o + 2 c + e.
    const uint8_t* panel = dense->packed.data<uint8_t>();
    for (int64_t kk = 0; kk < blk; ++kk)
      for (int64_t c = 0; c < std::min<int64_t>(n, dense->nr); ++c) {
        const uint8_t* step = panel + dense->mx_k_offset(kk) + (c / 16) * 96;
        const int64_t i = 32 * ((kk % 8) / 2) + 2 * (c % 16) + kk % 2;
        const uint32_t bits = step[(6 * i) / 8] | (static_cast<uint32_t>(step[(6 * i) / 8 + 1]) << 8);
        const int code = static_cast<int>((bits >> ((6 * i) % 8)) & 63);
        const int q = qj::mx16_q(*bytes, kk, c);
        if (wt == QJ_BDR_MX6)
          ASSERT_EQ(code, q & 63) << kk << " " << c;
        else
          ASSERT_EQ(qj::mx::e3m2_int_table()[code], q) << kk << " " << c;
      }
    if (wt == QJ_MXFP6_E3M2) qjt::expect_dense_panels_to_bytes(*dense, *bytes);  // (MX6's bytes: int8 q)
  }
}

// The dense E3M2 / MX6 kernels of the VNNI tier both ways: with VBMI (vpermb, then a per-word
// shift per pair row) and without (e.g. Cascade Lake: vpermd + vpshufb, then the shift), at M = 1
// (GEMV), a few tiles and many rows, two threads; every E3M2 code, special blocks.
TEST(GemmMx16, DenseSixBitKernelsWithAndWithoutVbmi) {
  if (!qj::cpu_features().avx512vnni) GTEST_SKIP() << "no AVX512-VNNI";
  qjt::IsaCap cap(QJ_ISA_AVX512_VNNI);
  auto sweep = [](bool hide) {
    uint32_t seed = 900 + (hide ? 50 : 0);
    for (qj_dtype wt : {QJ_MXFP6_E3M2, QJ_BDR_MX6})
      for (int64_t m : {1, 7, 200})
        for (int64_t n : {17, 64}) {
          Case t;
          t.w = wt;
          t.m = m;
          t.n = n;
          t.k = wt == QJ_BDR_MX6 ? 16 * 11 : 32 * 6;
          t.seed = seed++;
          t.a_type = seed % 2 ? QJ_U8 : QJ_F32;
          t.a_zp = t.a_type == QJ_U8 ? 77 : 0;
          t.specials = seed % 3 == 0;
          t.quantize = seed % 4 == 1;
          t.threads = m == 200 && n == 64 ? 2 : 1;
          EXPECT_EQ(run_case(t), "") << t.str() << " hide_vbmi=" << hide;
        }
    Case e;
    e.w = QJ_MXFP6_E3M2;
    e.m = e.n = e.k = 64;
    e.a_type = QJ_U8;
    e.a_zp = 100;
    e.a_scale = 1.0f;
    e.bias = false;
    e.exhaustive = true;
    EXPECT_EQ(run_case(e), "") << e.str() << " hide_vbmi=" << hide;
  };
  sweep(false);
  qjt::HideVbmi hide;
  sweep(true);
}

// The scalar tier runs the reference of the library (logged fallback): same answers.
TEST(GemmMx16, ScalarTier) {
  qjt::IsaCap cap(QJ_ISA_SCALAR);
  for (qj_dtype wt : kTypes) {
    Case t;
    t.w = wt;
    t.m = 5;
    t.n = 17;
    t.k = 64;
    t.seed = 400;
    EXPECT_EQ(run_case(t), "") << t.str();
  }
}

TEST(GemmMx16, Misuse) {
  for (qj_dtype wt : kTypes) {
    const bool bdr = is_bdr(wt);
    const int64_t blk = bdr ? 16 : 32;
    qj_weights_desc wd{};
    wd.dtype = wt;
    wd.k = blk + 8;
    wd.n = 8;
    wd.layout = QJ_LAYOUT_NK;
    std::vector<float> wf(8 * 64, 1.0f);
    qj_weights w = nullptr;
    EXPECT_EQ(qj_weights_quantize_pack(&wd, wf.data(), 64, &w), QJ_ERR_UNSUPPORTED) << qj_dtype_name(wt);
    EXPECT_NE(std::string(qj_last_error()).find("multiple of " + std::to_string(blk)), std::string::npos)
        << qj_last_error();
    wd.k = blk;
    const int64_t bb = bdr ? qj::bdr::format(wt)->block_bytes : 24;
    std::vector<uint8_t> el(bb * 8, 0), sc(8, 0x7F);
    qj_mx_weights_data md{el.data(), bdr ? nullptr : sc.data(), bdr ? 0 : 1};
    wd.layout = QJ_LAYOUT_KN;
    EXPECT_EQ(qj_weights_pack(&wd, &md, bb, &w), QJ_ERR_INVALID_ARGUMENT);
    wd.layout = QJ_LAYOUT_NK;
    EXPECT_EQ(qj_weights_pack(&wd, &md, bb - 1, &w), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("ld=" + std::to_string(bb - 1)), std::string::npos);
    if (bdr) {
      md.scales = sc.data();  // BDR blocks hold their exponents: scales must be NULL
      EXPECT_EQ(qj_weights_pack(&wd, &md, bb, &w), QJ_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(qj_last_error()).find("data->scales must be NULL"), std::string::npos);
      md.scales = nullptr;
    } else {
      md.scales = nullptr;
      EXPECT_EQ(qj_weights_pack(&wd, &md, bb, &w), QJ_ERR_INVALID_ARGUMENT);
      md.scales = sc.data();
      md.scales_ld = 0;
      EXPECT_EQ(qj_weights_pack(&wd, &md, bb, &w), QJ_ERR_INVALID_ARGUMENT);
      md.scales_ld = INT64_MAX;  // never dereferenced
      EXPECT_EQ(qj_weights_pack(&wd, &md, bb, &w), QJ_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(qj_last_error()).find("exceeds the address space"), std::string::npos) << qj_last_error();
      md.scales_ld = 1;
    }
    float one = 1.0f;
    wd.scales = &one;
    EXPECT_EQ(qj_weights_pack(&wd, &md, bb, &w), QJ_ERR_INVALID_ARGUMENT);
    wd.scales = nullptr;
    EXPECT_EQ(w, nullptr);
    ASSERT_EQ(qj_weights_pack(&wd, &md, bb, &w), QJ_OK) << qj_last_error();
    // A run with bad A (non-finite fp32) fails before anything is written.
    qj_gemm_desc gd{};
    gd.a_type = QJ_F32;
    gd.a_granularity = QJ_GRAN_GROUP;
    gd.c_type = QJ_F32;
    qj_gemm_plan plan = nullptr;
    ASSERT_EQ(qj_gemm_plan_create(&gd, w, &plan), QJ_OK);
    std::vector<float> a(2 * blk, 1.0f), c(16, 7.0f);
    a[blk + 3] = NAN;
    EXPECT_EQ(qj_gemm_run(plan, 2, a.data(), blk, c.data(), 8, nullptr), QJ_ERR_INVALID_ARGUMENT);
    for (float v : c) EXPECT_EQ(v, 7.0f);
    qj_gemm_plan_destroy(plan);
    qj_weights_destroy(w);
  }
}

}  // namespace
