// GEMM with MX weights (MXFP4, MXFP6 E2M3, MXINT8) against src/ref/gemm_mx_ref at every ISA tier.
//
// The reference dequantizes every weight with the scalar decoder and multiplies in double, with A
// quantized to int8 exactly as the library defines it (the kernels' per-block integer sums are
// then exact), so the only differences allowed are the fp32 roundings of the scale products and
// of the fp32 accumulation across blocks. Derivation of the bound, per output (G = k / 32 blocks):
//   exact      Y = sum_g T_g + bias,  T_g = S_g * sa_g * 2^(b_g - 127 - shift)  (S_g exact int32)
//   computed   x_g = fl(S_g * sa_g) (per-block A scale; or the row scale, applied once at the
//              end), facc = fl(facc + x_g * 2^(b_g - 127)) (the power-of-two product is exact),
//              y = fl(facc * 2^-shift [* row scale] + bias) (fma; the 2^-shift product is exact)
//   Every T_g and the bias pass through at most G + 2 roundings of relative size u = 2^-24, so
//   |y - Y| <= gamma_{G+2} * (sum_g |T_g| + |bias|),  gamma_j = j u / (1 - j u)   (Higham 3.1)
//   plus (G + 2) * 2^-149 for products that fall into the fp32 subnormal range (scale byte 0x00).
//   bf16 C adds one RNE rounding to 8 significant bits: + 2^-8 * (|Y| + the fp32 bound).
// ReLU is 1-Lipschitz and is applied to both sides. A 0xFF scale byte must give NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "src/core/isa.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/ops/gemm.h"
#include "src/ops/int_weights.h"
#include "src/ops/mx_weights.h"
#include "src/ref/gemm_mx_ref.h"
#include "src/ref/mx_ref.h"
#include "test/fp6_panels_check.h"
#include "test/test_util.h"

namespace {

struct MxCase {
  qj_dtype w = QJ_MXFP4_E2M1;
  int64_t m = 1, n = 1, k = 32;
  qj_dtype a_type = QJ_F32;  // F32 / BF16 (dynamic), or U8 / S8 with a_zp and scale 0.05
  int32_t a_zp = 0;
  qj_dtype c_type = QJ_F32;
  qj_granularity a_gran = QJ_GRAN_GROUP;
  bool bias = true, relu = false;
  bool quantize = false;    // qj_weights_quantize_pack of fp32 (else qj_weights_pack of codes)
  qj_layout layout = QJ_LAYOUT_KN;  // quantize_pack only
  int specials = 0;         // scale bytes 0x00 / 0xFF and extreme codes planted
  int tail_special = 0;     // only the last column: 1 every block 0x00, 2 its last block 0xFF
  int64_t lda_pad = 0, ldc_pad = 0;
  int threads = 1;
  int pack_isa = -1;        // pack under this cap (the plan repacks)
  bool serialize = false;   // run from a serialize / deserialize round trip
  uint32_t seed = 1;
  std::string str() const {
    std::ostringstream o;
    o << qj_dtype_name(w) << " m=" << m << " n=" << n << " k=" << k << " a=" << qj_dtype_name(a_type)
      << " a_zp=" << a_zp << " c=" << qj_dtype_name(c_type) << " a_gran=" << a_gran << " bias=" << bias << " relu=" << relu
      << " quantize=" << quantize << " layout=" << layout << " specials=" << specials << " tail_special=" << tail_special
      << " threads=" << threads << " pack_isa=" << pack_isa << " ser=" << serialize
      << " seed=" << seed << " isa=" << qj_isa_name(qj_max_isa());
    return o.str();
  }
};

std::string run_case(const MxCase& t) {
  std::mt19937 rng(t.seed);
  const qj::mx::ElemFormat& f = *qj::mx::format(t.w);
  const int64_t blocks = t.k / 32;
  qj::ref::MxWeights rw;
  rw.type = t.w;
  rw.k = t.k;
  rw.n = t.n;
  rw.codes.resize(t.n * t.k);
  rw.scales.resize(t.n * blocks);
  std::vector<float> wf;  // fp32 weights (quantize path)
  const int64_t wld = (t.layout == QJ_LAYOUT_KN ? t.n : t.k) + 3;
  if (t.quantize) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    wf.assign((t.layout == QJ_LAYOUT_KN ? t.k : t.n) * wld, 0.0f);
    std::vector<float> col(t.k);
    for (int64_t c = 0; c < t.n; ++c) {
      const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
      for (int64_t j = 0; j < t.k; ++j) {
        col[j] = nd(rng) * mag;
        (t.layout == QJ_LAYOUT_KN ? wf[j * wld + c] : wf[c * wld + j]) = col[j];
      }
      qj::ref::mx_quantize_codes(t.w, QJ_ROUND_FLOOR, col.data(), t.k, &rw.codes[c * t.k],
                                 &rw.scales[c * blocks]);
    }
  } else {
    const int cmax = 1 << f.bits;
    for (auto& c : rw.codes) c = static_cast<uint8_t>(rng() % cmax);
    for (auto& s : rw.scales) s = static_cast<uint8_t>(110 + rng() % 30);
    if (t.specials) {
      rw.scales[0] = 0x00;
      rw.scales[rw.scales.size() - 1] = 0xFF;
      if (t.n > 2) rw.scales[(t.n / 2) * blocks] = 254 - f.emax - 20;
      for (int64_t j = 0; j < t.k; j += 5) rw.codes[j] = t.w == QJ_MXINT8 ? 0x80 : static_cast<uint8_t>(cmax - 1);
    }
    if (t.tail_special == 1)
      for (int64_t b = 0; b < blocks; ++b) rw.scales[(t.n - 1) * blocks + b] = 0x00;
    if (t.tail_special == 2) rw.scales[t.n * blocks - 1] = 0xFF;
  }
  // SPLIT element bytes per column (NK) for qj_weights_pack.
  const int64_t eld = blocks * f.block_bytes + 5;
  std::vector<uint8_t> elems(t.n * eld, 0xCD);
  for (int64_t c = 0; c < t.n; ++c)
    for (int64_t b = 0; b < blocks; ++b)
      qj::mx::pack_block(f, &rw.codes[c * t.k + b * 32], &elems[c * eld + b * f.block_bytes]);
  const int64_t sld = blocks + 2;
  std::vector<uint8_t> sc(t.n * sld, 0x7F);
  for (int64_t c = 0; c < t.n; ++c)
    for (int64_t b = 0; b < blocks; ++b) sc[c * sld + b] = rw.scales[c * blocks + b];

  // A
  const int64_t lda = t.k + t.lda_pad;
  std::vector<float> af = qjt::random_floats(t.m * lda, -3.0f, 3.0f, t.seed * 7 + 1);
  if (t.m > 1) af[lda + 1] = 40.0f;  // an outlier
  std::vector<uint16_t> ab(af.size());
  for (size_t i = 0; i < af.size(); ++i) {
    ab[i] = qj::f32_to_bf16(af[i]);
    af[i] = t.a_type == QJ_BF16 ? qj::bf16_to_f32(ab[i]) : af[i];
  }
  const bool a_int = t.a_type == QJ_U8 || t.a_type == QJ_S8;
  const std::vector<uint8_t> a8 = qjt::random_ints<uint8_t>(t.m * lda, t.a_type == QJ_U8 ? 0 : -128,
                                                            t.a_type == QJ_U8 ? 255 : 127, t.seed * 3 + 2);
  const void* a = a_int ? static_cast<const void*>(a8.data())
                  : t.a_type == QJ_BF16 ? static_cast<const void*>(ab.data())
                                        : af.data();
  std::vector<float> bias = qjt::random_floats(t.n, -2.0f, 2.0f, t.seed + 5);

  qj_gemm_desc gd{};
  gd.a_type = t.a_type;
  gd.a_scale = 0.05f;
  gd.a_zero_point = t.a_zp;
  gd.a_granularity = t.a_gran;
  gd.c_type = t.c_type;
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
    qj_mx_weights_data md{elems.data(), sc.data(), sld};
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
  const std::string plan_err = qjt::create_jit_plan(gd, w, &plan);  // (no fallback at a JIT tier)
  qj_weights_destroy(w);
  if (!plan_err.empty()) return plan_err;
  const int64_t ldc = t.n + t.ldc_pad;
  const int eb = t.c_type == QJ_BF16 ? 2 : 4;
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
      if (t.c_type == QJ_BF16) {
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

const qj_dtype kTypes[] = {QJ_MXFP4_E2M1, QJ_MXFP6_E2M3, QJ_MXINT8};

TEST(GemmMx, ShapeSweep) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 1;
    for (qj_dtype wt : kTypes)
      for (int64_t m : {1, 2, 3, 5, 7, 13, 37})
        for (int64_t n : {1, 9, 16, 33, 70})
          for (int64_t k : {32, 96, 256}) {
            MxCase t;
            t.w = wt;
            t.m = m;
            t.n = n;
            t.k = k;
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

// u8 (with zero points) and s8 A, and dynamic A by row as well as by group, against the reference:
// below the VNNI tier MXINT8 weights read A as s16 pairs (quads_as_pairs), where u8 A keeps its
// values and zero point as they are, not shifted to s8.
TEST(GemmMx, EveryATypeEveryTier) {
  const int64_t shapes[][3] = {{1, 8, 32}, {5, 40, 96}, {13, 17, 64}, {2, 33, 160}};
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (const auto& sh : shapes)
        for (int at = 0; at < 5; ++at) {
          MxCase t;
          t.w = wt;
          t.m = sh[0], t.n = sh[1], t.k = sh[2];
          t.a_type = at == 0 ? QJ_U8 : at == 1 ? QJ_S8 : at == 4 ? QJ_BF16 : QJ_F32;
          t.a_zp = at == 0 ? 3 + 50 * static_cast<int32_t>(sh[0] % 5) : at == 1 ? -7 : 0;
          t.a_gran = at == 3 ? QJ_GRAN_ROW : QJ_GRAN_GROUP;
          t.c_type = sh[0] % 2 ? QJ_F32 : QJ_BF16;
          t.relu = sh[1] % 2 == 1;
          t.seed = static_cast<uint32_t>(sh[1] * 7 + at);
          EXPECT_EQ(run_case(t), "") << t.str();
        }
  }
}

// The large and FBGEMM shapes (qjt::large_and_fbgemm_shapes, K rounded up to whole blocks), each
// weight type in turn, at every tier.
TEST(GemmMx, LargeAndFbgemmShapes) {
  qjt::each_large_shape_at_every_tier(32, [](const qjt::Shape& s, uint32_t seed) {
    MxCase t;
    t.w = kTypes[seed % (sizeof kTypes / sizeof kTypes[0])];
    t.m = s.m, t.n = s.n, t.k = s.k, t.seed = seed;
    t.c_type = seed % 3 == 0 ? QJ_BF16 : QJ_F32;
    EXPECT_EQ(run_case(t), "") << t.str();
  });
}

// Seeded random sample of combinations of every dimension (QJ_TEST_ITERATIONS / QJ_TEST_SEED
// scale it up for a long local run, test/test_util.h).
TEST(GemmMx, RandomCombinations) {
  qjt::for_each_random_case(55001u, 30, [&](qj_isa, qjt::Picker& pick, uint32_t seed) {
    MxCase t;
    t.seed = seed;
    t.w = kTypes[pick(3)];
    t.m = pick.rows(100, 100, 200);
    t.n = 1 + pick(pick(4) == 0 ? 300 : 80);
    t.k = 32 * (1 + pick(pick(4) == 0 ? 24 : 6));
    const int at = pick(6);  // BF16, U8, S8 one in six each, else F32
    t.a_type = at == 0 ? QJ_BF16 : at == 1 ? QJ_U8 : at == 2 ? QJ_S8 : QJ_F32;
    if (at == 1) t.a_zp = pick(256);
    if (at == 2) t.a_zp = pick(256) - 128;
    t.c_type = pick(3) == 0 ? QJ_BF16 : QJ_F32;
    t.a_gran = pick(4) == 0 ? QJ_GRAN_ROW : QJ_GRAN_GROUP;
    t.bias = pick(2);
    t.relu = pick(3) == 0;
    t.quantize = pick(3) == 0;
    t.layout = static_cast<qj_layout>(pick(2));
    if (!t.quantize) {
      t.specials = pick(5) == 0;
      t.tail_special = pick(6) == 0 ? 1 + pick(2) : 0;
    }
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

TEST(GemmMx, QuantizePackBothLayouts) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (qj_layout l : {QJ_LAYOUT_KN, QJ_LAYOUT_NK}) {
        MxCase t;
        t.w = wt;
        t.m = 6;
        t.n = 40;
        t.k = 128;
        t.quantize = true;
        t.layout = l;
        t.seed = 100 + l;
        EXPECT_EQ(run_case(t), "") << t.str();
      }
  }
}

TEST(GemmMx, SpecialScalesAndCodes) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (int64_t m : {1, 4, 9}) {
        MxCase t;
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

// The kernels decode scale bytes with a shift alone when the plan finds no 0x00 / 0xFF byte in
// the weights; a special byte only in the last column (in the partial last panel at every tier:
// n = 35 is 32 + 3 columns on zmm, 32 + 3 on ymm) must still be seen. Without a bias, a column
// of 0x00 scales gives outputs near 2^-127 * sum (far above the bound's subnormal slack), which
// the shift alone would turn into exact zeros; 0xFF must give NaN, not an infinity.
TEST(GemmMx, SpecialScaleOnlyInTailColumn) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes)
      for (int special : {1, 2})
        for (int64_t m : {1, 5}) {
          MxCase t;
          t.w = wt;
          t.m = m;
          t.n = 35;
          t.k = 64;
          t.bias = false;
          t.tail_special = special;
          t.seed = 250 + static_cast<uint32_t>(m) + 10 * special;
          EXPECT_EQ(run_case(t), "") << t.str();
        }
  }
}

// On the VNNI tier without VBMI (e.g. Cascade Lake) MXFP4 decodes with vpshufb + vpand ahead of
// vpdpbusd (with VBMI, vpermb), E2M3 with two vpshufb tables of its magnitudes, the high table
// and the sign applied under byte masks (with VBMI, one vpermb). Tails in M and N.
TEST(GemmMx, VnniWithoutVbmi) {
  qjt::HideVbmi hide;
  for (qj_isa isa : qjt::supported_isas()) {
    if (isa < QJ_ISA_AVX512_VNNI) continue;
    qjt::IsaCap cap(isa);
    uint32_t seed = 400;
    for (qj_dtype wt : kTypes)
      for (int64_t m : {1, 2, 7, 13})
        for (int64_t n : {9, 33, 70}) {
          MxCase t;
          t.w = wt;
          t.m = m;
          t.n = n;
          t.k = 96;
          t.seed = seed++;
          t.specials = seed % 3 == 0;
          EXPECT_EQ(run_case(t), "") << t.str();
        }
  }
}

// bf16 output from a call of several 32-column panels, fp32 and bf16 A, every tile height, with
// and without VBMI: the store's NaN test between panels must leave the decoders' mask registers
// alone (see GemmMxPairs.Bf16OutputAcrossPanels).
TEST(GemmMx, Bf16OutputAcrossPanels) {
  qjt::each_tile_height_with_and_without_vbmi(QJ_ISA_SCALAR, [](int64_t m, const char* note) {
    for (qj_dtype wt : kTypes)
      for (qj_dtype at : {QJ_F32, QJ_BF16}) {
        MxCase t;
        t.w = wt, t.a_type = at, t.c_type = QJ_BF16;
        t.m = m, t.n = 100, t.k = 64;
        t.seed = 7400 + static_cast<uint32_t>(m);
        EXPECT_EQ(run_case(t), "") << t.str() << note;
      }
  });
}

TEST(GemmMx, LargeThreadsRepackSerialize) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kTypes) {
      MxCase t;
      t.w = wt;
      t.m = 70;
      t.n = 100;
      t.k = 512;
      t.threads = 2;
      t.seed = 300;
      EXPECT_EQ(run_case(t), "") << t.str();
      // Packed (or serialized) under every other tier, repacked for this one (E2M3: 6 bits per
      // code on the VNNI tier, a byte on the AVX-512 tier's panels of the same geometry).
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

// The packed panel layout is part of the serialized image (version 2, src/ops/serialize.cpp): each
// 64-byte scale line holds the E8M0 bytes of 64 / nr groups, then come those groups' steps. Read
// back from the raw bytes: MXFP4, AVX-512 panels (nr = 32, two groups per line), three groups.
TEST(GemmMx, PanelScaleLines) {
  const int64_t k = 96, n = 40, groups = k / 32;
  std::vector<uint8_t> el(static_cast<size_t>(n * k / 2)), sc(static_cast<size_t>(n * groups));
  for (size_t i = 0; i < el.size(); ++i) el[i] = static_cast<uint8_t>(i * 7 + 3);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t g = 0; g < groups; ++g) sc[c * groups + g] = static_cast<uint8_t>(100 + 3 * c + g);
  const qj_weights_desc d = qjt::nk_desc(QJ_MXFP4_E2M1, k, n);
  const qj_mx_weights_data md{el.data(), sc.data(), groups};
  std::shared_ptr<qj::PackedWeights> w;
  ASSERT_EQ(qj::pack_mx_weights(d, &md, k / 2, QJ_ISA_AVX512, &w), QJ_OK) << qj_last_error();
  ASSERT_EQ(w->nr, 32);
  const size_t step_group = 32 / 8 * 32 * 4;  // 4 steps of 8 K x 32 columns x 4 bytes
  ASSERT_EQ(w->panel_bytes(), 2 * 64 + 3 * step_group);
  for (int64_t p = 0; p < w->n_panels; ++p) {
    const uint8_t* panel = w->packed.data<uint8_t>() + p * w->panel_bytes();
    for (int64_t c = p * 32; c < std::min<int64_t>(n, p * 32 + 32); ++c) {
      const size_t cc = static_cast<size_t>(c - p * 32);
      EXPECT_EQ(panel[cc], sc[c * groups + 0]) << c;                                // line 0, group 0
      EXPECT_EQ(panel[32 + cc], sc[c * groups + 1]) << c;                           // line 0, group 1
      EXPECT_EQ(panel[64 + 2 * step_group + cc], sc[c * groups + 2]) << c;          // line 1, group 2
      // The first step of group 2 follows its line: nibbles of k = 64..67 (low) and 68..71 (high).
      const uint8_t b = panel[2 * 64 + 2 * step_group + cc * 4];
      EXPECT_EQ(b & 15, qj::mx::get_code(*qj::mx::format(QJ_MXFP4_E2M1), el.data() + c * (k / 2), 64)) << c;
      EXPECT_EQ(b >> 4, qj::mx::get_code(*qj::mx::format(QJ_MXFP4_E2M1), el.data() + c * (k / 2), 68)) << c;
    }
  }
}

// The one-row weight prefetch (src/ops/gemm.cpp, decoded_prefetch_bytes) of weights of at least
// 16 MiB: on a CPU without AVX-512, 8 KiB ahead for MXFP4 and 16 KiB for MXINT8; elsewhere outside
// Zen 5, 16 KiB for MXFP4 at the AVX-512 tiers and never for MXINT8 (slower there); on Zen 5 16 KiB
// for both. Which kernel each plan holds, by its name; the values are zeros (only the size matters).
TEST(GemmMx, OneRowPrefetchRule) {
  const bool zen5 = qj::amd_family() >= 0x1a;
  for (qj_dtype wt : {QJ_MXFP4_E2M1, QJ_MXINT8}) {
    const int64_t k = 4096, n = wt == QJ_MXFP4_E2M1 ? 8192 : 4096, groups = k / 32;
    const int64_t row_bytes = wt == QJ_MXFP4_E2M1 ? k / 2 : k;
    std::vector<uint8_t> el(static_cast<size_t>(n * row_bytes)), sc(static_cast<size_t>(n * groups), 127);
    const qj_weights_desc d = qjt::nk_desc(wt, k, n);
    const qj_mx_weights_data md{el.data(), sc.data(), groups};
    for (qj_isa isa : qjt::supported_isas()) {
      if (isa < QJ_ISA_AVX2) continue;  // (no JIT kernels below AVX2)
      qjt::IsaCap cap(isa);
      std::shared_ptr<qj::PackedWeights> w;
      ASSERT_EQ(qj::pack_mx_weights(d, &md, row_bytes, isa, &w), QJ_OK) << qj_last_error();
      const size_t bytes = w->panel_bytes() * static_cast<size_t>(w->n_panels);
      ASSERT_GE(bytes, size_t{16} << 20);
      qj_gemm_desc gd{};
      gd.a_type = QJ_F32;
      gd.c_type = QJ_F32;
      std::unique_ptr<qj::GemmPlan> p;
      ASSERT_EQ(qj::gemm_plan_create(gd, w, &p), QJ_OK) << qj_last_error();
      ASSERT_FALSE(p->kernels.empty());
      const std::string name = p->kernels[0].name();
      const bool avx2_cpu = qj_cpu_isa() < QJ_ISA_AVX512;
      const bool far = avx2_cpu ? wt == QJ_MXINT8 : zen5 || (wt == QJ_MXFP4_E2M1 && isa >= QJ_ISA_AVX512);
      EXPECT_EQ(name.find("_pf16384") != std::string::npos, far) << qj_isa_name(isa) << ": " << name;
      EXPECT_EQ(name.find("_pf8192") != std::string::npos, avx2_cpu && wt == QJ_MXFP4_E2M1)
          << qj_isa_name(isa) << ": " << name;
    }
  }
}

// The one-row pair form (AVX2 tier, MXFP4 and E2M3: two panels a pass, src/ops/gemm.cpp
// one_row_pairs) against the reference: even and odd panel counts, a tail panel or none, special
// scale bytes (the full E8M0 decode of the second panel's scales), and partitions whose slices
// start on odd panels. The plans hold it (by name); MXINT8's do not (its registers do not fit).
TEST(GemmMx, OneRowPairForm) {
  const auto isas = qjt::supported_isas();
  if (std::find(isas.begin(), isas.end(), QJ_ISA_AVX2) == isas.end()) GTEST_SKIP() << "no AVX2";
  qjt::IsaCap cap(QJ_ISA_AVX2);
  uint32_t seed = 900;
  for (qj_dtype wt : kTypes)
    for (int64_t n : {16, 24, 35, 67, 200})
      for (int64_t k : {32, 96, 256})
        for (int threads : {1, 3}) {
          if (threads == 3 && n < 67) continue;
          MxCase t;
          t.w = wt;
          t.m = 1;
          t.n = n;
          t.k = k;
          t.threads = threads;
          t.specials = (n + k) % 2;
          t.c_type = n == 35 ? QJ_BF16 : QJ_F32;
          t.seed = ++seed;
          EXPECT_EQ(run_case(t), "") << t.str();
        }
  for (qj_dtype wt : kTypes) {
    const int64_t k = 64, n = 40, groups = k / 32;
    const qj::mx::ElemFormat& fmt = *qj::mx::format(wt);
    std::vector<uint8_t> el(static_cast<size_t>(n * groups * fmt.block_bytes)), sc(static_cast<size_t>(n * groups), 127);
    const qj_weights_desc d = qjt::nk_desc(wt, k, n);
    const qj_mx_weights_data md{el.data(), sc.data(), groups};
    std::shared_ptr<qj::PackedWeights> w;
    ASSERT_EQ(qj::pack_mx_weights(d, &md, groups * fmt.block_bytes, QJ_ISA_AVX2, &w), QJ_OK) << qj_last_error();
    qj_gemm_desc gd{};
    gd.a_type = QJ_F32;
    gd.a_granularity = QJ_GRAN_GROUP;
    gd.c_type = QJ_F32;
    std::unique_ptr<qj::GemmPlan> p;
    ASSERT_EQ(qj::gemm_plan_create(gd, w, &p), QJ_OK) << qj_last_error();
    const std::string name = p->pair ? p->pair.name() : std::string();
    EXPECT_EQ(name.find("_pair") != std::string::npos, wt != QJ_MXINT8) << qj_dtype_name(wt) << ": " << name;
  }
}

// MXFP6 E2M3 panels of the VNNI tier hold 6 bits per code (int_weights.h, fp6_dense): per 8-K step
// and column vector, the 64 codes of k0..3 then those of k4..7 (code index 4 c + r) as one
// LSB-first bit stream, 48 bytes per vector, as MX.md's FP6 packing. Read back from the raw bytes;
// the AVX-512 and AVX2 tiers keep one byte per code. Also the sizes: 6 bits per weight plus the
// scale lines, or 8.
TEST(GemmMx, PanelDenseFp6) {
  const int64_t k = 64, n = 16, groups = k / 32;
  auto code_of = [](int64_t kk, int64_t c) { return static_cast<uint8_t>((kk * 7 + c * 13 + kk * c) % 64); };
  const qj::mx::ElemFormat& fmt = *qj::mx::format(QJ_MXFP6_E2M3);
  std::vector<uint8_t> el(static_cast<size_t>(n * groups * fmt.block_bytes)), sc(static_cast<size_t>(n * groups), 127);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t g = 0; g < groups; ++g) {  // the SPLIT input, block by block
      uint8_t codes[32];
      for (int j = 0; j < 32; ++j) codes[j] = code_of(32 * g + j, c);
      qj::mx::pack_block(fmt, codes, el.data() + (c * groups + g) * fmt.block_bytes);
    }
  const qj_weights_desc d = qjt::nk_desc(QJ_MXFP6_E2M3, k, n);
  const qj_mx_weights_data md{el.data(), sc.data(), groups};
  for (qj_isa isa : {QJ_ISA_AVX512_VNNI, QJ_ISA_AVX512, QJ_ISA_AVX2}) {
    std::shared_ptr<qj::PackedWeights> w;
    ASSERT_EQ(qj::pack_mx_weights(d, &md, k * 6 / 8, isa, &w), QJ_OK) << qj_last_error();
    for (int64_t c = 0; c < n; ++c)
      for (int64_t kk = 0; kk < k; ++kk) ASSERT_EQ(w->mx_code(kk, c), code_of(kk, c)) << kk << " " << c;
    const uint8_t* panel = w->packed.data<uint8_t>();
    if (isa != QJ_ISA_AVX512_VNNI) {
      ASSERT_FALSE(w->fp6_dense());
      const int64_t lanes = isa == QJ_ISA_AVX2 ? 8 : 16;
      ASSERT_EQ(w->nr, lanes);
      EXPECT_EQ(w->panel_bytes(), 64u + static_cast<size_t>(k * lanes));  // one byte a code
      EXPECT_EQ(panel[64 + 1 * 4 + 3], code_of(3, 1));  // step 0: column 1's dword, byte 3
      EXPECT_EQ(panel[64 + lanes * 4 + 2 * 4 + 1], code_of(5, 2));  // the k4..7 quads follow
      continue;
    }
    ASSERT_TRUE(w->fp6_dense());
    ASSERT_EQ(w->nr, 16);
    ASSERT_EQ(w->panel_bytes(), 64u + static_cast<size_t>(k * n * 6 / 8));  // one scale line, 6 bits a code
    for (int64_t st = 0; st < k / 8; ++st)
      for (int64_t half = 0; half < 2; ++half) {
        const uint8_t* v = panel + 64 + st * 96 + half * 48;
        for (int64_t i = 0; i < 64; ++i) {
          const int64_t c = i / 4, kk = st * 8 + half * 4 + i % 4;
          const uint32_t bits = v[(6 * i) / 8] | (static_cast<uint32_t>(v[(6 * i) / 8 + 1]) << 8);
          ASSERT_EQ((bits >> ((6 * i) % 8)) & 63, code_of(kk, c)) << "step " << st << " code " << i;
        }
      }
  }
}

// The GEMM driver's scratch for many rows (src/ops/gemm.cpp, GemmPlan::kernels_b8): dense E2M3
// panels of the VNNI tier turned into one byte per code are, byte for byte, the AVX-512 tier's
// panels of the same weights (same geometry, scale lines, padding), by the vpermb form and the
// scalar one. Several scale lines (nr = 32: two groups a line), a partial last panel.
TEST(GemmMx, DensePanelsToBytes) {
  const int64_t k = 32 * 7, n = 40;
  std::vector<float> wf(static_cast<size_t>(k * n));
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(1 + i % 5);
  const qj_weights_desc d = qjt::nk_desc(QJ_MXFP6_E2M3, k, n);
  std::shared_ptr<qj::PackedWeights> dense, bytes;
  ASSERT_EQ(qj::quantize_mx_weights(d, wf.data(), k, QJ_ISA_AVX512_VNNI, &dense), QJ_OK) << qj_last_error();
  ASSERT_EQ(qj::quantize_mx_weights(d, wf.data(), k, QJ_ISA_AVX512, &bytes), QJ_OK) << qj_last_error();
  qjt::expect_dense_panels_to_bytes(*dense, *bytes);
}

TEST(GemmMx, Misuse) {
  qj_weights_desc wd{};
  wd.dtype = QJ_MXFP4_E2M1;
  wd.k = 40;
  wd.n = 8;
  wd.layout = QJ_LAYOUT_NK;
  std::vector<float> wf(8 * 40, 1.0f);
  qj_weights w = nullptr;
  EXPECT_EQ(qj_weights_quantize_pack(&wd, wf.data(), 40, &w), QJ_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(qj_last_error()).find("multiple of 32"), std::string::npos);
  wd.k = 32;
  wd.layout = QJ_LAYOUT_KN;
  std::vector<uint8_t> el(16 * 8), sc(8);
  qj_mx_weights_data md{el.data(), sc.data(), 1};
  EXPECT_EQ(qj_weights_pack(&wd, &md, 16, &w), QJ_ERR_INVALID_ARGUMENT);  // KN
  wd.layout = QJ_LAYOUT_NK;
  EXPECT_EQ(qj_weights_pack(&wd, &md, 15, &w), QJ_ERR_INVALID_ARGUMENT);  // ld < 16
  EXPECT_NE(std::string(qj_last_error()).find("ld=15"), std::string::npos);
  md.scales = nullptr;
  EXPECT_EQ(qj_weights_pack(&wd, &md, 16, &w), QJ_ERR_INVALID_ARGUMENT);
  md.scales = sc.data();
  md.scales_ld = 0;
  EXPECT_EQ(qj_weights_pack(&wd, &md, 16, &w), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(w, nullptr);
  for (int64_t huge : {INT64_MAX, int64_t(1) << 62, (int64_t(1) << 53) + 1}) {  // never dereferenced
    md.scales_ld = huge;
    EXPECT_EQ(qj_weights_pack(&wd, &md, 16, &w), QJ_ERR_INVALID_ARGUMENT) << huge;
    EXPECT_NE(std::string(qj_last_error()).find("exceeds the address space"), std::string::npos) << qj_last_error();
  }
  EXPECT_EQ(w, nullptr);
  md.scales_ld = 1;
  ASSERT_EQ(qj_weights_pack(&wd, &md, 16, &w), QJ_OK);
  qj_weights_destroy(w);
}

}  // namespace
