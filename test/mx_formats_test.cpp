// MX / BDR format layer: element value rule (every code of every type, computed here from
// sign / exponent / mantissa with the parameters of MX.md Table 1 written out independently),
// element rounding at every grid boundary, the scale rules against the double reference, the
// integer-form tables, SPLIT packing, the foreign MXFP4 layouts and the BDR codec.
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>

#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ref/mx_ref.h"
#include "test/mx_test_util.h"
#include "test/test_util.h"

namespace {

// MX.md section 1.1 Table 1, written out again rather than read from src/formats.
struct Spec {
  qj_dtype t;
  int bits, ebits, mbits, bias, emax;
  double max;
};
const Spec kSpecs[] = {
    {QJ_MXFP8_E4M3, 8, 4, 3, 7, 8, 448},   {QJ_MXFP8_E5M2, 8, 5, 2, 15, 15, 57344},
    {QJ_MXFP6_E3M2, 6, 3, 2, 3, 4, 28},    {QJ_MXFP6_E2M3, 6, 2, 3, 1, 2, 7.5},
    {QJ_MXFP4_E2M1, 4, 2, 1, 1, 2, 6},     {QJ_MXINT8, 8, 0, 6, 0, 0, 127.0 / 64},
};

// The value rule of MX.md section 1.2 (and Table 6 for INT8).
double rule_value(const Spec& s, int code) {
  if (s.t == QJ_MXINT8) return static_cast<int8_t>(code) / 64.0;
  const int sign = (code >> (s.bits - 1)) & 1;
  const int e = (code >> s.mbits) & ((1 << s.ebits) - 1);
  const int m = code & ((1 << s.mbits) - 1);
  if (s.t == QJ_MXFP8_E4M3 && e == 15 && m == 7) return std::nan("");
  if (s.t == QJ_MXFP8_E5M2 && e == 31) return m ? std::nan("") : (sign ? -INFINITY : INFINITY);
  const double mag = e == 0 ? m * std::pow(2.0, 1 - s.bias - s.mbits)
                            : (std::pow(2.0, s.mbits) + m) * std::pow(2.0, e - s.bias - s.mbits);
  return sign ? -mag : mag;
}

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)); }

TEST(MxFormats, Table1Parameters) {
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    EXPECT_EQ(f.bits, s.bits) << f.name;
    EXPECT_EQ(f.emax, s.emax) << f.name;
    EXPECT_EQ(f.max_value, static_cast<float>(s.max)) << f.name;
    EXPECT_EQ(rule_value(s, static_cast<int>(f.max_code)), s.max) << f.name;
    EXPECT_EQ(f.block_bytes, 32 * s.bits / 8) << f.name;
    // emax_elem is the exponent of the largest power of two <= max.
    EXPECT_EQ(std::floor(std::log2(s.max)), s.emax) << f.name;
  }
  EXPECT_EQ(qj::mx::format(QJ_F32), nullptr);
  EXPECT_EQ(qj::mx::format(QJ_BDR_MX9), nullptr);
}

TEST(MxFormats, ExhaustiveDecodeEveryCode) {
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    const float* tab = qj::mx::value_table(s.t);
    for (int c = 0; c < (1 << s.bits); ++c) {
      const double want = rule_value(s, c);
      EXPECT_TRUE(same(qj::mx::decode_elem(f, static_cast<uint8_t>(c)), want)) << f.name << " code " << c;
      EXPECT_TRUE(same(tab[c], want)) << f.name << " code " << c;
      EXPECT_TRUE(same(qj::ref::mx_elem_value(s.t, static_cast<uint8_t>(c)), want)) << f.name << " code " << c;
    }
  }
}

// Every code of every type through qj_mx_dequantize(_ex) at every ISA tier, under scales that
// cover the subnormal scale 0x00, tiny and huge scales (products overflowing to Inf, products in
// fp32 subnormals) and NaN: value * 2^(s-127) rounded once to fp32 (and then to bf16).
TEST(MxFormats, ExhaustiveDecodeThroughApiAllScales) {
  const uint8_t scales[] = {0x7f, 0x00, 0x01, 0x09, 0x20, 0x70, 0x80, 0xf0, 0xfc, 0xfe, 0xff};
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    const int ncodes = 1 << s.bits;
    const int n = std::max(ncodes, 32);
    std::vector<uint8_t> codes(n);
    for (int i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(i % ncodes);
    mxt::Mx m;
    m.elems.resize(qj::mx::split_elem_bytes(f, n));
    for (int b = 0; b < n / 32; ++b) qj::mx::pack_block(f, codes.data() + 32 * b, m.elems.data() + f.block_bytes * b);
    for (uint8_t sc : scales) {
      m.scales.assign(n / 32, sc);
      std::vector<float> want(n);
      std::vector<uint16_t> want16(n);
      for (int i = 0; i < n; ++i) {
        want[i] = sc == 0xff ? NAN : static_cast<float>(rule_value(s, codes[i]) * std::pow(2.0, sc - 127));
        want16[i] = qj::f32_to_bf16(want[i]);
      }
      for (qj_isa isa : qjt::supported_isas()) {
        qjt::IsaCap cap(isa);
        std::vector<float> got = mxt::dequantize(s.t, m, n);
        const int64_t d = mxt::first_diff(got, want);
        EXPECT_EQ(d, -1) << f.name << " scale " << int(sc) << " " << qj_isa_name(isa) << " code "
                         << (d >= 0 ? codes[d] : 0) << " got " << (d >= 0 ? got[d] : 0) << " want "
                         << (d >= 0 ? want[d] : 0);
        std::vector<uint16_t> got16(n);
        ASSERT_EQ(qj_mx_dequantize_ex(s.t, m.elems.data(), m.scales.data(), n, QJ_BF16, got16.data()), QJ_OK);
        for (int i = 0; i < n; ++i) {
          const float a = qj::bf16_to_f32(got16[i]), b = qj::bf16_to_f32(want16[i]);
          if (!mxt::same_bits(a, b)) {
            ADD_FAILURE() << f.name << " bf16 scale " << int(sc) << " " << qj_isa_name(isa) << " i " << i;
            break;
          }
        }
      }
    }
  }
}

TEST(MxFormats, IntegerFormTables) {
  const Spec& fp4 = kSpecs[4];
  const Spec& e2m3 = kSpecs[3];
  const Spec& e3m2 = kSpecs[2];
  int mx4 = 0, mx6 = 0, mx62 = 0;
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(qj::mx::fp4_int_table()[c], 2 * rule_value(fp4, c)) << c;
    mx4 = std::max(mx4, std::abs(int(qj::mx::fp4_int_table()[c])));
  }
  for (int c = 0; c < 64; ++c) {
    EXPECT_EQ(qj::mx::e2m3_int_table()[c], 8 * rule_value(e2m3, c)) << c;
    EXPECT_EQ(qj::mx::e3m2_int_table()[c], 16 * rule_value(e3m2, c)) << c;
    mx6 = std::max(mx6, std::abs(int(qj::mx::e2m3_int_table()[c])));
    mx62 = std::max(mx62, std::abs(int(qj::mx::e3m2_int_table()[c])));
  }
  EXPECT_EQ(mx4, 12);
  EXPECT_EQ(mx6, 60);
  EXPECT_EQ(mx62, 448);
  // ggml's kvalues_mxfp4 (MX.md section 1.2).
  const int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(qj::mx::fp4_int_table()[c], kv[c]);
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    if (f.int_shift < 0) continue;
    for (int c = 0; c < (1 << s.bits); ++c) {
      const double v = std::ldexp(rule_value(s, c), f.int_shift);
      EXPECT_EQ(v, std::nearbyint(v)) << f.name << " code " << c << " is not an integer in integer form";
    }
  }
}

// Element rounding at every boundary of the grid: grid points, midpoints (ties go to the even
// code), one fp32 ulp either side of each midpoint, beyond the max (saturation), below the
// smallest subnormal, fp32 subnormals; both signs. Checked against the expectation derived here
// and against both implementations (src/formats integer codec, src/ref double codec).
TEST(MxFormats, EncodeAtEveryGridBoundary) {
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    std::vector<std::pair<double, int>> grid;  // nonnegative finite values and their codes
    const int half = 1 << (s.bits - 1);
    for (int c = 0; c < (s.t == QJ_MXINT8 ? 128 : half); ++c) {
      const double v = rule_value(s, c);
      if (std::isfinite(v)) grid.push_back({v, c});
    }
    std::sort(grid.begin(), grid.end());
    struct Case {
      float y;
      int code;  // magnitude code
    };
    std::vector<Case> cases;
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
      const auto [lo, clo] = grid[i];
      const auto [hi, chi] = grid[i + 1];
      const float mid = static_cast<float>((lo + hi) / 2);
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);  // exact in fp32
      cases.push_back({static_cast<float>(lo), clo});
      cases.push_back({static_cast<float>(hi), chi});
      cases.push_back({mid, (clo % 2 == 0) ? clo : chi});
      cases.push_back({std::nextafter(mid, 0.0f), clo});
      cases.push_back({std::nextafter(mid, INFINITY), chi});
    }
    const float maxv = static_cast<float>(s.max);
    for (float y : {maxv, std::nextafter(maxv, INFINITY), maxv * 1.5f, maxv * 2, 1e30f, FLT_MAX})
      cases.push_back({y, static_cast<int>(f.max_code)});
    const float minsub = static_cast<float>(grid[1].first);
    cases.push_back({minsub / 2, 0});                                  // tie -> 0 (even)
    cases.push_back({std::nextafter(minsub / 2, INFINITY), grid[1].second});
    cases.push_back({qj::bits_f32(1), 0});                             // fp32 subnormals
    cases.push_back({qj::bits_f32(0x007fffff), 0});
    cases.push_back({FLT_MIN, 0});
    for (const Case& c : cases) {
      for (int neg = 0; neg < 2; ++neg) {
        const float y = neg ? -c.y : c.y;
        int want;
        if (s.t == QJ_MXINT8) want = static_cast<uint8_t>(neg ? -c.code : c.code);
        else want = (neg ? half : 0) | c.code;
        EXPECT_EQ(int(qj::mx::encode_elem(f, y)), want) << f.name << " y=" << y;
        EXPECT_EQ(int(qj::ref::mx_encode(s.t, y, 0x7f)), want) << f.name << " y=" << y << " (ref)";
      }
    }
    // Codes never hit E4M3's NaN pattern nor E5M2's Inf/NaN, nor INT8's -128.
    for (float y : {464.0f, 479.0f, 480.0f, -1e9f, 61440.0f, -2.0f, -1.9999f})
      EXPECT_TRUE(std::isfinite(qj::mx::decode_elem(f, qj::mx::encode_elem(f, y))));
    if (s.t == QJ_MXINT8) EXPECT_NE(qj::mx::encode_elem(f, -100.0f), 0x80);
  }
}

// Random element-domain values over a wide range: integer codec == double codec.
TEST(MxFormats, EncodeRandomMatchesReference) {
  std::mt19937 g(1234);
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    std::uniform_int_distribution<uint32_t> mant(0, 0x7fffff);
    std::uniform_int_distribution<int> ex(127 - 40, 127 + s.emax + 3);
    std::uniform_int_distribution<int> sign(0, 1);
    for (int i = 0; i < 60000; ++i) {
      const float y = qj::bits_f32(static_cast<uint32_t>(sign(g)) << 31 | static_cast<uint32_t>(ex(g)) << 23 | mant(g));
      ASSERT_EQ(int(qj::mx::encode_elem(f, y)), int(qj::ref::mx_encode(s.t, y, 0x7f))) << f.name << " y=" << y;
    }
  }
}

// Scale rules (FLOOR and RCEIL) from bits == the double reference, over every exponent field and
// mantissas around the element's max (the RCEIL threshold), plus named edge cases.
TEST(MxFormats, ScaleRulesMatchReference) {
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    const uint32_t mm = qj::f32_bits(f.max_value) & 0x7fffff;
    for (uint32_t e = 0; e <= 254; ++e) {
      for (uint32_t m : {0u, 1u, mm - 1, mm, mm + 1, 0x400000u, 0x7fffffu}) {
        if (m > 0x7fffff) continue;
        const uint32_t bits = e << 23 | m;
        if (bits == 0) continue;
        const float v[1] = {qj::bits_f32(bits)};
        for (qj_rounding r : {QJ_ROUND_FLOOR, QJ_ROUND_RCEIL}) {
          ASSERT_EQ(int(qj::mx::scale_from_amax(f, bits, r)), int(qj::ref::mx_block_scale(s.t, r, v, 1)))
              << f.name << " amax bits " << std::hex << bits << " r " << r;
        }
      }
    }
  }
  const qj::mx::ElemFormat& i8 = *qj::mx::format(QJ_MXINT8);
  // RCEIL with a subnormal amax: 127 * 2^-133 fits X = 2^-127, one ulp more needs 2^-126.
  EXPECT_EQ(qj::mx::scale_from_amax(i8, 0x007f0000u, QJ_ROUND_RCEIL), 0);
  EXPECT_EQ(qj::mx::scale_from_amax(i8, 0x007f0001u, QJ_ROUND_RCEIL), 1);
  EXPECT_EQ(qj::mx::scale_from_amax(i8, 0x007f0001u, QJ_ROUND_FLOOR), 0);
  // The top: RCEIL cannot go past 2^(127 - emax) (max * X stays finite), the element saturates.
  EXPECT_EQ(qj::mx::scale_from_amax(i8, qj::f32_bits(FLT_MAX), QJ_ROUND_RCEIL), 0xfe);
  EXPECT_EQ(qj::mx::scale_from_amax(i8, qj::f32_bits(FLT_MAX), QJ_ROUND_FLOOR), 0xfe);
  for (const Spec& sp : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(sp.t);
    for (qj_rounding r : {QJ_ROUND_FLOOR, QJ_ROUND_RCEIL}) {
      const uint8_t b = qj::mx::scale_from_amax(f, qj::f32_bits(FLT_MAX), r);
      EXPECT_EQ(b, 254 - sp.emax) << f.name;
      EXPECT_TRUE(std::isfinite(static_cast<float>(sp.max) * std::ldexp(1.0f, b - 127))) << f.name;
      EXPECT_TRUE(std::isfinite(qj::mx::mul_pow2(f.max_value, b - 127))) << f.name;
    }
  }
  // FP4, amax 1.9 * 2^127: RCEIL would want X = 2^126 (3.8 -> 4 -> 2^128 = Inf on decode).
  EXPECT_EQ(qj::mx::scale_from_amax(*qj::mx::format(QJ_MXFP4_E2M1), qj::f32_bits(1.9f * std::ldexp(1.0f, 127)),
                                    QJ_ROUND_RCEIL), 252);
  // NaN / Inf.
  for (qj_rounding r : {QJ_ROUND_FLOOR, QJ_ROUND_RCEIL}) {
    EXPECT_EQ(qj::mx::scale_from_amax(i8, 0x7f800000u, r), 0xff);
    EXPECT_EQ(qj::mx::scale_from_amax(i8, 0x7fc00000u, r), 0xff);
    EXPECT_EQ(qj::mx::scale_from_amax(i8, 0, r), 0x00);
  }
  EXPECT_EQ(qj::mx::e8m0_to_f32(0x00), std::ldexp(1.0f, -127));
  EXPECT_EQ(qj::f32_bits(qj::mx::e8m0_to_f32(0x00)), 0x00400000u);
  EXPECT_EQ(qj::mx::e8m0_to_f32(0xfe), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(qj::mx::e8m0_to_f32(0xff)));
  for (int b = 0; b <= 254; ++b)
    EXPECT_EQ(static_cast<double>(qj::mx::e8m0_inverse_f32(static_cast<uint8_t>(b))), std::ldexp(1.0, 127 - b));
}

// mul_pow2 is an fp32 multiply by an exact power of two, done on the bits: compare it with the
// hardware multiply (default MXCSR here) over normal, subnormal, huge and tiny inputs and shifts
// that produce overflow, gradual underflow and total underflow.
TEST(MxFormats, MulPow2IsTheIeeeProduct) {
  std::mt19937 g(77);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  std::uniform_int_distribution<int> kd(-300, 300);
  auto pow2 = [](int k, double* d) { *d = std::ldexp(1.0, k); };
  for (int i = 0; i < 400000; ++i) {
    float v = qj::bits_f32(bits(g));
    if (i % 4 == 0) v = qj::bits_f32(bits(g) & 0x807fffffu);  // subnormal inputs
    const int k = i % 2 ? kd(g) : kd(g) / 10;
    double p;
    pow2(k, &p);
    // double product of exact operands, rounded once to float: the IEEE fp32 result.
    const float want = static_cast<float>(static_cast<double>(v) * p);
    const float got = qj::mx::mul_pow2(v, k);
    ASSERT_TRUE(mxt::same_bits(got, want)) << std::hex << qj::f32_bits(v) << std::dec << " k " << k
                                           << " got " << got << " want " << want;
  }
}

// The scalar codecs give the same bytes and floats under FTZ | DAZ | round-toward-zero.
TEST(MxFormats, ScalarCodecsIgnoreMxcsr) {
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    std::mt19937 g(3);
    std::uniform_int_distribution<uint32_t> bits(0, 0x7f7fffffu);
    for (int rep = 0; rep < 300; ++rep) {
      float v[32];
      for (float& x : v) x = qj::bits_f32(bits(g) >> (rep % 3 == 0 ? 8 : 0)) * (rep % 2 ? -1.0f : 1.0f);
      uint8_t c0[32], c1[32];
      float d0[32], d1[32];
      const uint8_t s0 = qj::mx::quantize_block(f, QJ_ROUND_FLOOR, v, 32, c0);
      qj::mx::dequantize_block(f, c0, s0, d0);
      const unsigned saved = _mm_getcsr();
      _mm_setcsr(saved | 0x8040u | 0x6000u);
      const uint8_t s1 = qj::mx::quantize_block(f, QJ_ROUND_FLOOR, v, 32, c1);
      qj::mx::dequantize_block(f, c1, s1, d1);
      _mm_setcsr(saved);
      ASSERT_EQ(s0, s1) << f.name;
      ASSERT_EQ(0, std::memcmp(c0, c1, 32)) << f.name;
      for (int i = 0; i < 32; ++i) ASSERT_TRUE(mxt::same_bits(d0[i], d1[i])) << f.name << " " << i;
    }
  }
}

TEST(MxFormats, SplitPackingRoundTrip) {
  for (const Spec& s : kSpecs) {
    const qj::mx::ElemFormat& f = *qj::mx::format(s.t);
    for (uint32_t seed = 0; seed < 50; ++seed) {
      auto c = qjt::random_ints<uint8_t>(32, 0, (1 << s.bits) - 1, seed);
      std::vector<uint8_t> packed(f.block_bytes), back(32);
      qj::mx::pack_block(f, c.data(), packed.data());
      qj::mx::unpack_block(f, packed.data(), back.data());
      ASSERT_EQ(back, c) << f.name;
      for (int i = 0; i < 32; ++i) ASSERT_EQ(qj::mx::get_code(f, packed.data(), i), c[i]) << f.name << " " << i;
      if (s.bits == 6) {  // LSB-first bit stream, checked bit by bit
        for (int i = 0; i < 32; ++i)
          for (int k = 0; k < 6; ++k)
            ASSERT_EQ((packed[(6 * i + k) / 8] >> ((6 * i + k) % 8)) & 1, (c[i] >> k) & 1);
      }
      if (s.bits == 4)
        for (int j = 0; j < 16; ++j) ASSERT_EQ(packed[j], c[2 * j] | c[2 * j + 1] << 4);
    }
  }
}

TEST(MxFormats, ForeignLayoutsRoundTrip) {
  for (int64_t n : {1, 17, 31, 32, 33, 100, 1024}) {
    auto v = qjt::random_floats(n, -10, 10, static_cast<uint32_t>(n));
    mxt::Mx m = mxt::quantize(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, v);
    for (qj_mx_layout l : {QJ_MX_LAYOUT_GGML_MXFP4, QJ_MX_LAYOUT_FBGEMM_MX4}) {
      size_t bytes = 0, sb = 1;
      ASSERT_EQ(qj_mx_storage_size(l, QJ_MXFP4_E2M1, n, &bytes, &sb), QJ_OK);
      EXPECT_EQ(bytes, static_cast<size_t>(17 * ((n + 31) / 32)));
      EXPECT_EQ(sb, 0u);
      std::vector<uint8_t> foreign(bytes);
      ASSERT_EQ(qj_mx_export(l, QJ_MXFP4_E2M1, m.elems.data(), m.scales.data(), n, foreign.data()), QJ_OK);
      // Check the foreign bytes element by element against the layout's definition.
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = i / 32, j = i % 32;
        const uint8_t c = qj::mx::get_code(*qj::mx::format(QJ_MXFP4_E2M1), m.elems.data(), i);
        uint8_t got;
        if (l == QJ_MX_LAYOUT_GGML_MXFP4) {
          ASSERT_EQ(foreign[17 * b], m.scales[b]);
          got = j < 16 ? foreign[17 * b + 1 + j] & 0xf : foreign[17 * b + 1 + j - 16] >> 4;
        } else {
          ASSERT_EQ(foreign[17 * b + 16], m.scales[b]);
          got = (foreign[17 * b + j / 2] >> (4 * (j % 2))) & 0xf;
        }
        ASSERT_EQ(got, c) << "n " << n << " i " << i;
      }
      mxt::Mx back;
      back.elems.assign(m.elems.size(), 0xee);
      back.scales.assign(m.scales.size(), 0xee);
      ASSERT_EQ(qj_mx_import(l, QJ_MXFP4_E2M1, foreign.data(), n, back.elems.data(), back.scales.data()), QJ_OK);
      EXPECT_EQ(back.elems, m.elems);
      EXPECT_EQ(back.scales, m.scales);
      // Import zeroes whatever a foreign block holds past n.
      std::vector<uint8_t> noisy = foreign;
      if (n % 32) {
        // Garbage in every padding nibble of the last block.
        const int64_t b = (n - 1) / 32;
        for (int64_t j = n % 32; j < 32; ++j) {
          if (l == QJ_MX_LAYOUT_GGML_MXFP4) noisy[17 * b + 1 + j % 16] |= j < 16 ? 0x0b : 0xb0;
          else noisy[17 * b + j / 2] |= j % 2 ? 0xb0 : 0x0b;
        }
        ASSERT_EQ(qj_mx_import(l, QJ_MXFP4_E2M1, noisy.data(), n, back.elems.data(), back.scales.data()), QJ_OK);
        EXPECT_EQ(back.elems, m.elems) << "padding not zeroed, n " << n;
      }
    }
  }
}

// ---- BDR ----

TEST(BdrFormats, PackUnpackRoundTrip) {
  for (qj_dtype t : mxt::bdr_types()) {
    const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
    EXPECT_EQ(f.block_bytes, 2 + 2 * (f.m + 1));
    for (uint32_t seed = 0; seed < 100; ++seed) {
      qj::bdr::Fields a{};
      auto c = qjt::random_ints<uint8_t>(16, 0, (1 << (f.m + 1)) - 1, seed);
      a.e = static_cast<uint8_t>(seed * 7);
      a.mu = static_cast<uint8_t>(seed * 13);
      std::copy(c.begin(), c.end(), a.code);
      std::vector<uint8_t> p(f.block_bytes);
      qj::bdr::pack(f, a, p.data());
      qj::bdr::Fields b;
      qj::bdr::unpack(f, p.data(), &b);
      ASSERT_EQ(b.e, a.e);
      ASSERT_EQ(b.mu, a.mu);
      for (int i = 0; i < 16; ++i) {
        ASSERT_EQ(b.code[i], a.code[i]);
        for (int k = 0; k <= f.m; ++k)  // LSB-first stream from byte 2
          ASSERT_EQ((p[2 + ((f.m + 1) * i + k) / 8] >> (((f.m + 1) * i + k) % 8)) & 1, (a.code[i] >> k) & 1);
      }
    }
  }
}

// A value with a given biased exponent field (0 = zero) and random mantissa.
float with_exponent(int e, std::mt19937& g) {
  if (e <= 0) return 0.0f;
  std::uniform_int_distribution<uint32_t> m(0, 0x7fffff), s(0, 1);
  return qj::bits_f32(s(g) << 31 | static_cast<uint32_t>(e) << 23 | m(g));
}

// Pairs on both sides of the microexponent rule: (E, E-1) -> 0, (E-1, E-1) -> 1, (E-1, far) -> 1,
// (0, 0) -> 1 when E > 0; an all-subnormal block (E = 0) -> 0.
TEST(BdrFormats, MicroexponentRule) {
  std::mt19937 g(99);
  for (qj_dtype t : mxt::bdr_types()) {
    const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
    const int E = 130;
    const int pair_exps[8][2] = {{E, E - 1}, {E - 1, E - 1}, {E - 1, E - 20}, {0, 0},
                                 {E - 2, E}, {E - 1, 0}, {E - 5, E - 6}, {E, E}};
    const int want_mu[8] = {0, 1, 1, 1, 0, 1, 1, 0};
    for (int rep = 0; rep < 20; ++rep) {
      float v[16];
      for (int j = 0; j < 8; ++j)
        for (int k = 0; k < 2; ++k) v[2 * j + k] = with_exponent(pair_exps[j][k], g);
      qj::bdr::Fields fl;
      qj::bdr::quantize_fields(f, v, 16, &fl);
      EXPECT_EQ(fl.e, E);
      for (int j = 0; j < 8; ++j) EXPECT_EQ((fl.mu >> j) & 1, want_mu[j]) << "pair " << j;
      // Same bytes as the reference, and the decoded error is within half a step of the pair.
      std::vector<uint8_t> a(f.block_bytes), b(f.block_bytes);
      qj::bdr::pack(f, fl, a.data());
      qj::ref::bdr_quantize(t, v, 16, b.data());
      EXPECT_EQ(mxt::hex(a), mxt::hex(b));
      float out[16];
      qj::bdr::dequantize_fields(f, fl, out);
      for (int i = 0; i < 16; ++i) {
        const double step = std::ldexp(1.0, qj::bdr::step_exp(f, fl, i / 2));
        const double maxv = step * ((1 << f.m) - 1);
        // Saturated values are clamped to (2^m - 1) steps; the others are within half a step.
        EXPECT_LE(std::fabs(out[i] - std::fmin(std::fabs(v[i]), maxv) * (v[i] < 0 ? -1 : 1)), step / 2)
            << qj_dtype_name(t) << " i " << i;
      }
    }
    // All subnormal: E = 0, every mu = 0.
    float sub[16];
    for (int i = 0; i < 16; ++i) sub[i] = qj::bits_f32(static_cast<uint32_t>(i * 0x40000 + 1));
    qj::bdr::Fields fl;
    qj::bdr::quantize_fields(f, sub, 16, &fl);
    EXPECT_EQ(fl.e, 0);
    EXPECT_EQ(fl.mu, 0);
    std::vector<uint8_t> a(f.block_bytes), b(f.block_bytes);
    qj::bdr::pack(f, fl, a.data());
    qj::ref::bdr_quantize(t, sub, 16, b.data());
    EXPECT_EQ(mxt::hex(a), mxt::hex(b));
  }
}

TEST(BdrFormats, RandomBlocksMatchReference) {
  std::mt19937 g(7);
  std::uniform_int_distribution<int> ed(-3, 0), base(1, 254), kind(0, 9);
  for (qj_dtype t : mxt::bdr_types()) {
    const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
    for (int rep = 0; rep < 3000; ++rep) {
      const int E = base(g);
      float v[16];
      for (int i = 0; i < 16; ++i) {
        const int k = kind(g);
        v[i] = k == 0 ? 0.0f : k == 1 ? qj::bits_f32(static_cast<uint32_t>(g()) & 0x807fffffu)  // subnormal
                                      : with_exponent(std::max(0, E + ed(g)), g);
      }
      std::vector<uint8_t> a(f.block_bytes), b(f.block_bytes);
      qj::bdr::quantize_block(f, v, 16, a.data());
      qj::ref::bdr_quantize(t, v, 16, b.data());
      ASSERT_EQ(mxt::hex(a), mxt::hex(b)) << qj_dtype_name(t) << " rep " << rep;
      std::vector<float> x(16), y(16);
      qj::bdr::dequantize_block(f, a.data(), x.data());
      qj::ref::bdr_dequantize(t, a.data(), 16, y.data());
      ASSERT_EQ(mxt::first_diff(x, y), -1);
    }
  }
}

TEST(BdrFormats, DotMatchesDecodedSum) {
  // bdr_dot is exact per block; with one block its result is the fp32 rounding of the exact sum of
  // the decoded products (computed here in double, exact for these magnitudes).
  for (qj_dtype t : mxt::bdr_types()) {
    const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
    for (uint32_t seed = 0; seed < 50; ++seed) {
      auto x = qjt::random_floats(16, -3, 3, seed), y = qjt::random_floats(16, -1, 1, seed + 100);
      std::vector<uint8_t> a(f.block_bytes), b(f.block_bytes);
      qj::ref::bdr_quantize(t, x.data(), 16, a.data());
      qj::ref::bdr_quantize(t, y.data(), 16, b.data());
      std::vector<float> dx(16), dy(16);
      qj::ref::bdr_dequantize(t, a.data(), 16, dx.data());
      qj::ref::bdr_dequantize(t, b.data(), 16, dy.data());
      double s = 0;
      for (int i = 0; i < 16; ++i) s += static_cast<double>(dx[i]) * dy[i];
      EXPECT_EQ(qj::ref::bdr_dot(t, a.data(), b.data(), 16), static_cast<float>(s));
    }
  }
}

// ---- the MX dot reference against the integer-form tables ----

TEST(MxFormats, DotReferenceMatchesIntegerForms) {
  // FP4 x FP4 and E2M3 x INT8 with random codes and scales: per block an exact integer sum times a
  // power of two, accumulated in fp32 in block order; MX.md section 5 spelled out with the tables.
  std::mt19937 g(5);
  std::uniform_int_distribution<int> sd(0x70, 0x8f);
  for (int rep = 0; rep < 200; ++rep) {
    const int k = 32 * 4 + rep % 40;
    const int nb = (k + 31) / 32;
    auto ca = qjt::random_ints<uint8_t>(nb * 32, 0, 15, rep), cb = qjt::random_ints<uint8_t>(nb * 32, 0, 15, rep + 1);
    auto ce = qjt::random_ints<uint8_t>(nb * 32, 0, 63, rep + 2), ci = qjt::random_ints<uint8_t>(nb * 32, 0, 255, rep + 3);
    std::vector<uint8_t> sa(nb), sb(nb);
    for (int b = 0; b < nb; ++b) sa[b] = static_cast<uint8_t>(sd(g)), sb[b] = static_cast<uint8_t>(sd(g));
    auto pack = [&](qj_dtype t, const std::vector<uint8_t>& c) {
      const qj::mx::ElemFormat& f = *qj::mx::format(t);
      std::vector<uint8_t> e(f.block_bytes * nb);
      for (int b = 0; b < nb; ++b) qj::mx::pack_block(f, c.data() + 32 * b, e.data() + f.block_bytes * b);
      return e;
    };
    float want44 = 0, want_e2i8 = 0;
    for (int b = 0; b < nb; ++b) {
      int s44 = 0, se = 0;
      for (int i = 32 * b; i < std::min(k, 32 * b + 32); ++i) {
        s44 += qj::mx::fp4_int_table()[ca[i]] * qj::mx::fp4_int_table()[cb[i]];
        se += qj::mx::e2m3_int_table()[ce[i]] * static_cast<int8_t>(ci[i]);
      }
      want44 += std::ldexp(static_cast<float>(s44), sa[b] + sb[b] - 254 - 2);
      want_e2i8 += std::ldexp(static_cast<float>(se), sa[b] + sb[b] - 254 - 3 - 6);
    }
    auto a4 = pack(QJ_MXFP4_E2M1, ca), b4 = pack(QJ_MXFP4_E2M1, cb);
    auto e6 = pack(QJ_MXFP6_E2M3, ce), i8 = pack(QJ_MXINT8, ci);
    EXPECT_EQ(qj::ref::mx_dot(QJ_MXFP4_E2M1, a4.data(), sa.data(), QJ_MXFP4_E2M1, b4.data(), sb.data(), k), want44);
    EXPECT_EQ(qj::ref::mx_dot(QJ_MXFP6_E2M3, e6.data(), sa.data(), QJ_MXINT8, i8.data(), sb.data(), k), want_e2i8);
  }
}

}  // namespace
