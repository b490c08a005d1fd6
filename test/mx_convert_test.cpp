// Vectorized MX / BDR conversions (src/ops/mx_convert*) at every ISA tier this CPU supports,
// against the double-precision reference (src/ref/mx_ref): random blocks over the whole fp32
// range, ties, blocks that clamp, tiny/subnormal blocks, NaN/Inf/zero blocks, every tail length,
// fp32 and bf16 on both sides. Integer results, so the comparison is bit for bit.
// Also: exact output sizes (no byte written past the documented size), and independence from the
// caller's MXCSR (FTZ/DAZ and rounding mode).
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>

#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ops/mx_convert.h"
#include "src/ref/mx_ref.h"
#include "test/mx_test_util.h"
#include "test/test_util.h"

namespace {

enum class Gen { kUniform, kPerBlockMagnitude, kTies, kSpecials, kTinyAndHuge };
const Gen kGens[] = {Gen::kUniform, Gen::kPerBlockMagnitude, Gen::kTies, Gen::kSpecials, Gen::kTinyAndHuge};
const char* gen_name(Gen g) {
  switch (g) {
    case Gen::kUniform: return "uniform";
    case Gen::kPerBlockMagnitude: return "per-block-magnitude";
    case Gen::kTies: return "ties";
    case Gen::kSpecials: return "specials";
    case Gen::kTinyAndHuge: return "tiny-and-huge";
  }
  return "?";
}

float rand_bits(std::mt19937& g, int emin, int emax) {
  std::uniform_int_distribution<int> e(emin, emax);
  std::uniform_int_distribution<uint32_t> m(0, 0x7fffff), s(0, 1);
  return qj::bits_f32(s(g) << 31 | static_cast<uint32_t>(e(g)) << 23 | m(g));
}

// Values for element type t (the grid matters for kTies), block size bs.
std::vector<float> make_data(Gen gen, qj_dtype t, int64_t n, uint32_t seed, int bs = 32) {
  std::mt19937 g(seed);
  std::vector<float> v(n);
  std::uniform_int_distribution<int> pick(0, 99);
  switch (gen) {
    case Gen::kUniform: {
      std::uniform_real_distribution<float> d(-3.0f, 3.0f);
      for (auto& x : v) x = d(g);
      break;
    }
    case Gen::kPerBlockMagnitude: {
      // Each block lives around its own binade, anywhere in the normal fp32 range.
      for (int64_t b = 0; b < n; b += bs) {
        std::uniform_int_distribution<int> base(8, 250);
        const int e = base(g);
        for (int64_t i = b; i < std::min(n, b + bs); ++i) v[i] = rand_bits(g, std::max(1, e - 12), e);
      }
      break;
    }
    case Gen::kTies: {
      // Exact grid values and midpoints of the element grid under a random power-of-two scale.
      if (const qj::mx::ElemFormat* f = qj::mx::format(t)) {
        const float* tab = qj::mx::value_table(t);
        std::uniform_int_distribution<int> code(0, (1 << f->bits) - 1), sc(-20, 20);
        for (int64_t b = 0; b < n; b += bs) {
          const float x = std::ldexp(1.0f, sc(g));
          for (int64_t i = b; i < std::min(n, b + bs); ++i) {
            float a = tab[code(g)], c = tab[code(g)];
            if (!std::isfinite(a) || !std::isfinite(c)) a = c = 1.0f;
            v[i] = (pick(g) < 50 ? a : (a + c) / 2) * x;
          }
        }
      } else {  // BDR: integers and half-integers times a power of two
        std::uniform_int_distribution<int> k(-300, 300), sc(-20, 20);
        for (auto& x : v) x = std::ldexp(static_cast<float>(k(g)) / 2, sc(g));
      }
      break;
    }
    case Gen::kSpecials: {
      const float sp[] = {std::numeric_limits<float>::quiet_NaN(), qj::bits_f32(0xffa00001u),
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
      std::uniform_real_distribution<float> d(-100.0f, 100.0f);
      for (int64_t b = 0; b < n; b += bs) {
        const int kind = pick(g) % 4;  // 0: NaN/Inf inside, 1: all zero (signed), 2: plain, 3: max at tail
        for (int64_t i = b; i < std::min(n, b + bs); ++i) v[i] = kind == 1 ? (pick(g) < 50 ? 0.0f : -0.0f) : d(g);
        if (kind == 0) v[std::min(n - 1, b + pick(g) % bs)] = sp[pick(g) % 4];
        if (kind == 3) v[std::min(n, b + bs) - 1] = 1000.0f;
      }
      break;
    }
    case Gen::kTinyAndHuge: {
      for (int64_t b = 0; b < n; b += bs) {
        const int kind = pick(g) % 4;
        for (int64_t i = b; i < std::min(n, b + bs); ++i) {
          if (kind == 0) v[i] = qj::bits_f32(static_cast<uint32_t>(g()) & 0x807fffffu);  // fp32 subnormals
          else if (kind == 1) v[i] = rand_bits(g, 1, 12);                                 // tiny normals
          else if (kind == 2) v[i] = rand_bits(g, 240, 254);                              // huge
          else v[i] = pick(g) < 10 ? (pick(g) < 50 ? FLT_MAX : -FLT_MAX) : rand_bits(g, 250, 254);
        }
      }
      break;
    }
  }
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = qj::f32_to_bf16(v[i]);
  return h;
}
std::vector<float> widen(const std::vector<uint16_t>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = qj::bf16_to_f32(h[i]);
  return v;
}

const int64_t kSizes[] = {1, 5, 31, 32, 33, 64, 95, 1000, 4096 + 17};
constexpr uint8_t kGuard = 0xa5;

// Quantize through qj_mx_quantize_ex with guard bytes after both outputs; checks the guards.
mxt::Mx api_quantize(qj_dtype t, qj_rounding r, qj_dtype src_type, const void* src, int64_t n) {
  size_t eb = 0, sb = 0;
  EXPECT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, t, n, &eb, &sb), QJ_OK);
  mxt::Mx m;
  m.elems.assign(eb + 64, kGuard);
  m.scales.assign(sb + 64, kGuard);
  EXPECT_EQ(qj_mx_quantize_ex(t, r, src_type, src, n, m.elems.data(), sb ? m.scales.data() : nullptr), QJ_OK)
      << qj_last_error();
  for (size_t i = eb; i < eb + 64; ++i) EXPECT_EQ(m.elems[i], kGuard) << "elems overrun at " << i;
  for (size_t i = sb; i < sb + 64; ++i) EXPECT_EQ(m.scales[i], kGuard) << "scales overrun at " << i;
  m.elems.resize(eb);
  m.scales.resize(sb);
  return m;
}

class MxConvert : public ::testing::TestWithParam<qj_dtype> {};

TEST_P(MxConvert, QuantizeMatchesReferenceAtEveryIsa) {
  const qj_dtype t = GetParam();
  const qj::mx::ElemFormat& f = *qj::mx::format(t);
  uint32_t seed = 1;
  for (Gen gen : kGens) {
    for (int64_t n : kSizes) {
      const std::vector<float> v = make_data(gen, t, n, seed++);
      const std::vector<uint16_t> h = to_bf16(v);
      const std::vector<float> hv = widen(h);
      for (qj_rounding r : {QJ_ROUND_FLOOR, QJ_ROUND_RCEIL}) {
        mxt::Mx want, want_h;
        want.elems.resize(qj::mx::split_elem_bytes(f, n));
        want.scales.resize(qj::mx::num_blocks(n));
        want_h = want;
        qj::ref::mx_quantize(t, r, v.data(), n, want.elems.data(), want.scales.data());
        qj::ref::mx_quantize(t, r, hv.data(), n, want_h.elems.data(), want_h.scales.data());
        std::vector<float> want_d(n);
        qj::ref::mx_dequantize(t, want.elems.data(), want.scales.data(), n, want_d.data());
        for (qj_isa isa : qjt::supported_isas()) {
          qjt::IsaCap cap(isa);
          const std::string where = std::string(f.name) + " " + gen_name(gen) + " n=" + std::to_string(n) +
                                    " r=" + std::to_string(r) + " isa=" + qj_isa_name(isa);
          // The tier asked for is the tier that runs (no silent scalar path), for quantize and
          // dequantize, fp32 and bf16.
          for (bool deq : {false, true})
            for (bool bf16 : {false, true})
              EXPECT_EQ(qj::mx_convert_isa(t, deq, bf16), isa >= QJ_ISA_AVX512 ? QJ_ISA_AVX512 : isa)
                  << where << (deq ? " dequantize" : " quantize") << (bf16 ? " bf16" : " f32");
          mxt::Mx got = api_quantize(t, r, QJ_F32, v.data(), n);
          ASSERT_EQ(mxt::first_diff(got.scales, want.scales), -1) << where;
          const int64_t d = mxt::first_diff(got.elems, want.elems);
          ASSERT_EQ(d, -1) << where << " byte " << d;
          mxt::Mx got_h = api_quantize(t, r, QJ_BF16, h.data(), n);
          ASSERT_EQ(mxt::first_diff(got_h.scales, want_h.scales), -1) << where << " bf16";
          ASSERT_EQ(mxt::first_diff(got_h.elems, want_h.elems), -1) << where << " bf16";
          // Decode: fp32 bit for bit, bf16 = RNE of the fp32 result; with a guard after dst.
          std::vector<float> out(n + 16, 7.0f);
          ASSERT_EQ(qj_mx_dequantize(t, got.elems.data(), got.scales.data(), n, out.data()), QJ_OK);
          for (int k = 0; k < 16; ++k) ASSERT_EQ(out[n + k], 7.0f) << where << " dst overrun";
          out.resize(n);
          const int64_t dd = mxt::first_diff(out, want_d);
          ASSERT_EQ(dd, -1) << where << " decode at " << dd << ": " << out[dd] << " vs " << want_d[dd];
          std::vector<uint16_t> out16(n + 16, 0x1234);
          ASSERT_EQ(qj_mx_dequantize_ex(t, got.elems.data(), got.scales.data(), n, QJ_BF16, out16.data()), QJ_OK);
          for (int k = 0; k < 16; ++k) ASSERT_EQ(out16[n + k], 0x1234) << where << " bf16 dst overrun";
          for (int64_t i = 0; i < n; ++i)
            ASSERT_TRUE(mxt::same_bits(qj::bf16_to_f32(out16[i]), qj::bf16_to_f32(qj::f32_to_bf16(want_d[i]))))
                << where << " bf16 decode at " << i;
        }
      }
    }
  }
}

// Arbitrary bytes (every code, scales 0x00 / 0xFE / 0xFF among them) decode as the reference says.
TEST_P(MxConvert, DecodeRandomBytesMatchesReference) {
  const qj_dtype t = GetParam();
  const qj::mx::ElemFormat& f = *qj::mx::format(t);
  for (int64_t n : {32, 33, 1000, 4096 + 5}) {
    mxt::Mx m;
    m.elems = qjt::random_ints<uint8_t>(qj::mx::split_elem_bytes(f, n), 0, 255, static_cast<uint32_t>(n));
    m.scales = qjt::random_ints<uint8_t>(qj::mx::num_blocks(n), 0, 255, static_cast<uint32_t>(n) + 1);
    m.scales[0] = 0x00;
    if (m.scales.size() > 2) m.scales[1] = 0xfe, m.scales[2] = 0xff;
    std::vector<float> want(n);
    qj::ref::mx_dequantize(t, m.elems.data(), m.scales.data(), n, want.data());
    for (qj_isa isa : qjt::supported_isas()) {
      qjt::IsaCap cap(isa);
      std::vector<float> got = mxt::dequantize(t, m, n);
      const int64_t d = mxt::first_diff(got, want);
      ASSERT_EQ(d, -1) << f.name << " n=" << n << " isa=" << qj_isa_name(isa) << " at " << d;
    }
  }
}

// Every code (blocks of all the type's codes, under scales 127, 0, 0xf0 and the NaN scale),
// dequantized to fp32 and bf16: the same bits at every tier, NaN payloads and signs included.
TEST_P(MxConvert, EveryCodeSameBitsAtEveryTier) {
  const qj_dtype t = GetParam();
  const qj::mx::ElemFormat& f = *qj::mx::format(t);
  const int64_t n = 256 * 4;
  std::vector<uint8_t> codes(n);
  for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(i & ((1 << f.bits) - 1));
  mxt::Mx m;
  m.elems.assign(qj::mx::split_elem_bytes(f, n), 0);
  for (int64_t b = 0; b < n / 32; ++b) qj::mx::pack_block(f, codes.data() + 32 * b, m.elems.data() + b * f.block_bytes);
  m.scales.resize(qj::mx::num_blocks(n));
  const uint8_t round_scale[4] = {127, 0, 0xf0, 0xff};  // each round of the 256 codes under one scale
  for (size_t b = 0; b < m.scales.size(); ++b) m.scales[b] = round_scale[(b * 32 / 256) % 4];
  std::vector<uint32_t> want32;
  std::vector<uint16_t> want16;
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    std::vector<float> d(n);
    std::vector<uint16_t> h(n);
    ASSERT_EQ(qj_mx_dequantize(t, m.elems.data(), m.scales.data(), n, d.data()), QJ_OK) << qj_last_error();
    ASSERT_EQ(qj_mx_dequantize_ex(t, m.elems.data(), m.scales.data(), n, QJ_BF16, h.data()), QJ_OK) << qj_last_error();
    std::vector<uint32_t> u(n);
    for (int64_t i = 0; i < n; ++i) u[i] = qj::f32_bits(d[i]);
    if (want32.empty()) {
      want32 = u;
      want16 = h;
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(u[i], want32[i]) << f.name << " code 0x" << std::hex << int{codes[i]} << " scale 0x"
                                 << int{m.scales[i / 32]} << " at " << qj_isa_name(isa);
      ASSERT_EQ(h[i], want16[i]) << f.name << " bf16, code 0x" << std::hex << int{codes[i]} << " at "
                                 << qj_isa_name(isa);
    }
  }
}

// Tail blocks: the padding codes are 0 and the padding does not change the scale.
TEST_P(MxConvert, TailPaddedWithZeros) {
  const qj_dtype t = GetParam();
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (int64_t n = 1; n < 64; ++n) {
      std::vector<float> v = make_data(Gen::kUniform, t, n, static_cast<uint32_t>(n));
      for (auto& x : v) x = -std::fabs(x) - 0.5f;  // all negative: a padded +0 is visible
      mxt::Mx m = api_quantize(t, QJ_ROUND_FLOOR, QJ_F32, v.data(), n);
      std::vector<float> padded = v;
      padded.resize(qj::mx::num_blocks(n) * 32, 0.0f);
      mxt::Mx p = api_quantize(t, QJ_ROUND_FLOOR, QJ_F32, padded.data(), static_cast<int64_t>(padded.size()));
      ASSERT_EQ(m.elems, p.elems) << "n=" << n;
      ASSERT_EQ(m.scales, p.scales) << "n=" << n;
      auto c = mxt::codes(t, m.elems, static_cast<int64_t>(padded.size()));
      for (size_t i = n; i < padded.size(); ++i) ASSERT_EQ(c[i], 0) << "n=" << n << " i=" << i;
    }
  }
}

// Round trips at every tier. Decoded values are representable, so quantizing them again gives
// the same values (both scale rules) and, under FLOOR, the same bytes: the block maximum keeps its
// binade after rounding, so the scale cannot move. (RCEIL may pick half the scale when the
// maximum rounded down to max/2; the values still come back.) And values already on the element
// grid times a power of two pass through quantize -> dequantize unchanged.
TEST_P(MxConvert, RoundTrips) {
  const qj_dtype t = GetParam();
  const int64_t n = 32 * 64 + 9;
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (Gen gen : kGens) {
      const std::vector<float> v = make_data(gen, t, n, 77);
      for (qj_rounding r : {QJ_ROUND_FLOOR, QJ_ROUND_RCEIL}) {
        const std::string where = std::string(qj_dtype_name(t)) + " " + gen_name(gen) + " r=" +
                                  std::to_string(r) + " isa=" + qj_isa_name(isa);
        mxt::Mx q1 = api_quantize(t, r, QJ_F32, v.data(), n);
        const std::vector<float> d1 = mxt::dequantize(t, q1, n);
        mxt::Mx q2 = api_quantize(t, r, QJ_F32, d1.data(), n);
        const std::vector<float> d2 = mxt::dequantize(t, q2, n);
        ASSERT_EQ(mxt::first_diff(d1, d2), -1) << where;
        if (r == QJ_ROUND_FLOOR) {
          ASSERT_EQ(q1.elems, q2.elems) << where;
          ASSERT_EQ(q1.scales, q2.scales) << where;
        }
      }
    }
    // Grid values: every block = random codes times 2^k, one element being +-max_value * 2^k so
    // that X = 2^k (k keeps the block away from the scale clamps). MXINT8's -128 is left out: it
    // decodes, but a block holding -2 X is quantized with scale 2X.
    const qj::mx::ElemFormat& f = *qj::mx::format(t);
    const float* tab = qj::mx::value_table(t);
    std::mt19937 g(5);
    std::uniform_int_distribution<int> code(0, (1 << f.bits) - 1), kd(-100, 100), pos(0, 31);
    std::vector<float> v(n);
    for (int64_t b = 0; b < n; b += 32) {
      const int k = kd(g);
      for (int64_t i = b; i < std::min(n, b + 32); ++i) {
        const int c = code(g);
        float x = tab[c];
        if (!std::isfinite(x) || (f.is_int && c == 0x80)) x = 0.0f;
        v[i] = std::ldexp(x, k);
      }
      v[std::min(n - 1, b + pos(g))] = std::ldexp(pos(g) % 2 ? f.max_value : -f.max_value, k);
    }
    mxt::Mx q = api_quantize(t, QJ_ROUND_FLOOR, QJ_F32, v.data(), n);
    const std::vector<float> d = mxt::dequantize(t, q, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(d[i], v[i]) << qj_dtype_name(t) << " " << qj_isa_name(isa) << " i " << i;
  }
}

// The result does not depend on the caller's MXCSR (FTZ, DAZ, round toward zero), and the
// caller's MXCSR is restored.
TEST_P(MxConvert, IndependentOfCallerMxcsr) {
  const qj_dtype t = GetParam();
  const int64_t n = 2048 + 7;
  std::vector<float> v = make_data(Gen::kTinyAndHuge, t, n, 3);
  const std::vector<float> v2 = make_data(Gen::kTies, t, n, 4);
  v.insert(v.end(), v2.begin(), v2.end());
  const int64_t nn = static_cast<int64_t>(v.size());
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    mxt::Mx want = api_quantize(t, QJ_ROUND_FLOOR, QJ_F32, v.data(), nn);
    std::vector<float> want_d = mxt::dequantize(t, want, nn);
    const unsigned saved = _mm_getcsr();
    const unsigned odd = (saved & ~0x6000u) | 0x8040u | 0x6000u;  // FTZ | DAZ | round toward zero
    _mm_setcsr(odd);
    mxt::Mx got = api_quantize(t, QJ_ROUND_FLOOR, QJ_F32, v.data(), nn);
    std::vector<float> got_d(nn);
    const qj_status st = qj_mx_dequantize(t, got.elems.data(), got.scales.data(), nn, got_d.data());
    const unsigned after = _mm_getcsr();
    _mm_setcsr(saved);
    ASSERT_EQ(st, QJ_OK);
    EXPECT_EQ(after & ~0x3fu, odd & ~0x3fu) << "MXCSR not restored";  // ignore sticky flags
    EXPECT_EQ(got.elems, want.elems) << qj_isa_name(isa);
    EXPECT_EQ(got.scales, want.scales) << qj_isa_name(isa);
    EXPECT_EQ(mxt::first_diff(got_d, want_d), -1) << qj_isa_name(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MxConvert,
                         ::testing::Values(QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP6_E3M2, QJ_MXFP6_E2M3,
                                           QJ_MXFP4_E2M1, QJ_MXINT8),
                         [](const ::testing::TestParamInfo<qj_dtype>& i) {
                           return std::string(qj_dtype_name(i.param));
                         });

// ---- BDR ----

class BdrConvert : public ::testing::TestWithParam<qj_dtype> {};

TEST_P(BdrConvert, MatchesReferenceAtEveryIsa) {
  const qj_dtype t = GetParam();
  const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
  uint32_t seed = 100;
  for (Gen gen : kGens) {
    for (int64_t n : kSizes) {
      const std::vector<float> v = make_data(gen, t, n, seed++, 16);
      const std::vector<uint16_t> h = to_bf16(v);
      const std::vector<float> hv = widen(h);
      const size_t bytes = qj::bdr::storage_bytes(f, n);
      std::vector<uint8_t> want(bytes), want_h(bytes);
      qj::ref::bdr_quantize(t, v.data(), n, want.data());
      qj::ref::bdr_quantize(t, hv.data(), n, want_h.data());
      std::vector<float> want_d(n);
      qj::ref::bdr_dequantize(t, want.data(), n, want_d.data());
      for (qj_isa isa : qjt::supported_isas()) {
        qjt::IsaCap cap(isa);
        const std::string where = std::string(f.name) + " " + gen_name(gen) + " n=" + std::to_string(n) +
                                  " isa=" + qj_isa_name(isa);
        for (bool deq : {false, true})
          for (bool bf16 : {false, true})
            EXPECT_EQ(qj::mx_convert_isa(t, deq, bf16), isa >= QJ_ISA_AVX512 ? QJ_ISA_AVX512 : isa)
                << where << (deq ? " dequantize" : " quantize") << (bf16 ? " bf16" : " f32");
        for (int src16 = 0; src16 < 2; ++src16) {
          std::vector<uint8_t> got(bytes + 32, kGuard);
          ASSERT_EQ(qj_mx_quantize_ex(t, QJ_ROUND_FLOOR, src16 ? QJ_BF16 : QJ_F32,
                                      src16 ? static_cast<const void*>(h.data()) : v.data(), n, got.data(), nullptr),
                    QJ_OK)
              << qj_last_error();
          for (size_t i = bytes; i < bytes + 32; ++i) ASSERT_EQ(got[i], kGuard) << where << " overrun";
          got.resize(bytes);
          const int64_t d = mxt::first_diff(got, src16 ? want_h : want);
          ASSERT_EQ(d, -1) << where << (src16 ? " bf16" : "") << " byte " << d;
        }
        std::vector<float> out(n);
        ASSERT_EQ(qj_mx_dequantize(t, want.data(), nullptr, n, out.data()), QJ_OK);
        const int64_t dd = mxt::first_diff(out, want_d);
        ASSERT_EQ(dd, -1) << where << " decode at " << dd;
        std::vector<uint16_t> out16(n);
        ASSERT_EQ(qj_mx_dequantize_ex(t, want.data(), nullptr, n, QJ_BF16, out16.data()), QJ_OK);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(mxt::same_bits(qj::bf16_to_f32(out16[i]), qj::bf16_to_f32(qj::f32_to_bf16(want_d[i]))))
              << where << " bf16 decode at " << i;
      }
    }
  }
}

// Every block exponent E = 0..254, four blocks each: one value of exponent field E, the others
// from E - 30 up (fp32 subnormals for E < 30), and in every other block half-step ties of the
// block's grid. The vector paths change method at small E (the AVX2 tier pre-scales blocks below
// E = M), so both sides of every such edge are here.
TEST_P(BdrConvert, EveryBlockExponentMatchesReference) {
  const qj_dtype t = GetParam();
  const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
  std::mt19937 g(77);
  std::vector<float> v;
  for (int e = 0; e <= 254; ++e) {
    for (int rep = 0; rep < 4; ++rep) {
      for (int i = 0; i < 16; ++i) {
        float x = rand_bits(g, std::max(0, e - 30), e);
        // Ties: odd multiples of half the grid step 2^(E - 126 - mu - m), for mu = 0 or 1, where
        // fp32 holds them.
        const int half = e - 127 - f.m - static_cast<int>(g() % 2);
        if (rep % 2 == 1 && i % 3 == 0 && half >= -149)
          x = std::ldexp(static_cast<float>(2 * static_cast<int>(g() % (1u << f.m)) + 1), half);
        v.push_back(x);
      }
      v[v.size() - 16 + g() % 16] = rand_bits(g, e, e);
    }
  }
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<uint8_t> want(qj::bdr::storage_bytes(f, n));
  qj::ref::bdr_quantize(t, v.data(), n, want.data());
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    std::vector<uint8_t> got(want.size());
    ASSERT_EQ(qj_mx_quantize(t, QJ_ROUND_FLOOR, v.data(), n, got.data(), nullptr), QJ_OK) << qj_last_error();
    const int64_t d = mxt::first_diff(got, want);
    ASSERT_EQ(d, -1) << f.name << " " << qj_isa_name(isa) << " byte " << d << " (block exponent "
                     << d / f.block_bytes / 4 << ")";
  }
}

// Decoded BDR values are representable: quantizing them again gives the same values.
TEST_P(BdrConvert, RoundTrip) {
  const qj_dtype t = GetParam();
  const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
  const int64_t n = 16 * 100 + 3;
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (Gen gen : kGens) {
      const std::vector<float> v = make_data(gen, t, n, 9, 16);
      std::vector<uint8_t> q1(qj::bdr::storage_bytes(f, n)), q2(q1.size());
      std::vector<float> d1(n), d2(n);
      ASSERT_EQ(qj_mx_quantize(t, QJ_ROUND_FLOOR, v.data(), n, q1.data(), nullptr), QJ_OK);
      ASSERT_EQ(qj_mx_dequantize(t, q1.data(), nullptr, n, d1.data()), QJ_OK);
      ASSERT_EQ(qj_mx_quantize(t, QJ_ROUND_FLOOR, d1.data(), n, q2.data(), nullptr), QJ_OK);
      ASSERT_EQ(qj_mx_dequantize(t, q2.data(), nullptr, n, d2.data()), QJ_OK);
      ASSERT_EQ(mxt::first_diff(d1, d2), -1) << f.name << " " << gen_name(gen) << " " << qj_isa_name(isa);
    }
  }
}

TEST_P(BdrConvert, DecodeRandomBytesMatchesReference) {
  const qj_dtype t = GetParam();
  const qj::bdr::BdrFormat& f = *qj::bdr::format(t);
  for (int64_t n : {16, 17, 1000}) {
    auto blocks = qjt::random_ints<uint8_t>(qj::bdr::storage_bytes(f, n), 0, 255, static_cast<uint32_t>(n));
    blocks[0] = 0xff;  // a NaN block
    if (n > 16) blocks[f.block_bytes] = 0x00;  // E = 0 (smallest steps)
    std::vector<float> want(n);
    qj::ref::bdr_dequantize(t, blocks.data(), n, want.data());
    for (qj_isa isa : qjt::supported_isas()) {
      qjt::IsaCap cap(isa);
      std::vector<float> got(n);
      ASSERT_EQ(qj_mx_dequantize(t, blocks.data(), nullptr, n, got.data()), QJ_OK);
      ASSERT_EQ(mxt::first_diff(got, want), -1) << f.name << " n=" << n << " " << qj_isa_name(isa);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BdrConvert, ::testing::Values(QJ_BDR_MX9, QJ_BDR_MX6, QJ_BDR_MX4),
                         [](const ::testing::TestParamInfo<qj_dtype>& i) {
                           return std::string(qj_dtype_name(i.param));
                         });

}  // namespace
