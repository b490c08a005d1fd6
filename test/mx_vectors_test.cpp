// The test vectors of MX.md section 7 (TV1 ... TV13), byte for byte. Each quantize vector runs
// through the C API at every ISA tier this CPU supports, through the scalar codec of src/formats
// and through the double-precision reference of src/ref; decoded values are checked as listed
// (+0 and -0 compare equal there, as MX.md asks). BDR vectors (hand-derived from MX.md section 6)
// are at the end.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ref/mx_ref.h"
#include "test/mx_test_util.h"
#include "test/test_util.h"

namespace {

using mxt::bytes;
using mxt::hex;

// in: the listed inputs (padded with +0.0 to 32); codes: the listed codes (padded with 0);
// decoded: the listed decoded values (optional).
void expect_block(qj_dtype t, qj_rounding r, std::vector<float> in, uint8_t scale,
                  std::vector<uint8_t> want_codes, std::vector<float> decoded = {}) {
  in = mxt::block32(in);
  want_codes.resize(32, 0);
  const qj::mx::ElemFormat& f = *qj::mx::format(t);
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(std::string("isa ") + qj_isa_name(isa) + ", type " + f.name);
    qj_status st;
    mxt::Mx m = mxt::quantize(t, r, in, &st);
    ASSERT_EQ(st, QJ_OK) << qj_last_error();
    EXPECT_EQ(m.scales[0], scale);
    EXPECT_EQ(hex(mxt::codes(t, m.elems, 32)), hex(want_codes));
    std::vector<float> out = mxt::dequantize(t, m, 32, &st);
    ASSERT_EQ(st, QJ_OK) << qj_last_error();
    for (size_t i = 0; i < decoded.size(); ++i) EXPECT_EQ(out[i], decoded[i]) << "element " << i;
  }
  // The scalar codec and the reference give the same.
  uint8_t c[32];
  EXPECT_EQ(qj::mx::quantize_block(f, r, in.data(), 32, c), scale);
  EXPECT_EQ(hex(std::vector<uint8_t>(c, c + 32)), hex(want_codes));
  std::vector<uint8_t> rc(32), rs(1);
  qj::ref::mx_quantize_codes(t, r, in.data(), 32, rc.data(), rs.data());
  EXPECT_EQ(rs[0], scale);
  EXPECT_EQ(hex(rc), hex(want_codes));
}

const std::vector<float> kTv1 = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0f, -.5, -1, -1.5, -2, -3, -4, -6,
                                 0, .5, 1, 1.5, 2, 3, 4, 6, -0.0f, -.5, -1, -1.5, -2, -3, -4, -6};

TEST(MxVectors, TV1_Fp4GridIdentity) {
  std::vector<uint8_t> codes;
  for (int i = 0; i < 32; ++i) codes.push_back(static_cast<uint8_t>(i % 16));
  expect_block(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, kTv1, 0x7f, codes, kTv1);
  // -0.0 keeps its sign through the round trip.
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    mxt::Mx m = mxt::quantize(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, kTv1);
    std::vector<float> out = mxt::dequantize(QJ_MXFP4_E2M1, m, 32);
    EXPECT_TRUE(std::signbit(out[8]) && out[8] == 0.0f) << qj_isa_name(isa);
  }
}

TEST(MxVectors, TV1_Layouts) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    mxt::Mx m = mxt::quantize(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, kTv1);
    // SPLIT, low nibble = even element (torchao, FBGEMM triton).
    EXPECT_EQ(hex(m.elems), "10 32 54 76 98 BA DC FE 10 32 54 76 98 BA DC FE");
    std::vector<uint8_t> g(17), fb(17);
    ASSERT_EQ(qj_mx_export(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP4_E2M1, m.elems.data(), m.scales.data(), 32, g.data()), QJ_OK);
    EXPECT_EQ(hex(g), "7F 00 11 22 33 44 55 66 77 88 99 AA BB CC DD EE FF");
    ASSERT_EQ(qj_mx_export(QJ_MX_LAYOUT_FBGEMM_MX4, QJ_MXFP4_E2M1, m.elems.data(), m.scales.data(), 32, fb.data()), QJ_OK);
    EXPECT_EQ(hex(fb), "10 32 54 76 98 BA DC FE 10 32 54 76 98 BA DC FE 7F");
    // And back.
    std::vector<uint8_t> e(16), s(1);
    ASSERT_EQ(qj_mx_import(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP4_E2M1, g.data(), 32, e.data(), s.data()), QJ_OK);
    EXPECT_EQ(hex(e), hex(m.elems));
    EXPECT_EQ(s[0], 0x7f);
    ASSERT_EQ(qj_mx_import(QJ_MX_LAYOUT_FBGEMM_MX4, QJ_MXFP4_E2M1, fb.data(), 32, e.data(), s.data()), QJ_OK);
    EXPECT_EQ(hex(e), hex(m.elems));
    EXPECT_EQ(s[0], 0x7f);
  }
}

TEST(MxVectors, TV2_Fp4Clamping) {
  const std::vector<float> in = {7, -7, 6.5, -6.25, 5, 1, 0.2f, 0.3f};
  expect_block(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, in, 0x7f, bytes({7, 0xF, 7, 0xF, 6, 2, 0, 1}),
               {6, -6, 6, -6, 4, 1, 0, 0.5});
  expect_block(QJ_MXFP4_E2M1, QJ_ROUND_RCEIL, in, 0x80, bytes({6, 0xE, 5, 0xD, 4, 1, 0, 0}),
               {8, -8, 6, -6, 4, 1, 0, 0});
}

TEST(MxVectors, TV3_Fp4TiesToEven) {
  const std::vector<float> in = {6, .25, .75, 1.25, 1.75, 2.5, 3.5, 5, -.25, -.75, -1.25, -1.75, -2.5, -3.5, -5};
  expect_block(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, in, 0x7f,
               bytes({7, 0, 2, 2, 4, 4, 6, 6, 8, 0xA, 0xA, 0xC, 0xC, 0xE, 0xE}));
}

TEST(MxVectors, TV4_Fp4ScaleBelowOne) {
  expect_block(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, {3, -1.5, 0.75, 0.1f, 0.125, 0.375, 2.9f, -2.2f}, 0x7e,
               bytes({7, 0xD, 3, 0, 0, 2, 7, 0xE}), {3, -1.5, 0.75, 0, 0, 0.5, 3, -2});
}

TEST(MxVectors, TV5_ZeroBlock) {
  for (qj_dtype t : mxt::ocp_types()) {
    for (qj_rounding r : {QJ_ROUND_FLOOR, QJ_ROUND_RCEIL}) {
      expect_block(t, r, {}, 0x00, {}, std::vector<float>(32, 0.0f));
      for (qj_isa isa : qjt::supported_isas()) {
        qjt::IsaCap cap(isa);
        mxt::Mx m = mxt::quantize(t, r, std::vector<float>(32, 0.0f));
        EXPECT_EQ(m.elems, std::vector<uint8_t>(m.elems.size(), 0)) << qj_isa_name(isa);
      }
    }
  }
}

TEST(MxVectors, TV6_Int8) {
  expect_block(QJ_MXINT8, QJ_ROUND_FLOOR,
               {1, -1, 0.5, std::ldexp(1.0f, -8), std::ldexp(1.0f, -7), 1.5f / 64, 2.5f / 64, -2.5f / 64, 0.99f},
               0x7f, bytes({0x40, 0xC0, 0x20, 0x00, 0x00, 0x02, 0x02, 0xFE, 0x3F}),
               {1, -1, 0.5, 0, 0, 2.0f / 64, 2.0f / 64, -2.0f / 64, 63.0f / 64});
}

TEST(MxVectors, TV6b_Int8SaturatesNeverMinus128) {
  expect_block(QJ_MXINT8, QJ_ROUND_FLOOR, {1.999f, -1.9921875f, 1, -0.5}, 0x7f,
               bytes({0x7F, 0x81, 0x40, 0xE0}), {127.0f / 64, -127.0f / 64, 1, -0.5});
}

TEST(MxVectors, TV7_E4M3) {
  expect_block(QJ_MXFP8_E4M3, QJ_ROUND_FLOOR,
               {448, 1, std::ldexp(1.0f, -9), std::ldexp(1.0f, -10), 3 * std::ldexp(1.0f, -10), -500}, 0x7f,
               bytes({0x7E, 0x38, 0x01, 0x00, 0x02, 0xFE}),
               {448, 1, std::ldexp(1.0f, -9), 0, std::ldexp(1.0f, -8), -448});
}

TEST(MxVectors, TV7b_E4M3SmallScale) {
  expect_block(QJ_MXFP8_E4M3, QJ_ROUND_FLOOR, {1, -0.75, std::ldexp(1.0f, -17), std::ldexp(1.0f, -18)}, 0x77,
               bytes({0x78, 0xF4, 0x01, 0x00}), {1, -0.75, std::ldexp(1.0f, -17), 0});
}

TEST(MxVectors, TV8_E5M2) {
  expect_block(QJ_MXFP8_E5M2, QJ_ROUND_FLOOR, {1, -0.75, std::ldexp(1.0f, -30), 3 * std::ldexp(1.0f, -31)}, 0x70,
               bytes({0x78, 0xF6, 0x02, 0x03}), {1, -0.75, std::ldexp(1.0f, -30), 3 * std::ldexp(1.0f, -31)});
  // MX uses SAT: an element-domain value beyond 57344 saturates to 0x7B / 0xFB, never Inf.
  const qj::mx::ElemFormat& f = *qj::mx::format(QJ_MXFP8_E5M2);
  EXPECT_EQ(qj::mx::encode_elem(f, 61440.0f), 0x7b);
  EXPECT_EQ(qj::mx::encode_elem(f, -1e30f), 0xfb);
  EXPECT_EQ(qj::ref::mx_encode(QJ_MXFP8_E5M2, 61440.0f, 0x7f), 0x7b);
}

TEST(MxVectors, TV9_Fp6) {
  expect_block(QJ_MXFP6_E2M3, QJ_ROUND_FLOOR, {7.5, -7.25, 0.0625, 0.1875, 3.3f}, 0x7f,
               bytes({0x1F, 0x3E, 0x00, 0x02, 0x15}), {7.5, -7, 0, 0.25, 3.25});
  expect_block(QJ_MXFP6_E3M2, QJ_ROUND_FLOOR, {28, -26, 0.03125, 0.09375, 13}, 0x7f,
               bytes({0x1F, 0x3E, 0x00, 0x02, 0x1A}), {28, -24, 0, 0.125, 12});
  for (qj_dtype t : {QJ_MXFP6_E2M3, QJ_MXFP6_E3M2}) {
    std::vector<float> in = t == QJ_MXFP6_E2M3 ? std::vector<float>{7.5, -7.25, 0.0625, 0.1875, 3.3f}
                                               : std::vector<float>{28, -26, 0.03125, 0.09375, 13};
    for (qj_isa isa : qjt::supported_isas()) {
      qjt::IsaCap cap(isa);
      mxt::Mx m = mxt::quantize(t, QJ_ROUND_FLOOR, mxt::block32(in));
      ASSERT_EQ(m.elems.size(), 24u);
      EXPECT_EQ(hex(std::vector<uint8_t>(m.elems.begin(), m.elems.begin() + 3)), "9F 0F 08")
          << qj_isa_name(isa);
    }
  }
}

TEST(MxVectors, TV10_ScaleClamping) {
  expect_block(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, {std::ldexp(1.0f, -130), -std::ldexp(1.0f, -131)}, 0x00,
               bytes({0, 8}), {0, 0});
  const float big = 1.5f * std::ldexp(1.0f, 127);
  expect_block(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, {big}, 0xfc, bytes({7}), {big});
  expect_block(QJ_MXINT8, QJ_ROUND_FLOOR, {big}, 0xfe, bytes({0x60}), {big});
}

TEST(MxVectors, TV11_FloorLog2FromBits) {
  const float amax = qj::bits_f32(0x40ffffffu);  // 7.99999952f: floorf(log2f(x)) says 3
  expect_block(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, {amax}, 0x7f, bytes({7}), {6});
}

TEST(MxVectors, TV12_NanInfBlocks) {
  const float nans[] = {qj::bits_f32(0x7fa00001u), qj::bits_f32(0xffc12345u),
                        std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (qj_dtype t : mxt::ocp_types()) {
    for (float special : nans) {
      for (int pos : {0, 7, 16, 31}) {
        std::vector<float> in = qjt::random_floats(32, -3, 3, 7);
        in[pos] = special;
        for (qj_rounding r : {QJ_ROUND_FLOOR, QJ_ROUND_RCEIL})
          expect_block(t, r, in, 0xff, {});
      }
    }
  }
}

TEST(MxVectors, TV12_DecodeNanScale) {
  for (qj_dtype t : mxt::ocp_types()) {
    const qj::mx::ElemFormat& f = *qj::mx::format(t);
    mxt::Mx m;
    m.elems = qjt::random_ints<uint8_t>(f.block_bytes * 2, 0, 255, 11);
    m.scales = {0xff, 0x7f};
    for (qj_isa isa : qjt::supported_isas()) {
      qjt::IsaCap cap(isa);
      std::vector<float> out = mxt::dequantize(t, m, 64);
      for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(out[i])) << f.name << " " << i;
      std::vector<float> ref(64);
      qj::ref::mx_dequantize(t, m.elems.data(), m.scales.data(), 64, ref.data());
      EXPECT_EQ(mxt::first_diff(out, ref), -1) << f.name << " " << qj_isa_name(isa);
    }
  }
}

// ---- TV13: dot products (reference) ----

std::vector<uint8_t> split_from_codes(qj_dtype t, const std::vector<uint8_t>& codes) {
  const qj::mx::ElemFormat& f = *qj::mx::format(t);
  std::vector<uint8_t> e(qj::mx::split_elem_bytes(f, codes.size()));
  for (size_t b = 0; b * 32 < codes.size(); ++b) qj::mx::pack_block(f, codes.data() + 32 * b, e.data() + f.block_bytes * b);
  return e;
}

TEST(MxVectors, TV13_DotFp4TimesE4M3) {
  auto a = split_from_codes(QJ_MXFP4_E2M1, std::vector<uint8_t>(32, 0x3));
  auto b = split_from_codes(QJ_MXFP8_E4M3, std::vector<uint8_t>(32, 0x40));
  const uint8_t sa = 0x82, sb = 0x78;
  EXPECT_EQ(qj::ref::mx_dot(QJ_MXFP4_E2M1, a.data(), &sa, QJ_MXFP8_E4M3, b.data(), &sb, 32), 6.0f);
}

TEST(MxVectors, TV13_DotFp4TimesFp4) {
  std::vector<uint8_t> ca(32), cb(32);
  for (int i = 0; i < 32; ++i) {
    ca[i] = static_cast<uint8_t>(i % 16);
    cb[i] = static_cast<uint8_t>(15 - i % 16);
  }
  auto a = split_from_codes(QJ_MXFP4_E2M1, ca), b = split_from_codes(QJ_MXFP4_E2M1, cb);
  const uint8_t sa = 0x7f, sb = 0x80;
  EXPECT_EQ(qj::ref::mx_dot(QJ_MXFP4_E2M1, a.data(), &sa, QJ_MXFP4_E2M1, b.data(), &sb, 32), -128.0f);
  // The doubled-integer form (MX.md): sum of (2 v_a)(2 v_b) = -256, times 2^(0+1) / 4.
  int s = 0;
  for (int i = 0; i < 32; ++i) s += qj::mx::fp4_int_table()[ca[i]] * qj::mx::fp4_int_table()[cb[i]];
  EXPECT_EQ(s, -256);
  EXPECT_EQ(std::ldexp(static_cast<float>(s), 0 + 1 - 2), -128.0f);
}

TEST(MxVectors, TV13_DotNanScale) {
  auto a = split_from_codes(QJ_MXFP4_E2M1, std::vector<uint8_t>(64, 0x2));
  auto b = split_from_codes(QJ_MXINT8, std::vector<uint8_t>(64, 0x40));
  const uint8_t ok[2] = {0x7f, 0x7f}, nan_first[2] = {0xff, 0x7f}, nan_last[2] = {0x7f, 0xff};
  EXPECT_EQ(qj::ref::mx_dot(QJ_MXFP4_E2M1, a.data(), ok, QJ_MXINT8, b.data(), ok, 64), 64.0f);
  EXPECT_TRUE(std::isnan(qj::ref::mx_dot(QJ_MXFP4_E2M1, a.data(), nan_first, QJ_MXINT8, b.data(), ok, 64)));
  EXPECT_TRUE(std::isnan(qj::ref::mx_dot(QJ_MXFP4_E2M1, a.data(), ok, QJ_MXINT8, b.data(), nan_last, 64)));
}

TEST(MxVectors, TV13_DotTailPaddedWithZeros) {
  // K = 45: the same data zero-padded to 64 gives the same result, and whatever sits in the
  // padding of the last block is ignored.
  const int k = 45;
  std::vector<float> x = qjt::random_floats(k, -4, 4, 3), y = qjt::random_floats(k, -4, 4, 4);
  std::vector<float> xp = x, yp = y;
  xp.resize(64, 0.0f);
  yp.resize(64, 0.0f);
  for (qj_dtype ta : mxt::ocp_types()) {
    for (qj_dtype tb : {QJ_MXFP4_E2M1, QJ_MXINT8, QJ_MXFP8_E4M3}) {
      mxt::Mx a = mxt::quantize(ta, QJ_ROUND_FLOOR, x), b = mxt::quantize(tb, QJ_ROUND_FLOOR, y);
      mxt::Mx ap = mxt::quantize(ta, QJ_ROUND_FLOOR, xp), bp = mxt::quantize(tb, QJ_ROUND_FLOOR, yp);
      const float d = qj::ref::mx_dot(ta, a.elems.data(), a.scales.data(), tb, b.elems.data(), b.scales.data(), k);
      const float dp = qj::ref::mx_dot(ta, ap.elems.data(), ap.scales.data(), tb, bp.elems.data(), bp.scales.data(), 64);
      EXPECT_EQ(qj::f32_bits(d), qj::f32_bits(dp)) << qj_dtype_name(ta) << " x " << qj_dtype_name(tb);
      EXPECT_NE(d, 0.0f);
      // Garbage in the padding of a's last block changes nothing.
      mxt::Mx ag = a;
      const qj::mx::ElemFormat& fa = *qj::mx::format(ta);
      for (int i = fa.block_bytes + (k - 32) * fa.bits / 8 + 1; i < 2 * fa.block_bytes; ++i) ag.elems[i] = 0x5a;
      EXPECT_EQ(qj::f32_bits(qj::ref::mx_dot(ta, ag.elems.data(), ag.scales.data(), tb, b.elems.data(),
                                             b.scales.data(), k)),
                qj::f32_bits(d));
    }
  }
}

// ---- BDR vectors (derived by hand from MX.md section 6) ----

std::vector<uint8_t> bdr_quantize(qj_dtype t, const std::vector<float>& v) {
  size_t eb = 0;
  EXPECT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, t, static_cast<int64_t>(v.size()), &eb, nullptr), QJ_OK);
  std::vector<uint8_t> out(eb, 0xcd);
  EXPECT_EQ(qj_mx_quantize(t, QJ_ROUND_FLOOR, v.data(), static_cast<int64_t>(v.size()), out.data(), nullptr), QJ_OK)
      << qj_last_error();
  return out;
}

void expect_bdr(qj_dtype t, const std::vector<float>& in, const std::vector<uint8_t>& want,
                const std::vector<float>& decoded) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(std::string(qj_isa_name(isa)) + " " + qj_dtype_name(t));
    std::vector<uint8_t> got = bdr_quantize(t, in);
    EXPECT_EQ(hex(got), hex(want));
    std::vector<float> out(in.size());
    ASSERT_EQ(qj_mx_dequantize(t, got.data(), nullptr, static_cast<int64_t>(in.size()), out.data()), QJ_OK);
    for (size_t i = 0; i < decoded.size(); ++i) EXPECT_EQ(out[i], decoded[i]) << "element " << i;
  }
  std::vector<uint8_t> r(want.size());
  qj::ref::bdr_quantize(t, in.data(), static_cast<int64_t>(in.size()), r.data());
  EXPECT_EQ(hex(r), hex(want)) << "reference";
}

TEST(MxVectors, BDR1_Mx4MicroexponentBothSides) {
  // E = 127 (1.0). Pair 0 {1.0, 0.5} holds exponent E: mu = 0, step 2^(0+1-2) = 0.5 -> M = 2, 1.
  // Pair 1 {0.25, 0.75}: both exponents <= E-1: mu = 1, step 0.25 -> M = 1, 3. Pairs 2..7 are
  // zeros (exponent 0 <= E-1): mu = 1. Fields (3 bits): 2, 1, 1, 3, 0... LSB-first:
  // byte 2 = 2 | 1<<3 | (1&3)<<6 = 0x4A, byte 3 = 1>>2 | 3<<1 = 0x06.
  std::vector<float> in = {1.0, 0.5, 0.25, 0.75};
  in.resize(16, 0.0f);
  expect_bdr(QJ_BDR_MX4, in, bytes({0x7F, 0xFE, 0x4A, 0x06, 0, 0, 0, 0}), {1.0, 0.5, 0.25, 0.75});
  // MX9 (8-bit fields: bytes are the codes): steps 2^-6 and 2^-7 -> 64, 32, 32, 96.
  std::vector<uint8_t> mx9 = {0x7F, 0xFE, 64, 32, 32, 96};
  mx9.resize(18, 0);
  expect_bdr(QJ_BDR_MX9, in, mx9, {1.0, 0.5, 0.25, 0.75});
}

TEST(MxVectors, BDR2_Mx4RoundingAndSaturation) {
  // E = 129 (4.0 .. 7.9). Pair 0 {7.9, -3.0}: mu = 0, step 2: 7.9 -> 3.95 -> 4 -> saturates to 3
  // (6.0); -3.0 -> 1.5 -> tie -> 2 (-4.0). Pair 1 {3.0, 0}: mu = 1, step 1: 3.0 exact (M = 3).
  // Pair 2 {-0.0, 2.5}: mu = 1, 2.5 -> tie -> 2, -0 keeps its sign bit (field 0b100).
  // Fields: 3, 4|2=6, 3, 0, 4, 2; mu = 0b11111110.
  // bits: f0=3 @0, f1=6 @3, f2=3 @6, f3=0 @9, f4=4 @12, f5=2 @15
  // byte2 = 3 | 6<<3 | (3&3)<<6 = 0xF3; byte3 = 3>>2 | 0<<1 | 4<<4 | (2&1)<<7 = 0x40;
  // byte4 = 2>>1 = 0x01.
  std::vector<float> in = {7.9f, -3.0f, 3.0f, 0.0f, -0.0f, 2.5f};
  in.resize(16, 0.0f);
  expect_bdr(QJ_BDR_MX4, in, bytes({0x81, 0xFE, 0xF3, 0x40, 0x01, 0, 0, 0}), {6, -4, 3, 0, 0, 2});
}

TEST(MxVectors, BDR3_NanInfAndZero) {
  for (qj_dtype t : mxt::bdr_types()) {
    const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
    std::vector<uint8_t> nan_block(f.block_bytes, 0);
    nan_block[0] = 0xff;
    for (float s : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    qj::bits_f32(0x7f800001u)}) {
      std::vector<float> in = qjt::random_floats(16, -1, 1, 5);
      in[15] = s;
      std::vector<float> nans(16, std::numeric_limits<float>::quiet_NaN());
      expect_bdr(t, in, nan_block, {});
      for (qj_isa isa : qjt::supported_isas()) {
        qjt::IsaCap cap(isa);
        std::vector<float> out(16);
        ASSERT_EQ(qj_mx_dequantize(t, nan_block.data(), nullptr, 16, out.data()), QJ_OK);
        for (float v : out) EXPECT_TRUE(std::isnan(v));
      }
    }
    expect_bdr(t, std::vector<float>(16, 0.0f), std::vector<uint8_t>(f.block_bytes, 0),
               std::vector<float>(16, 0.0f));
  }
}

}  // namespace
