// The INT8 GEMM against src/ref, bit for bit, at every ISA tier this CPU supports (the scalar tier
// runs the reference fallback through the same driver and C API).
//
// Sweeps cover each dimension's edge values against a representative of the others (M around the
// register tile MR of the ISA and shape, N around the panel width NR, K around the 4-byte K group
// and the scale groups, every output type and epilogue option, every A type, both layouts, odd
// leading dimensions, partitions), FBGEMM's own test shapes, and a seeded random sample of
// combinations. run_gemm_case (test/gemm_case.cpp) compares the whole output buffer, padding
// included, so a write outside the m x n result is caught too.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "src/core/isa.h"
#include "src/formats/half.h"
#include "src/ops/gemm.h"
#include "src/ops/int_weights.h"
#include "src/ref/gemm_ref.h"
#include "test/gemm_case.h"
#include "test/test_util.h"

namespace {

using qjt::GemmCase;

#define EXPECT_CASE(c) EXPECT_EQ(qjt::run_gemm_case(c), "") << (c).str()

class GemmInt8 : public ::testing::TestWithParam<qj_isa> {
 protected:
  void SetUp() override { cap_ = std::make_unique<qjt::IsaCap>(GetParam()); }
  // Keeps the process-wide cache small between sweeps (no plan is alive here).
  void TearDown() override {
    cap_.reset();
    qj_cache_clear();
  }
  qj_isa isa() const { return GetParam(); }
  // The register tile rows the driver uses for this ISA and shape (the scalar tier has no tiles:
  // 4 is as good as any value there).
  int mr(int64_t n, int64_t k, bool grouped) const {
    if (isa() == QJ_ISA_SCALAR) return 4;
    const int nr = qj::weights_nr(isa(), n), kg = qj::weights_kg(isa());
    const int64_t kp = (k + kg - 1) / kg * kg, panels = (n + nr - 1) / nr;
    return qj::choose_blocking(isa(), nr, grouped, kp, panels, kg).mr;
  }
  // M values around the tile: 1, 2, 3, MR-1, MR, MR+1, 2MR+1 and larger ones.
  std::vector<int64_t> m_values(int64_t n, int64_t k, bool grouped, std::vector<int64_t> extra) const {
    const int r = mr(n, k, grouped);
    std::set<int64_t> s{1, 2, 3, r - 1, r, r + 1, 2 * r + 1};
    for (int64_t x : extra) s.insert(x);
    s.erase(0);
    return {s.begin(), s.end()};
  }

 private:
  std::unique_ptr<qjt::IsaCap> cap_;
};

const qj_dtype kOutTypes[] = {QJ_U8, QJ_S8, QJ_S32, QJ_F32, QJ_BF16};

// A case with the output type set and its options made legal (S32 takes no bias or ReLU; group
// scales need a float stage).
GemmCase with_out(GemmCase c, qj_dtype ct) {
  c.c_type = ct;
  if (ct == QJ_S32) {
    c.bias = false;
    c.relu = false;
    if (c.gran == QJ_GRAN_GROUP && c.group != c.k) c.c_type = QJ_F32;
    if (c.a_type == QJ_F32 || c.a_type == QJ_BF16) c.c_type = QJ_F32;
  }
  if (c.c_type != QJ_F32) c.beta = 0.0f;
  return c;
}

// --- M: around the register tile, for plain, grouped and tensor scales ----------------------------
TEST_P(GemmInt8, MTails) {
  struct Shape {
    int64_t n, k;
    qj_granularity gran;
    int64_t group;
  };
  const Shape shapes[] = {{37, 70, QJ_GRAN_CHANNEL, 0},
                          {16, 64, QJ_GRAN_GROUP, 32},
                          {100, 128, QJ_GRAN_GROUP, 64},
                          {8, 33, QJ_GRAN_TENSOR, 0},
                          {48, 64, QJ_GRAN_CHANNEL, 0}};
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    const bool grouped = s.gran == QJ_GRAN_GROUP;
    for (int64_t m : m_values(s.n, s.k, grouped, {97, 256})) {
      GemmCase c;
      c.m = m;
      c.n = s.n;
      c.k = s.k;
      c.gran = s.gran;
      c.group = s.group;
      c.seed = ++seed;
      c.b_zp = (m & 1) != 0;
      c.a_type = (m % 3 == 0) ? QJ_S8 : QJ_U8;
      for (qj_dtype ct : {QJ_U8, QJ_F32, QJ_S32}) EXPECT_CASE(with_out(c, ct));
    }
  }
}

// --- N: every tail of every panel width (AVX2 8/16, AVX-512 16/32/48), for each output type ------
TEST_P(GemmInt8, NTails) {
  uint32_t seed = 200;
  for (int64_t n = 1; n <= 97; ++n) {
    GemmCase c;
    c.n = n;
    c.k = 37;
    c.m = mr(n, c.k, false) + 1;
    c.seed = ++seed;
    c.b_zp = (n % 3) == 0;
    c.relu = (n % 4) == 1;
    c.ldc_pad = n % 2;
    EXPECT_CASE(with_out(c, kOutTypes[n % 5]));
    // Same tail, the neighbouring output type: every store width sees many tails.
    EXPECT_CASE(with_out(c, kOutTypes[(n + 2) % 5]));
  }
  for (int64_t n : {1, 15, 16, 17, 31, 33, 47, 49, 257}) {
    for (qj_dtype ct : kOutTypes) {
      GemmCase c;
      c.n = n;
      c.k = 64;
      c.m = mr(n, c.k, false) + 2;
      c.seed = ++seed;
      EXPECT_CASE(with_out(c, ct));
      c.gran = QJ_GRAN_GROUP;  // grouped accumulation has its own tail stores
      c.group = 32;
      c.m = mr(n, c.k, true) + 1;
      c.b_zp = true;
      EXPECT_CASE(with_out(c, ct));
    }
  }
}

// --- The s8 GEMV over weights of about L2 size: each call starts half of L2 of panels before the
// last one started and reads forward, wrapping around (gemm.cpp gemv_rotate_panels); each call's
// output is the reference's, bit for bit, from every start, with a partial last panel, per-channel
// and per-group scales, bias and ReLU. ------------------------------------------------------------
TEST_P(GemmInt8, GemvRotatingStart) {
  // About twice L2 of packed panels (where the start rotates), at the tier's bytes a weight (two
  // for the s16 pairs of the AVX-512 tier, else one), and a tail panel.
  const int64_t k = 2048, bpw = qj::weights_layout(isa(), QJ_S8) == qj::PackLayout::kPair16 ? 2 : 1;
  const int64_t n = static_cast<int64_t>(2 * qj::l2_cache_bytes()) / (k * bpw) - 7;
  std::mt19937 g(4242);
  std::vector<int8_t> wq(k * n);
  for (auto& v : wq) v = static_cast<int8_t>(static_cast<int>(g() % 256) - 128);
  std::vector<uint8_t> a(k);
  for (auto& v : a) v = static_cast<uint8_t>(g());
  std::vector<float> bias(n);
  for (auto& v : bias) v = static_cast<float>(static_cast<int>(g() % 2001) - 1000) * 0.05f;
  for (qj_granularity gran : {QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
    const int64_t group = 128;
    std::vector<float> scales(gran == QJ_GRAN_GROUP ? n * (k / group) : n);
    for (auto& v : scales) v = 0.0005f + static_cast<float>(g() % 1000) * 1e-6f;
    qj_weights_desc wd{};
    wd.dtype = QJ_S8;
    wd.k = k;
    wd.n = n;
    wd.granularity = gran;
    wd.group_size = gran == QJ_GRAN_GROUP ? group : 0;
    wd.scales = scales.data();
    std::shared_ptr<qj::PackedWeights> w;
    ASSERT_EQ(qj::pack_int_weights(wd, wq.data(), n, isa(), &w), QJ_OK) << qj_last_error();
    qj::ref::IntWeights rw;
    rw.k = k;
    rw.n = n;
    rw.gran = gran;
    rw.group_size = wd.group_size;
    rw.scales = scales;
    rw.q.assign(wq.begin(), wq.end());
    for (qj_dtype ct : {QJ_U8, QJ_F32}) {
      qj_gemm_desc d{};
      d.a_type = QJ_U8;
      d.a_scale = 0.05f;
      d.a_zero_point = 131;
      d.c_type = ct;
      d.c_scale = ct == QJ_U8 ? 0.7f : 1.0f;
      d.c_zero_point = ct == QJ_U8 ? 100 : 0;
      d.bias = bias.data();
      d.activation = ct == QJ_F32 ? QJ_ACT_RELU : QJ_ACT_NONE;
      std::unique_ptr<qj::GemmPlan> p;
      ASSERT_EQ(qj::gemm_plan_create(d, w, &p), QJ_OK) << qj_last_error();
      // (The GEMV paths the rule applies to: u8 A in place on the VNNI tier, widened to s16 pairs
      // below it; the scalar tier runs the reference.)
      if (isa() != QJ_ISA_SCALAR && gran == QJ_GRAN_CHANNEL) {
        EXPECT_TRUE(p->gemv_direct);
        const size_t bytes = static_cast<size_t>(w->n_panels) * w->panel_bytes(), l2 = qj::l2_cache_bytes();
        EXPECT_EQ(p->gemv_rotate_panels > 0, 4 * bytes >= 3 * l2 && bytes <= 4 * l2) << "L2 " << l2;
        // half of L2: with 1 MiB, four 128 KiB panels at the VNNI tier (64 columns of quads) and
        // the AVX-512 tier (32 columns of s16 pairs), sixteen 32 KiB panels of the AVX2 tier's
        // byte pairs
        const int64_t panel = static_cast<int64_t>(w->panel_bytes());
        if (p->gemv_rotate_panels > 0)
          EXPECT_EQ(p->gemv_rotate_panels, std::max<int64_t>(1, static_cast<int64_t>(l2 / 2) / panel)) << "panel " << panel;
      }
      const size_t ob = ct == QJ_U8 ? 1 : 4;
      std::vector<uint8_t> ref(n * ob);
      qj::ref::gemm_int(d, rw, 1, a.data(), k, ref.data(), n);
      // every start: the calls go round the panels (np / gcd(np, rotation) starts) at least once
      const int64_t np = w->n_panels, rot = std::max<int64_t>(p->gemv_rotate_panels, 1);
      const int64_t calls = np / std::gcd(np, rot) + 1;
      for (int call = 0; call < calls; ++call) {
        std::vector<uint8_t> c(n * ob, static_cast<uint8_t>(0xA5 + call));
        ASSERT_EQ(qj::gemm_run(*p, 1, a.data(), k, c.data(), n, 0, 1), QJ_OK) << qj_last_error();
        EXPECT_EQ(0, std::memcmp(c.data(), ref.data(), c.size()))
            << "call " << call << " gran " << gran << " c " << qj_dtype_name(ct) << " isa " << qj_isa_name(isa());
      }
    }
  }
}

// --- The AVX2 tier's one-row pair form (two panels of byte pairs a pass; gemm.cpp, one_row_pairs):
// which plans get it, and exact results for odd and even panel counts, a tail panel, one panel,
// both quantization granularities (group scales keep the one-panel kernel), and partitions
// whose slices start on odd panels. -----------------------------------------------------------
TEST_P(GemmInt8, GemvPairForm) {
  for (int64_t n : {8, 32, 40, 48, 80, 100}) {
    for (qj_granularity gran : {QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
      const int64_t k = 64;
      std::vector<float> scales(gran == QJ_GRAN_GROUP ? 2 * n : n, 0.01f);
      qj_weights_desc wd{};
      wd.dtype = QJ_S8;
      wd.k = k;
      wd.n = n;
      wd.granularity = gran;
      wd.group_size = gran == QJ_GRAN_GROUP ? 32 : 0;
      wd.scales = scales.data();
      std::vector<int8_t> wq(k * n, 1);
      std::shared_ptr<qj::PackedWeights> w;
      ASSERT_EQ(qj::pack_int_weights(wd, wq.data(), n, isa(), &w), QJ_OK) << qj_last_error();
      qj_gemm_desc d{};
      d.a_type = QJ_U8;
      d.a_scale = 0.05f;
      d.c_type = QJ_F32;
      d.c_scale = 1.0f;
      std::unique_ptr<qj::GemmPlan> p;
      ASSERT_EQ(qj::gemm_plan_create(d, w, &p), QJ_OK) << qj_last_error();
      const bool want = isa() == QJ_ISA_AVX2 && w->n_panels >= 2 && gran != QJ_GRAN_GROUP;
      EXPECT_EQ(static_cast<bool>(p->pair), want) << "n " << n << " gran " << gran;
      if (p->pair) EXPECT_NE(p->pair.name().find("_pair"), std::string::npos) << p->pair.name();
    }
  }
  uint32_t seed = 950;
  for (int64_t n : {16, 32, 40, 48, 80, 100, 257}) {
    for (int threads : {1, 3}) {
      GemmCase c;
      c.m = 1;
      c.n = n;
      c.k = n % 3 ? 131 : 64;
      c.a_type = n % 2 ? QJ_S8 : QJ_U8;
      c.values = n % 2 ? qjt::kExtremes : qjt::kRandom;
      c.threads = threads;
      c.seed = ++seed;
      for (qj_dtype ct : {QJ_U8, QJ_F32, QJ_S32}) EXPECT_CASE(with_out(c, ct));
      c.gran = QJ_GRAN_GROUP;
      c.group = 32;
      c.k = 128;
      EXPECT_CASE(with_out(c, QJ_F32));
    }
  }
}

// One row on the pair tiers (AVX-512 without VNNI, AVX2): the GEMV path that widens u8 or s8
// A into pairs in scratch and calls the kernel directly (GemmPlan::gemv_widen_a). K on both sides
// of the pair and of the 8-pair vector step, padded lda, extreme values, weight zero points (which
// keep the tile loop), every output type.
TEST_P(GemmInt8, GemvWidenedA) {
  const bool pairs = isa() != QJ_ISA_SCALAR && qj::weights_kg(isa()) == 2;
  for (qj_dtype at : {QJ_U8, QJ_S8}) {
    for (bool b_zp : {false, true}) for (int64_t k : {32, 33}) {
      std::vector<float> scales(8, 0.01f);
      qj_weights_desc wd{};
      wd.dtype = QJ_S8;
      wd.k = k;
      wd.n = 8;
      wd.granularity = QJ_GRAN_CHANNEL;
      wd.scales = scales.data();
      std::vector<int8_t> wq(wd.k * wd.n, 1);
      std::vector<int32_t> zps(8, 3);
      if (b_zp) wd.zero_points = zps.data();
      std::shared_ptr<qj::PackedWeights> w;
      ASSERT_EQ(qj::pack_int_weights(wd, wq.data(), wd.n, isa(), &w), QJ_OK) << qj_last_error();
      qj_gemm_desc d{};
      d.a_type = at;
      d.a_scale = 0.05f;
      d.a_zero_point = at == QJ_U8 ? 7 : 0;
      d.c_type = QJ_F32;
      d.c_scale = 1.0f;
      std::unique_ptr<qj::GemmPlan> p;
      ASSERT_EQ(qj::gemm_plan_create(d, w, &p), QJ_OK) << qj_last_error();
      EXPECT_EQ(p->gemv_widen_a, pairs && !b_zp) << qj_dtype_name(at) << " b_zp " << b_zp << " k " << k;
      // (The VNNI tier runs u8 A in place only when K fills its quads: at K = 32, not 33.)
      const bool in_place = isa() == QJ_ISA_AVX512_VNNI && at == QJ_U8 && !b_zp && k % 4 == 0;
      EXPECT_EQ(p->gemv_direct, p->gemv_widen_a || in_place) << qj_dtype_name(at) << " b_zp " << b_zp << " k " << k;
    }
  }
  uint32_t seed = 900;
  for (int64_t k : {1, 2, 3, 15, 16, 17, 31, 33, 127, 128, 130, 513}) {
    for (qj_dtype at : {QJ_U8, QJ_S8}) {
      GemmCase c;
      c.m = 1;
      c.n = 45;
      c.k = k;
      c.a_type = at;
      c.lda_pad = k % 3;
      c.values = k % 2 ? qjt::kExtremes : qjt::kRandom;
      c.seed = ++seed;
      for (qj_dtype ct : {QJ_U8, QJ_S8, QJ_F32, QJ_BF16, QJ_S32}) EXPECT_CASE(with_out(c, ct));
      c.b_zp = true;
      EXPECT_CASE(with_out(c, QJ_F32));
    }
  }
}

// --- K: both sides of the 4-byte group, of powers of two, and K = 1 ---------------------------------
TEST_P(GemmInt8, KTails) {
  const int64_t ks[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65,
                        127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025};
  uint32_t seed = 300;
  for (int64_t k : ks) {
    GemmCase c;
    c.k = k;
    c.n = 37;
    // m = 1 and 2 use the dual-accumulator kernels (odd and even K-group counts); m = 1 with u8 A,
    // K % 4 == 0 and no weight zero point is the GEMV path that reads A in place.
    c.m = 1;
    c.seed = ++seed;
    EXPECT_CASE(with_out(c, QJ_U8));
    c.m = 2;
    c.a_type = QJ_S8;
    c.b_zp = true;
    c.seed = ++seed;
    EXPECT_CASE(with_out(c, QJ_F32));
    c.m = mr(c.n, k, false) + 1;
    c.a_type = QJ_U8;
    c.gran = QJ_GRAN_TENSOR;
    c.seed = ++seed;
    EXPECT_CASE(with_out(c, QJ_S32));
    c.b_zp = false;
    c.gran = QJ_GRAN_CHANNEL;
    c.a_type = QJ_F32;
    c.n = 16;
    c.m = mr(c.n, k, false);
    c.seed = ++seed;
    EXPECT_CASE(with_out(c, QJ_BF16));
  }
}

// --- Group scales: G in {4, 32, 64, 128, K}, K tails of groups, with and without zero points -------
TEST_P(GemmInt8, GroupScales) {
  struct G {
    int64_t k, group;
  };
  const G gs[] = {{128, 32}, {128, 64}, {128, 128}, {256, 32}, {256, 64}, {256, 128}, {384, 128},
                  {512, 64}, {96, 32},  {72, 36},   {16, 4},   {40, 8},   {70, 70},   {37, 37},
                  {1, 1},    {3, 3},    {513, 513}, {64, 4}};
  uint32_t seed = 400;
  int i = 0;
  for (const G& g : gs) {
    for (int64_t n : {16, 37, 100}) {
      ++i;
      GemmCase c;
      c.k = g.k;
      c.n = n;
      c.gran = QJ_GRAN_GROUP;
      c.group = g.group;
      const bool grouped = g.group != g.k;
      c.m = (i % 3 == 0) ? 1 : mr(n, g.k, grouped) + (i % 2);
      c.b_zp = (i % 2) == 0;
      c.a_type = (i % 4 == 0) ? QJ_S8 : (i % 4 == 1) ? QJ_F32 : QJ_U8;
      c.relu = (i % 5) == 0;
      c.seed = ++seed;
      EXPECT_CASE(with_out(c, kOutTypes[i % 5]));
    }
  }
}

// --- Zero points of A and B: none, typical and the extremes of their ranges ------------------------
TEST_P(GemmInt8, ZeroPoints) {
  uint32_t seed = 500;
  const int32_t za_u8[] = {0, 1, 128, 254, 255}, za_s8[] = {-128, -1, 0, 1, 127};
  const int32_t zb[] = {GemmCase::kAuto, -128, 127, 0, 1};
  for (qj_granularity gran : {QJ_GRAN_TENSOR, QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
    for (int i = 0; i < 5; ++i) {
      for (qj_dtype at : {QJ_U8, QJ_S8}) {
        GemmCase c;
        c.a_type = at;
        c.a_zp_val = at == QJ_U8 ? za_u8[i] : za_s8[i];
        c.b_zp = true;
        c.b_zp_val = zb[(i + (at == QJ_S8)) % 5];  // 0 for all: the library drops the zero points
        c.gran = gran;
        c.group = gran == QJ_GRAN_GROUP ? 32 : 0;
        c.k = 96;
        c.n = 37;
        c.m = mr(c.n, c.k, gran == QJ_GRAN_GROUP) + 1;
        c.seed = ++seed;
        c.values = (i % 2) ? qjt::kExtremes : qjt::kRandom;
        EXPECT_CASE(with_out(c, gran == QJ_GRAN_GROUP ? QJ_F32 : QJ_S32));
        EXPECT_CASE(with_out(c, QJ_U8));
        c.b_zp = false;  // A zero point alone
        c.m = 1;
        EXPECT_CASE(with_out(c, QJ_S8));
      }
    }
  }
}

// --- The largest exact int32 sums: K = 33025 with every product at +-255*255 ----------------------
TEST_P(GemmInt8, ExtremeAccumulation) {
  struct E {
    qj_dtype at;
    int values;
    int32_t za;
  };
  const E es[] = {{QJ_U8, qjt::kMaxPos, 0}, {QJ_U8, qjt::kMaxNeg, 255},
                  {QJ_S8, qjt::kMaxPos, -128}, {QJ_S8, qjt::kMaxNeg, 127}};
  for (const E& e : es) {
    for (int64_t k : {33025, 4097}) {
      GemmCase c;
      c.a_type = e.at;
      c.values = e.values;
      c.a_zp_val = e.za;
      c.b_zp = true;
      c.b_zp_val = -128;
      c.k = k;
      c.n = 17;
      c.m = 2;
      c.gran = QJ_GRAN_TENSOR;
      EXPECT_CASE(with_out(c, QJ_S32));
      EXPECT_CASE(with_out(c, QJ_F32));
      c.m = mr(c.n, c.k, false) + 1;
      c.gran = QJ_GRAN_CHANNEL;
      EXPECT_CASE(with_out(c, QJ_U8));
      EXPECT_CASE(with_out(c, QJ_S32));
    }
  }
  // Every product at the extremes, random signs (sums far from the int32 limit but every
  // vpmaddwd pair / vpdpbusd quad at its largest magnitude).
  for (int64_t k : {4, 64, 1024}) {
    for (qj_dtype at : {QJ_U8, QJ_S8, QJ_F32, QJ_BF16}) {
      GemmCase c;
      c.a_type = at;
      c.values = qjt::kExtremes;
      c.k = k;
      c.n = 33;
      c.m = 5;
      c.b_zp = true;
      EXPECT_CASE(with_out(c, QJ_S32));
      EXPECT_CASE(with_out(c, QJ_S8));
    }
  }
}

// --- Output stage: every output type, bias, ReLU, zero points, saturation, ties, beta -------------
TEST_P(GemmInt8, OutputStage) {
  uint32_t seed = 600;
  for (qj_dtype ct : {QJ_U8, QJ_S8}) {
    const int32_t zcs[] = {ct == QJ_U8 ? 0 : -128, ct == QJ_U8 ? 100 : -3, ct == QJ_U8 ? 255 : 127};
    for (int32_t zc : zcs)
      for (bool bias : {false, true})
        for (bool relu : {false, true})
          for (float cs : {0.7f, 0.01f, 500.0f}) {  // typical, saturating, mostly near zero
            GemmCase c;
            c.c_type = ct;
            c.c_zp = zc;
            c.c_scale = cs;
            c.bias = bias;
            c.relu = relu;
            c.k = 70;
            c.n = 37;
            c.m = mr(c.n, c.k, false) + 1;
            c.b_zp = relu;
            c.seed = ++seed;
            EXPECT_CASE(c);
          }
  }
  // Round-half-to-even: y = acc / 2 exactly, so every odd sum is a tie.
  for (qj_dtype ct : {QJ_U8, QJ_S8}) {
    for (int64_t k : {1, 3, 64}) {
      GemmCase c;
      c.c_type = ct;
      c.a_scale = 1.0f;
      c.b_scale = 1.0f;
      c.c_scale = 2.0f;
      c.gran = QJ_GRAN_TENSOR;
      c.bias = false;
      c.a_zp = false;
      c.k = k;
      c.n = 40;
      c.m = 7;
      c.seed = ++seed;
      EXPECT_CASE(c);
      c.c_scale = 256.0f;  // small y: ties of 0.5 around zero
      EXPECT_CASE(c);
    }
  }
  for (qj_dtype ct : {QJ_F32, QJ_BF16}) {
    for (float beta : {0.0f, 1.0f, 0.5f, -2.75f}) {
      if (ct == QJ_BF16 && beta != 0.0f) continue;
      for (bool bias : {false, true})
        for (bool relu : {false, true})
          for (qj_granularity gran : {QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
            GemmCase c;
            c.c_type = ct;
            c.beta = beta;
            c.bias = bias;
            c.relu = relu;
            c.gran = gran;
            c.group = gran == QJ_GRAN_GROUP ? 32 : 0;
            c.k = 96;
            c.n = 37;
            c.m = mr(c.n, c.k, gran == QJ_GRAN_GROUP) + 1;
            c.seed = ++seed;
            EXPECT_CASE(c);
            c.a_type = QJ_F32;  // with the dynamic row scale
            c.m = 3;
            EXPECT_CASE(c);
          }
    }
  }
  for (qj_granularity gran : {QJ_GRAN_TENSOR, QJ_GRAN_CHANNEL}) {
    GemmCase c;
    c.c_type = QJ_S32;
    c.bias = false;
    c.gran = gran;
    c.b_zp = true;
    c.k = 130;
    c.n = 37;
    c.m = mr(c.n, c.k, false) + 1;
    c.seed = ++seed;
    EXPECT_CASE(c);
  }
}

// --- A types: u8, s8, and fp32 / bf16 quantized on the fly per row or per call ---------------------
TEST_P(GemmInt8, ATypes) {
  uint32_t seed = 700;
  for (qj_dtype at : {QJ_U8, QJ_S8, QJ_F32, QJ_BF16}) {
    for (qj_granularity ag : {QJ_GRAN_ROW, QJ_GRAN_TENSOR}) {
      for (float range : {1e-3f, 3.0f, 1e4f}) {
        for (qj_granularity gran : {QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
          const bool dynamic = at == QJ_F32 || at == QJ_BF16;
          if (!dynamic && (ag != QJ_GRAN_ROW || range != 3.0f)) continue;
          GemmCase c;
          c.a_type = at;
          c.a_gran = ag;
          c.a_range = range;
          c.gran = gran;
          c.group = gran == QJ_GRAN_GROUP ? 64 : 0;
          c.k = 128;
          c.n = 37;
          c.b_zp = gran == QJ_GRAN_GROUP;
          for (int64_t m : {int64_t{1}, int64_t{mr(c.n, c.k, gran == QJ_GRAN_GROUP) + 1}, int64_t{40}}) {
            c.m = m;
            c.zero_row = m > 1;  // an all-zero row: amax = 0, scale 1
            c.lda_pad = m % 3;
            c.seed = ++seed;
            for (qj_dtype ct : {QJ_U8, QJ_F32, QJ_BF16}) EXPECT_CASE(with_out(c, ct));
            if (!dynamic) EXPECT_CASE(with_out(c, QJ_S32));
          }
        }
      }
    }
  }
}

// Dynamic quantization must map a zero element of A to 0, whatever the row's amax: here a row holds
// one tiny value (amax so small that 127/amax overflows fp32) and zeros. The tiny element meets a
// zero weight row, so every output must be exactly 0 (f32 output, no bias) -- checked without
// src/ref, which shares the formula. The comparison with src/ref follows.
TEST_P(GemmInt8, DynamicTinyAmaxZerosStayZero) {
  for (float tiny : {1e-38f, 2e-39f, 1e-45f, 1e-30f}) {
    const int64_t k = 64, n = 20, m = 3;
    std::vector<int8_t> wq(k * n);
    for (int64_t i = 0; i < k * n; ++i) wq[i] = static_cast<int8_t>((i * 37) % 255 - 127);
    for (int64_t j = 0; j < n; ++j) wq[j] = 0;  // weight row 0 is zero
    std::vector<float> scales(n, 0.01f);
    qj_weights_desc wd{};
    wd.dtype = QJ_S8;
    wd.k = k;
    wd.n = n;
    wd.granularity = QJ_GRAN_CHANNEL;
    wd.scales = scales.data();
    qj_weights w = nullptr;
    ASSERT_EQ(qj_weights_pack(&wd, wq.data(), n, &w), QJ_OK) << qj_last_error();
    for (qj_dtype at : {QJ_F32, QJ_BF16}) {
      std::vector<float> af(m * k, 0.0f);
      for (int64_t i = 0; i < m; ++i) af[i * k] = (i == 1) ? -tiny : tiny;
      std::vector<uint16_t> ab(m * k);
      for (int64_t i = 0; i < m * k; ++i) ab[i] = qj::f32_to_bf16(af[i]);
      const void* a = at == QJ_F32 ? static_cast<const void*>(af.data()) : ab.data();
      qj_gemm_desc d{};
      d.a_type = at;
      d.a_granularity = QJ_GRAN_ROW;
      d.c_type = QJ_F32;
      qj_gemm_plan p = nullptr;
      ASSERT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK) << qj_last_error();
      std::vector<float> c(m * n, 123.0f), ref(m * n, 123.0f);
      ASSERT_EQ(qj_gemm_run(p, m, a, k, c.data(), n, nullptr), QJ_OK) << qj_last_error();
      for (int64_t i = 0; i < m * n; ++i)
        EXPECT_EQ(c[i], 0.0f) << "tiny=" << tiny << " a=" << qj_dtype_name(at) << " row " << i / n
                              << " col " << i % n << " isa=" << qj_isa_name(isa());
      qj::ref::IntWeights rw;
      rw.k = k;
      rw.n = n;
      rw.gran = QJ_GRAN_CHANNEL;
      rw.scales = scales;
      rw.q.assign(wq.begin(), wq.end());
      qj::ref::gemm_int(d, rw, m, a, k, ref.data(), n);
      EXPECT_EQ(0, std::memcmp(c.data(), ref.data(), c.size() * 4))
          << "library and src/ref disagree, tiny=" << tiny << " a=" << qj_dtype_name(at);
      for (int64_t i = 0; i < m * n; ++i)
        EXPECT_EQ(ref[i], 0.0f) << "src/ref: tiny=" << tiny << " a=" << qj_dtype_name(at) << " row "
                                << i / n << " col " << i % n;
      qj_gemm_plan_destroy(p);
    }
    qj_weights_destroy(w);
  }
}

// A non-finite value in the padding of a row (beyond K, inside lda) is not part of A: no error.
TEST_P(GemmInt8, DynamicIgnoresNonFinitePadding) {
  const int64_t k = 33, n = 19, m = 4, lda = 40;
  std::vector<int8_t> wq = qjt::random_ints<int8_t>(k * n, -128, 127, 5);
  std::vector<float> scales(n, 0.02f);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.granularity = QJ_GRAN_CHANNEL;
  wd.scales = scales.data();
  qj_weights w = nullptr;
  ASSERT_EQ(qj_weights_pack(&wd, wq.data(), n, &w), QJ_OK);
  std::vector<float> a = qjt::random_floats(m * lda, -2.0f, 2.0f, 6);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = k; j < lda; ++j) a[i * lda + j] = (j & 1) ? NAN : INFINITY;
  qj_gemm_desc d{};
  d.a_type = QJ_F32;
  d.a_granularity = QJ_GRAN_TENSOR;
  d.c_type = QJ_F32;
  qj_gemm_plan p = nullptr;
  ASSERT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK);
  std::vector<float> c(m * n, 0.0f), ref(m * n, 0.0f);
  EXPECT_EQ(qj_gemm_run(p, m, a.data(), lda, c.data(), n, nullptr), QJ_OK) << qj_last_error();
  qj::ref::IntWeights rw;
  rw.k = k;
  rw.n = n;
  rw.gran = QJ_GRAN_CHANNEL;
  rw.scales = scales;
  rw.q.assign(wq.begin(), wq.end());
  qj::ref::gemm_int(d, rw, m, a.data(), lda, ref.data(), n);
  EXPECT_EQ(0, std::memcmp(c.data(), ref.data(), c.size() * 4));
  qj_gemm_plan_destroy(p);
  qj_weights_destroy(w);
}

// Dynamic quantization finds each row's amax wherever it is: row i of A holds its largest
// magnitude (alternating sign) at column i % K, so every position of the vector loops and their
// tails is the maximum of some row. Per-tensor scales take the maximum over all rows.
TEST_P(GemmInt8, DynamicAmaxAtEveryColumn) {
  for (int64_t k : {1, 7, 37, 64, 100}) {
    for (qj_dtype at : {QJ_F32, QJ_BF16}) {
      for (qj_granularity ag : {QJ_GRAN_ROW, QJ_GRAN_TENSOR}) {
        const int64_t m = std::max<int64_t>(k, 3), n = 21, lda = k + 3;
        std::vector<int8_t> wq = qjt::random_ints<int8_t>(k * n, -128, 127, 31);
        std::vector<float> scales(n, 0.01f);
        qj_weights_desc wd{};
        wd.dtype = QJ_S8;
        wd.k = k;
        wd.n = n;
        wd.granularity = QJ_GRAN_CHANNEL;
        wd.scales = scales.data();
        qj_weights w = nullptr;
        ASSERT_EQ(qj_weights_pack(&wd, wq.data(), n, &w), QJ_OK) << qj_last_error();
        std::vector<float> af = qjt::random_floats(m * lda, -1.0f, 1.0f, 32);
        for (int64_t i = 0; i < m; ++i) af[i * lda + i % k] = (i & 1) ? -(2.0f + i) : 2.0f + i;
        std::vector<uint16_t> ab(m * lda);
        for (int64_t i = 0; i < m * lda; ++i) ab[i] = qj::f32_to_bf16(af[i]);
        const void* a = at == QJ_F32 ? static_cast<const void*>(af.data()) : ab.data();
        qj_gemm_desc d{};
        d.a_type = at;
        d.a_granularity = ag;
        d.c_type = QJ_F32;
        qj_gemm_plan p = nullptr;
        ASSERT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK) << qj_last_error();
        std::vector<float> c(m * n, 0.0f), ref(m * n, 0.0f);
        ASSERT_EQ(qj_gemm_run(p, m, a, lda, c.data(), n, nullptr), QJ_OK) << qj_last_error();
        qj::ref::IntWeights rw;
        rw.k = k;
        rw.n = n;
        rw.gran = QJ_GRAN_CHANNEL;
        rw.scales = scales;
        rw.q.assign(wq.begin(), wq.end());
        qj::ref::gemm_int(d, rw, m, a, lda, ref.data(), n);
        for (int64_t i = 0; i < m * n; ++i)
          if (std::memcmp(&c[i], &ref[i], 4) != 0) {
            ADD_FAILURE() << "k=" << k << " a=" << qj_dtype_name(at) << " a_gran=" << ag << " row " << i / n
                          << " col " << i % n << ": " << c[i] << " vs " << ref[i] << " isa=" << qj_isa_name(isa());
            break;
          }
        qj_gemm_plan_destroy(p);
        qj_weights_destroy(w);
      }
    }
  }
}

// Dynamic quantization rounds half to even. With amax = 127 the multiplier 127/amax is exactly 1,
// so x.5 values are exact ties; with B the identity (scale 1) and f32 output, C = q exactly, so the
// test checks each q against its own rounding, not only against src/ref. Ties are rotated through
// the row so they land in vector bodies and tails.
TEST_P(GemmInt8, DynamicQuantizationRoundsHalfToEven) {
  const int64_t k = 40, n = 40, m = 8;
  const float vals[] = {127.0f, 0.5f, 1.5f, 2.5f, 3.5f, -0.5f, -1.5f, -2.5f, 126.5f, -126.5f,
                        0.49999997f, 0.50000006f, -3.5f, 64.5f, -64.5f, 5.5f, 4.5f, 0.0f};
  std::vector<int8_t> eye(k * n, 0);
  for (int64_t i = 0; i < k; ++i) eye[i * n + i] = 1;
  const float one = 1.0f;
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.granularity = QJ_GRAN_TENSOR;
  wd.scales = &one;
  qj_weights w = nullptr;
  ASSERT_EQ(qj_weights_pack(&wd, eye.data(), n, &w), QJ_OK) << qj_last_error();
  for (qj_dtype at : {QJ_F32, QJ_BF16}) {
    std::vector<float> af(m * k, 0.0f);
    for (int64_t r = 0; r < m; ++r)
      for (size_t j = 0; j < std::size(vals); ++j) af[r * k + (j + 5 * r) % k] = vals[j];
    std::vector<uint16_t> ab(m * k);
    for (int64_t i = 0; i < m * k; ++i) ab[i] = qj::f32_to_bf16(af[i]);
    qj_gemm_desc d{};
    d.a_type = at;
    d.a_granularity = QJ_GRAN_ROW;
    d.c_type = QJ_F32;
    qj_gemm_plan p = nullptr;
    ASSERT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK) << qj_last_error();
    std::vector<float> c(m * n, -99.0f);
    const void* a = at == QJ_F32 ? static_cast<const void*>(af.data()) : ab.data();
    ASSERT_EQ(qj_gemm_run(p, m, a, k, c.data(), n, nullptr), QJ_OK) << qj_last_error();
    for (int64_t i = 0; i < m * k; ++i) {
      const double v = at == QJ_F32 ? af[i] : qj::bf16_to_f32(ab[i]);
      const double fl = std::floor(v), frac = v - fl;
      double q = frac > 0.5 ? fl + 1 : frac < 0.5 ? fl : (std::fmod(fl, 2.0) == 0 ? fl : fl + 1);
      q = std::min(127.0, std::max(-127.0, q));
      EXPECT_EQ(c[i], static_cast<float>(q)) << qj_dtype_name(at) << " a=" << v << " row " << i / k
                                             << " col " << i % k << " isa=" << qj_isa_name(isa());
    }
    qj_gemm_plan_destroy(p);
  }
  qj_weights_destroy(w);
}

// u8 A without weight zero points is read by the VNNI kernels without packing: in place when
// lda == K, else copied rows K bytes apart; long rows (MR * K > 16 KiB) are packed. K not a
// multiple of 4: each row's last quad reaches into the next row (against zero weights), and the
// tile holding A's last row is copied (StaysInsideBuffersDeathTest checks the reads at a guard
// page). Other tiers pack as usual: the same cases check them too.
TEST_P(GemmInt8, U8AReadInPlace) {
  uint32_t seed = 1400;
  for (int64_t k : {1, 3, 4, 5, 64, 67, 132, 512, 1024, 1028, 1567, 2048}) {
    for (int64_t n : {16, 37, 100}) {
      const int r = mr(n, k, false);
      for (int64_t m : {int64_t{1}, int64_t{r - 1}, int64_t{r}, int64_t{r + 1}, int64_t{2 * r + 3}, int64_t{97}}) {
        if (m < 1 || (k >= 1024 && m > 2 * r + 3)) continue;
        GemmCase c;
        c.k = k;
        c.n = n;
        c.m = m;
        c.b_zp = false;
        c.a_zp_val = (m % 2) ? 0 : 255;
        c.lda_pad = (m + n) % 3 == 0 ? 0 : (m % 2 ? 1 : 4);
        c.threads = m > r ? 1 + static_cast<int>(m % 3) : 1;
        c.seed = ++seed;
        EXPECT_CASE(with_out(c, kOutTypes[seed % 5]));
      }
    }
  }
}

// A case of the narrow, tall and banks kernels' tests, varied by seed: A type and zero point (0, the
// type's extreme, 17), granularity, bias / ReLU, full-range values, padded rows of A (3 or 64
// bytes) and C (5).
GemmCase varied_case(int64_t m, int64_t n, int64_t k, uint32_t seed) {
  GemmCase c;
  c.k = k;
  c.n = n;
  c.m = m;
  c.a_type = (seed % 7 == 6) ? QJ_S8 : QJ_U8;
  c.gran = (seed % 5 == 3) ? QJ_GRAN_TENSOR : QJ_GRAN_CHANNEL;
  c.relu = seed % 3 == 1;
  c.bias = seed % 4 != 2;
  c.a_zp_val = (seed % 3 == 0) ? 0 : (seed % 3 == 1) ? (c.a_type == QJ_U8 ? 255 : -128) : 17;
  c.values = (seed % 6 == 5) ? qjt::kExtremes : qjt::kRandom;
  c.lda_pad = seed % 4 == 1 ? 3 : seed % 4 == 2 ? 64 : 0;
  c.ldc_pad = seed % 3 ? 0 : 5;
  return c;
}

// The plan of u8 A x K x N s8 weights (all 3, per-tensor scale) -> u8 C, for the tests of which
// kernels a plan holds; null (and a test failure) if it cannot be made.
std::unique_ptr<qj::GemmPlan> u8_plan(int64_t k, int64_t n, qj_isa isa) {
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.layout = QJ_LAYOUT_KN;
  wd.granularity = QJ_GRAN_TENSOR;
  const float scale = 0.01f;
  wd.scales = &scale;
  std::vector<int8_t> b(static_cast<size_t>(k * n), 3);
  std::shared_ptr<qj::PackedWeights> w;
  std::unique_ptr<qj::GemmPlan> p;
  qj_gemm_desc gd{};
  gd.a_type = QJ_U8;
  gd.a_scale = 0.1f;
  gd.a_zero_point = 3;
  gd.c_type = QJ_U8;
  gd.c_scale = 0.5f;
  if (qj::pack_int_weights(wd, b.data(), n, isa, &w) != QJ_OK || qj::gemm_plan_create(gd, w, &p) != QJ_OK) {
    ADD_FAILURE() << "k " << k << " n " << n << ": " << qj_last_error();
    return nullptr;
  }
  return p;
}

// N = 4 and 8 with u8 A on VNNI run the narrow-N kernel (codegen/gemm_int flags bit 6) for whole
// groups of 8 rows and the ordinary kernels for the rows left over: K chunks of 8 with an
// overlapping last chunk (K % 8 != 0), unrolled up to 8 chunks and looped above, every output
// type, bias / ReLU, zero points, odd lda, contiguous and padded rows of C (the kernel's two
// store paths), partitions. N = 4 with K = 4 mod 8 from 20 to 60 or K = 16 / 56 / 64 runs its
// row-lane variant instead on Zen 5 (emit_s8_narrow_rows, groups of 4 rows; checked below): sets
// of 4 quads and of one (K = 20, 36, 52), the group's second 16 dwords masked (K = 20, 28) or not
// (36), rows K bytes apart (vpermt2d, K <= 36) or not (lda_pad, and K > 36: 16-byte row reads).
// Other tiers and A types take the ordinary kernels on the same cases.
TEST_P(GemmInt8, NarrowN) {
  uint32_t seed = 2600;
  for (int64_t k : {7, 8, 9, 12, 16, 20, 24, 28, 32, 36, 40, 52, 64, 68, 100, 288, 1500})
    for (int64_t n : {4, 8})
      for (int64_t m : {8, 9, 15, 16, 17, 40, 97}) {
        if (k >= 1500 && m > 17) continue;
        GemmCase c = varied_case(m, n, k, seed);
        c.threads = m >= 16 ? 1 + static_cast<int>(seed % 3) : 1;
        c.seed = ++seed;
        EXPECT_CASE(with_out(c, kOutTypes[seed % 5]));
        c.c_type = QJ_U8;  // the FBGEMM benchmark's output stage, every case
        EXPECT_CASE(c);
      }
  // The plan holds the row-lane variant exactly where it applies (4 rows a group; the narrow-N
  // kernel takes 8).
  for (int64_t k : {12, 15, 16, 20, 24, 28, 32, 36, 38, 40, 44, 48, 56, 60, 64, 68})
    for (int64_t n : {4, 8}) {
      const std::unique_ptr<qj::GemmPlan> p = u8_plan(k, n, isa());
      ASSERT_TRUE(p);
      const bool vnni = isa() >= QJ_ISA_AVX512_VNNI;
      const bool rows = vnni && n == 4 && (k % 8 == 4 ? k >= 20 && k <= 60 : k == 16 || k == 56 || k == 64) &&
                        qj::amd_family() >= 0x1a;
      EXPECT_EQ(p->narrow_mr, !vnni ? 0 : rows ? 4 : 8) << "k " << k << " n " << n;
    }
}

// N = 8 with K a multiple of 4 from 8 to 28 runs the 8-column row-lane variant of the narrow-N
// kernel (emit_s8_narrow_rows8: a ymm per row, two rows per output vector) except on Zen 5. Both
// kernels run here on any CPU (gemm_force_narrow_rows8), over every K the variant takes (K quads
// 2 to 16: 8 rows a bank, 4 at K = 64), with the cases of NarrowN: output types, zero points,
// bias / ReLU, odd lda, contiguous and padded rows of C (its two store paths), partitions, whole
// banks and rows left over.
TEST_P(GemmInt8, NarrowRows8) {
  struct Force {
    explicit Force(int mode) { qj::gemm_force_narrow_rows8(mode); }
    ~Force() { qj::gemm_force_narrow_rows8(-1); }
  };
  const bool vnni = isa() >= QJ_ISA_AVX512_VNNI;
  auto rows8 = [](const qj::GemmPlan& p) { return p.narrow && p.narrow.name().find("narrowrows") != std::string::npos; };
  uint32_t seed = 2750;
  for (int mode : {1, 0}) {
    Force force(mode);
    for (int64_t k : {8, 12, 20, 28, 36, 64})
      for (int64_t m : {8, 9, 16, 17, 40, 97}) {
        GemmCase c = varied_case(m, 8, k, seed);
        c.threads = m >= 16 ? 1 + static_cast<int>(seed % 3) : 1;
        c.seed = ++seed;
        EXPECT_CASE(with_out(c, kOutTypes[seed % 5]));
        c.c_type = QJ_U8;
        EXPECT_CASE(c);
      }
    for (int64_t k : {8, 12, 28, 32, 36, 64, 66, 68}) {
      const std::unique_ptr<qj::GemmPlan> p = u8_plan(k, 8, isa());
      ASSERT_TRUE(p);
      EXPECT_EQ(rows8(*p), vnni && mode == 1 && k % 4 == 0 && k <= 64) << "k " << k << " mode " << mode;
    }
  }
  // The rule: K 8 to 28, not on Zen 5.
  for (int64_t k : {8, 12, 16, 24, 28, 30, 32, 36, 40}) {
    const std::unique_ptr<qj::GemmPlan> p = u8_plan(k, 8, isa());
    ASSERT_TRUE(p);
    EXPECT_EQ(rows8(*p), vnni && k % 4 == 0 && k <= 28 && qj::amd_family() < 0x1a) << "k " << k;
  }
}

// u8 A in place, u8 / s8 / f32 / s32 / bf16 C, N a multiple of 64 and K a multiple of 4 above the tall kernels' (up
// to kBanksMaxK) on VNNI run the banks kernel (codegen/gemm_int emit_s8_banks) on each 64-column
// panel for whole banks of 3 rows, software-pipelined in two register banks, for the M of
// banks_rows_ok, and the ordinary kernels for the rows left over: two banks to many (odd and
// even counts: the pipeline's two ends), several panels and row blocks, padded rows of A and C,
// bias / ReLU, A zero points, full-range values, partitions; other M, K % 4 != 0 and N % 64 != 0
// take the ordinary kernels on the same data.
TEST_P(GemmInt8, BanksN) {
  uint32_t seed = 2900;
  for (int64_t k : {80, 128, 132, 256, 384, 100, 130})
    for (int64_t n : {64, 128, 192, 96})
      for (int64_t m : {5, 6, 8, 9, 20, 48, 61, 128}) {
        if ((m + n + k) % 3 == 1 && m != 6 && m != 61) continue;  // a sample of the rest
        GemmCase c = varied_case(m, n, k, seed);
        const qj_dtype ct = (seed % 4 == 1)    ? QJ_S8
                            : (seed % 9 == 4)  ? QJ_F32
                            : (seed % 11 == 7) ? QJ_S32
                            : (seed % 13 == 5) ? QJ_BF16
                                               : QJ_U8;
        c.threads = m >= 20 ? 1 + static_cast<int>(seed % 3) : 1;
        c.seed = ++seed;
        EXPECT_CASE(with_out(c, ct));
      }
  // Every output type on shapes the kernel takes (banks_rows_ok).
  for (qj_dtype ct : {QJ_F32, QJ_S32, QJ_S8, QJ_U8, QJ_BF16})
    for (int64_t mk : {61 * 1000 + 128, 48 * 1000 + 256, 9 * 1000 + 80, 6 * 1000 + 384}) {
      const int64_t m = mk / 1000, k = mk % 1000;
      GemmCase c = varied_case(m, 128, k, seed);
      if (c.a_type == QJ_S8) {  // (s8 A: the ordinary kernels)
        c.a_type = QJ_U8;
        if (c.a_zp_val < 0) c.a_zp_val = 255;
      }
      c.threads = 1 + static_cast<int>(seed % 2);
      c.seed = ++seed;
      EXPECT_CASE(with_out(c, ct));
    }
  // Several row blocks (GemmPlan::tall_block: a third of L1 of A rows, 42 banks at K = 128).
  GemmCase c;
  c.k = 128;
  c.n = 128;
  c.m = 400;
  c.threads = 2;
  c.seed = ++seed;
  EXPECT_CASE(c);
  // The plan holds the banks kernel exactly where it applies.
  for (int64_t k : {76, 80, 130, 256, 384, 388})
    for (int64_t n : {64, 96, 128}) {
      const std::unique_ptr<qj::GemmPlan> p = u8_plan(k, n, isa());
      ASSERT_TRUE(p);
      const bool banks = isa() >= QJ_ISA_AVX512_VNNI && k % 4 == 0 && k > 76 && k <= 384 && n % 64 == 0;
      EXPECT_EQ(p->narrow_tall && p->tall_cols == 64, banks) << "k " << k << " n " << n;
      if (banks) EXPECT_EQ(p->narrow_mr, 3) << "k " << k;
    }
}

// u8 A in place with K a multiple of 4 up to 4 * kTallMaxKGroups (any lda, N other than the
// narrow-N kernel's 4 and 8) on VNNI run the tall kernels (codegen/gemm_int emit_s8_tall) on each
// 16 columns of the panels in turn, for whole banks of rows, software-pipelined in two register
// banks, and the ordinary kernels for the rows left over: the plan takes them (checked), every
// output type, bias / ReLU, zero points, full-range values, N < 16, N % 16 != 0 (the tail kernel)
// and several panels (N up to 100: panels of 32 / 48 / 64 columns), rows per bank from 8
// (K <= 44) down to 4 (K = 76), one bank to many (odd and even counts), padded rows of A and C,
// partitions. K % 4 != 0 and K > 76 take the ordinary
// kernels on the same data; other tiers and A types too.
TEST_P(GemmInt8, TallN) {
  uint32_t seed = 2700;
  for (int64_t k : {4, 8, 36, 44, 48, 52, 64, 76, 80, 38})
    for (int64_t n : {1, 3, 9, 12, 15, 16, 17, 32, 40, 64, 100})
      for (int64_t m : {15, 16, 17, 29, 31, 32, 33, 100}) {
        if ((m + n + k) % 2 == 1 && m != 16 && m != 33) continue;  // a sample of the rest
        if (n > 16 && (m + k) % 3 != 0) continue;
        GemmCase c = varied_case(m, n, k, seed);
        c.beta = (seed % 8 == 7) ? 0.5f : 0.0f;
        c.threads = m >= 32 ? 1 + static_cast<int>(seed % 3) : 1;
        c.seed = ++seed;
        GemmCase o = with_out(c, kOutTypes[seed % 5]);
        if (o.c_type != QJ_F32) o.beta = 0.0f;
        EXPECT_CASE(o);
        c.c_type = QJ_U8;  // the FBGEMM benchmark's output stage, every case
        c.beta = 0.0f;
        EXPECT_CASE(c);
      }
  // Several row blocks (GemmPlan::tall_block: about a third of L1 of A rows, 296 rows at K = 36),
  // each visiting every 16 columns.
  for (int64_t k : {36, 64})
    for (int64_t n : {24, 64}) {
      GemmCase c;
      c.k = k;
      c.n = n;
      c.m = 701;
      c.threads = n == 24 ? 1 : 3;
      c.seed = ++seed;
      EXPECT_CASE(with_out(c, kOutTypes[seed % 5]));
      // rows of C 4096 bytes or more apart: the ordinary kernels (kTallMaxRowBytes)
      c.ldc_pad = 1024 - n;
      c.m = 40;
      EXPECT_CASE(with_out(c, QJ_F32));
    }
  // The plan holds the tall kernel exactly where it applies.
  for (int64_t k : {4, 36, 76, 80, 38})
    for (int64_t n : {3, 8, 16, 17, 200}) {
      const std::unique_ptr<qj::GemmPlan> p = u8_plan(k, n, isa());
      ASSERT_TRUE(p);
      const bool narrow = n == 8 && k >= 8;  // the narrow-N kernel's case
      const bool tall = isa() >= QJ_ISA_AVX512_VNNI && !narrow && k % 4 == 0 && k <= 76;
      EXPECT_EQ(p->narrow_tall, tall) << "k " << k << " n " << n;
      if (tall) EXPECT_EQ(p->narrow_mr, k <= 44 ? 8 : 4) << "k " << k;  // rows per bank: 8, or 4 at K = 76
    }
}

// --- Weight layouts and odd leading dimensions ------------------------------------------------------
TEST_P(GemmInt8, LayoutsAndLeadingDims) {
  uint32_t seed = 800;
  int i = 0;
  for (qj_layout layout : {QJ_LAYOUT_KN, QJ_LAYOUT_NK}) {
    for (int64_t wpad : {0, 1, 3, 17}) {
      for (qj_granularity gran : {QJ_GRAN_TENSOR, QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
        ++i;
        GemmCase c;
        c.layout = layout;
        c.wld_pad = wpad;
        c.gran = gran;
        c.group = gran == QJ_GRAN_GROUP ? 32 : 0;
        c.k = gran == QJ_GRAN_GROUP ? 160 : 45;
        c.n = 21 + i;
        c.m = mr(c.n, c.k, gran == QJ_GRAN_GROUP) + 1;
        c.lda_pad = (i * 7) % 13;   // odd and even strides
        c.ldc_pad = (i * 5) % 11;
        c.b_zp = (i % 2) == 0;
        c.a_type = (i % 3 == 0) ? QJ_BF16 : (i % 3 == 1) ? QJ_S8 : QJ_U8;
        c.seed = ++seed;
        EXPECT_CASE(with_out(c, kOutTypes[i % 5]));
      }
    }
  }
}

// --- Partitions: {t, T} for T = 1, 2, 3, 7 give the reference result; each writes its own share ---
TEST_P(GemmInt8, Partitions) {
  struct S {
    int64_t m, n, k;
  };
  // Row split (many tiles), panel split (few rows, many panels), more threads than work.
  const S shapes[] = {{256, 37, 70}, {3, 1000, 64}, {20, 600, 33}, {1, 16, 8}, {97, 257, 129}};
  uint32_t seed = 900;
  for (const S& s : shapes) {
    for (int threads : {1, 2, 3, 7}) {
      for (int variant = 0; variant < 3; ++variant) {
        GemmCase c;
        c.m = s.m;
        c.n = s.n;
        c.k = s.k;
        c.threads = threads;
        c.check_disjoint = true;
        c.seed = ++seed;
        if (variant == 1) {  // per-tensor dynamic A: the scale spans every partition's rows
          c.a_type = QJ_F32;
          c.a_gran = QJ_GRAN_TENSOR;
          c.c_type = QJ_BF16;
        } else if (variant == 2) {
          c.gran = QJ_GRAN_GROUP;
          c.group = s.k % 32 == 0 ? 32 : s.k;
          c.b_zp = true;
          c.c_type = QJ_F32;
        }
        EXPECT_CASE(c);
      }
      GemmCase b;  // beta reads C: partitions must still each touch their own share only once
      b.m = s.m;
      b.n = s.n;
      b.k = s.k;
      b.threads = threads;
      b.c_type = QJ_F32;
      b.beta = 0.75f;
      b.seed = ++seed;
      EXPECT_CASE(b);
    }
  }
}

// qj_gemm_run_parallel on the built-in pool and on a caller's pool hook.
struct CountingPool {
  std::atomic<int> calls{0};
};
void serial_reverse_pool(void* pool, qj_task_fn fn, void* ctx, int32_t n) {
  static_cast<CountingPool*>(pool)->calls++;
  for (int32_t t = n - 1; t >= 0; --t) fn(ctx, t, n);
}

TEST_P(GemmInt8, RunParallel) {
  uint32_t seed = 1000;
  for (int threads : {1, 2, 3, 7}) {
    for (int64_t m : {1, 5, 97}) {
      GemmCase c;
      c.m = m;
      c.n = 300;
      c.k = 65;
      c.threads = threads;
      c.parallel = true;
      c.b_zp = true;
      c.seed = ++seed;
      EXPECT_CASE(c);
      c.a_type = QJ_BF16;
      c.c_type = QJ_F32;
      c.beta = -1.5f;
      EXPECT_CASE(c);
    }
  }
  CountingPool pool;
  qj_set_parallel_for(serial_reverse_pool, &pool);
  for (int threads : {2, 3, 7}) {
    GemmCase c;
    c.m = 61;
    c.n = 129;
    c.k = 100;
    c.threads = threads;
    c.parallel = true;
    c.seed = ++seed;
    EXPECT_CASE(c);
  }
  qj_set_parallel_for(nullptr, nullptr);
  EXPECT_EQ(pool.calls.load(), 3) << "the installed pool hook was not used";
}

// --- FBGEMM's own test shapes (M, N, K) --------------------------------------------------------------
TEST_P(GemmInt8, FbgemmShapes) {
  uint32_t seed = 1100;
  for (const qjt::Shape& s : qjt::large_and_fbgemm_shapes()) {
    GemmCase c;
    c.m = s.m;
    c.n = s.n;
    c.k = s.k;
    c.seed = ++seed;
    c.b_zp = true;  // u8 A with both zero points, requantized to u8 with bias
    EXPECT_CASE(c);
    GemmCase d = c;  // s8 A, per-tensor weights without zero points, f32 out + ReLU
    d.a_type = QJ_S8;
    d.gran = QJ_GRAN_TENSOR;
    d.b_zp = false;
    d.relu = true;
    d.c_type = QJ_F32;
    d.seed = ++seed;
    if (s.m * s.n * s.k < 20000000) EXPECT_CASE(d);
    GemmCase e = c;  // dynamic fp32 A with group scales where the group divides K
    e.a_type = QJ_F32;
    e.gran = s.k % 128 == 0 ? QJ_GRAN_GROUP : QJ_GRAN_CHANNEL;
    e.group = s.k % 128 == 0 ? 128 : 0;
    e.c_type = QJ_BF16;
    e.seed = ++seed;
    if (s.m * s.n * s.k < 20000000) EXPECT_CASE(e);
  }
}

// --- Blocking: several MC blocks of A and NC blocks of B panels --------------------------------------
TEST_P(GemmInt8, ManyCacheBlocks) {
  if (isa() == QJ_ISA_SCALAR) GTEST_SKIP() << "the scalar tier has no cache blocking";
  GemmCase c;
  c.m = 70;
  c.n = 257;
  c.k = 4096;
  c.b_zp = true;
  c.seed = 1200;
  EXPECT_CASE(c);
  c.gran = QJ_GRAN_GROUP;
  c.group = 128;
  c.c_type = QJ_F32;
  c.m = 33;
  c.threads = 2;
  EXPECT_CASE(c);
}

// A driver plan (src/ops/gemm.h) over random s8 per-channel weights (every scale w_scale) and u8
// A, for tests that look inside the plan; nullptr (and a test failure) if packing or planning fails.
std::unique_ptr<qj::GemmPlan> internal_s8_plan(qj_isa isa, int64_t k, int64_t n, float w_scale, float a_scale,
                                               qj_dtype c_type, float c_scale) {
  std::vector<int8_t> wq = qjt::random_ints<int8_t>(k * n, -128, 127, 5);
  std::vector<float> scales(n, w_scale);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.granularity = QJ_GRAN_CHANNEL;
  wd.scales = scales.data();
  std::shared_ptr<qj::PackedWeights> w;
  std::unique_ptr<qj::GemmPlan> plan;
  qj_gemm_desc d{};
  d.a_type = QJ_U8;
  d.a_scale = a_scale;
  d.c_type = c_type;
  d.c_scale = c_scale;
  if (qj::pack_int_weights(wd, wq.data(), n, isa, &w) != QJ_OK || qj::gemm_plan_create(d, w, &plan) != QJ_OK) {
    ADD_FAILURE() << qj_last_error();
    return nullptr;
  }
  return plan;
}

// --- u8 / s8 output stages with and without the plan's bound on |y| (codegen/epilogue.h) -------------
// Below 2^30 the kernels round, add the zero point, raise to the lower bound and store with
// saturation; above it (or when the bound cannot be proved) they clamp in fp32 first. Both must
// give the reference's bytes, including every saturating case. N = 128 fills 64-column panels,
// whose whole rows the AVX-512 kernels narrow with saturating packs (one store per row).
TEST_P(GemmInt8, BoundedRequantization) {
  uint32_t seed = 3100;
  const int64_t k = 70;
  // c_scale 0.7: |y| <= 70 * 255^2 * 0.05 * 0.02 / 0.7 (bounded, in range); 1e-4: bounded, mostly
  // saturated; 1e-7: |y| up to ~1e10, not bounded.
  for (int64_t n : {37, 128}) {
    for (float cs : {0.7f, 1e-4f, 1e-7f}) {
      const bool bounded = cs > 1e-6f;
      for (qj_dtype ct : {QJ_U8, QJ_S8}) {
        if (isa() != QJ_ISA_SCALAR) {
          std::unique_ptr<qj::GemmPlan> plan = internal_s8_plan(isa(), k, n, 0.02f, 0.05f, ct, cs);
          ASSERT_TRUE(plan);
          plan->for_each_kernel([&](const qj::KernelRef& r) {
            EXPECT_EQ(r.name().find("_reqb_") != std::string::npos, bounded) << r.name() << " c_scale=" << cs;
          });
        }
        for (int v : {qjt::kRandom, qjt::kExtremes, qjt::kMaxPos, qjt::kMaxNeg})
          for (int32_t zc : {ct == QJ_U8 ? 0 : -128, ct == QJ_U8 ? 200 : 5, ct == QJ_U8 ? 255 : 127})
            for (bool relu : {false, true}) {
              GemmCase c;
              c.m = 13;
              c.n = n;
              c.k = k;
              c.c_type = ct;
              c.c_scale = cs;
              c.a_scale = 0.05f;
              c.b_scale = 0.02f;
              c.c_zp = zc;
              c.relu = relu;
              c.values = v;
              c.b_zp = v == qjt::kMaxPos || v == qjt::kMaxNeg;
              c.seed = ++seed;
              EXPECT_CASE(c);
            }
      }
    }
  }
}

// --- K blocks: sums carried between K blocks through scratch (blocks forced small) -------------------
struct ForceKBlock {
  explicit ForceKBlock(int64_t kc) { qj::gemm_force_k_block(kc); }
  ~ForceKBlock() { qj::gemm_force_k_block(-1); }
};

// The u8 / s8 output against the definition, not src/ref (whose multiplier and bias the plan
// shares): q = clamp(rne(a_scale * w_scale[n] * sum / c_scale + bias[n] / c_scale) + c_zp),
// computed here in double from the integer sum. The library folds the scales in fp32, so a y within
// a relative 2^-20 of a rounding tie may land on either side; everywhere else q must be exact.
// S8 weights per channel and S4 weights (nibbles, per channel), u8 and s8 A, with and without
// ReLU (which clamps at the zero point).
TEST_P(GemmInt8, RequantizationMatchesTheDefinition) {
  const int64_t m = 23, n = 37, k = 70;
  for (qj_dtype wt : {QJ_S8, QJ_S4})
    for (qj_dtype at : {QJ_U8, QJ_S8})
      for (qj_dtype ct : {QJ_U8, QJ_S8})
        for (bool relu : {false, true}) {
          const uint32_t seed = static_cast<uint32_t>(wt * 1000 + at * 100 + ct * 10 + relu);
          const int qlo = wt == QJ_S8 ? -128 : -8, qhi = wt == QJ_S8 ? 127 : 7;
          std::vector<int32_t> q = qjt::random_ints<int32_t>(k * n, qlo, qhi, seed);  // [k][n]
          std::vector<float> ws = qjt::random_floats(n, 0.002f, 0.02f, seed + 1);
          std::vector<float> bias = qjt::random_floats(n, -3.0f, 3.0f, seed + 2);
          const int alo = at == QJ_U8 ? 0 : -128, ahi = at == QJ_U8 ? 255 : 127;
          std::vector<int> av = qjt::random_ints<int>(m * k, alo, ahi, seed + 3);
          std::vector<uint8_t> a(m * k);
          for (int64_t i = 0; i < m * k; ++i) a[i] = static_cast<uint8_t>(av[i]);
          // weights as the API takes them: KN bytes (S8) or KN nibbles, low nibble = even k (S4)
          std::vector<uint8_t> packed(q.begin(), q.end());  // (S8: the bytes of q)
          if (wt == QJ_S4) packed = qjt::to_nibbles(q, k, n, QJ_LAYOUT_KN, n);
          qj_weights_desc wd{};
          wd.dtype = wt;
          wd.k = k;
          wd.n = n;
          wd.layout = QJ_LAYOUT_KN;
          wd.granularity = QJ_GRAN_CHANNEL;
          wd.scales = ws.data();
          qj_weights w = nullptr;
          ASSERT_EQ(qj_weights_pack(&wd, packed.data(), n, &w), QJ_OK) << qj_last_error();
          const int za = at == QJ_U8 ? 7 : -3, zc = ct == QJ_U8 ? 90 : -10;
          qj_gemm_desc gd{};
          gd.a_type = at;
          gd.a_scale = 0.03f;
          gd.a_zero_point = za;
          gd.c_type = ct;
          gd.c_scale = wt == QJ_S8 ? 0.9f : 0.06f;  // (outputs spread over tens of units)
          gd.c_zero_point = zc;
          gd.bias = bias.data();
          gd.activation = relu ? QJ_ACT_RELU : QJ_ACT_NONE;
          qj_gemm_plan p = nullptr;
          const std::string e = qjt::create_jit_plan(gd, w, &p);
          qj_weights_destroy(w);
          ASSERT_EQ(e, "");
          std::vector<uint8_t> c(m * n, 0);
          ASSERT_EQ(qj_gemm_run(p, m, a.data(), k, c.data(), n, nullptr), QJ_OK) << qj_last_error();
          qj_gemm_plan_destroy(p);
          const int lo = ct == QJ_U8 ? 0 : -128, hi = ct == QJ_U8 ? 255 : 127;
          int exact = 0, inside = 0;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              int64_t sum = 0;
              for (int64_t kk = 0; kk < k; ++kk) sum += static_cast<int64_t>(av[i * k + kk] - za) * q[kk * n + j];
              const double y = static_cast<double>(gd.a_scale) * ws[j] * static_cast<double>(sum) / gd.c_scale +
                               static_cast<double>(bias[j]) / gd.c_scale;
              const double r = std::nearbyint(y);  // (ties to even: the default rounding mode)
              auto clampq = [&](double v) {
                const int qv = static_cast<int>(std::min(std::max(v + zc, -1e6), 1e6));
                return std::min(std::max(qv, relu ? std::max(lo, zc) : lo), hi);
              };
              const int want = clampq(r);
              const int got = ct == QJ_U8 ? c[i * n + j] : static_cast<int8_t>(c[i * n + j]);
              const double to_tie = std::fabs(std::fabs(y - std::floor(y)) - 0.5);
              inside += want > lo && want < hi;
              if (to_tie > std::ldexp(std::fabs(y) + 1.0, -20)) {
                ++exact;
                ASSERT_EQ(got, want) << "row " << i << " col " << j << ": y = " << y << " " << qj_dtype_name(wt)
                                     << " A " << qj_dtype_name(at) << " C " << qj_dtype_name(ct) << " relu " << relu;
              } else {
                ASSERT_TRUE(got == want || got == clampq(y < r ? r - 1 : r + 1)) << "near a tie: y = " << y;
              }
            }
          EXPECT_GT(exact, m * n * 9 / 10);  // the exact comparison is the rule, not the exception
          EXPECT_GT(inside, m * n / 2);      // and most outputs are not saturated
        }
}

// Integer weights whose group folds overflow: fma(sum, scale, +inf) with the exact (finite)
// product of the next group stays +inf, so integer weights never make a NaN (finite scales, bias
// and A), which is why the bf16 store has no NaN fix-up for them (codegen/epilogue.cpp); the inf
// must be stored as src/formats/half.h rounds it.
TEST_P(GemmInt8, GroupFoldsOverflowingInBf16) {
  const int64_t m = 3, n = 5, k = 8;
  std::vector<int8_t> b(k * n);  // [k][n]: group 0 (k 0..3) +127, group 1 (k 4..7) -128
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) b[kk * n + j] = kk < 4 ? 127 : -128;
  std::vector<float> scales(2 * n, 3e38f);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.layout = QJ_LAYOUT_KN;
  wd.granularity = QJ_GRAN_GROUP;
  wd.group_size = 4;
  wd.scales = scales.data();
  qj_weights w = nullptr;
  ASSERT_EQ(qj_weights_pack(&wd, b.data(), n, &w), QJ_OK) << qj_last_error();
  std::vector<uint8_t> a(m * k, 255);
  std::vector<float> c32(m * n);
  std::vector<uint16_t> c16(m * n);
  for (qj_dtype ct : {QJ_F32, QJ_BF16}) {
    qj_gemm_desc gd{};
    gd.a_type = QJ_U8;
    gd.a_scale = 1.0f;
    gd.c_type = ct;
    qj_gemm_plan p = nullptr;
    ASSERT_EQ(qjt::create_jit_plan(gd, w, &p), "");
    void* c = ct == QJ_F32 ? static_cast<void*>(c32.data()) : static_cast<void*>(c16.data());
    ASSERT_EQ(qj_gemm_run(p, m, a.data(), k, c, n, nullptr), QJ_OK) << qj_last_error();
    qj_gemm_plan_destroy(p);
  }
  qj_weights_destroy(w);
  for (int64_t i = 0; i < m * n; ++i) {
    ASSERT_TRUE(std::isinf(c32[i])) << c32[i];  // (the case this test is about)
    EXPECT_EQ(c16[i], qj::f32_to_bf16(c32[i])) << std::hex << c16[i] << " from " << qj::f32_bits(c32[i]);
  }
}

TEST_P(GemmInt8, KBlocks) {
  if (isa() == QJ_ISA_SCALAR) GTEST_SKIP() << "the scalar tier has no cache blocking";
  // 1 group per block: every block but the first and last is a middle stage; 5: odd blocks for
  // the dual-set kernels of 1 and 2 rows, and a short last block (K = 130: 33 or 65 groups).
  for (int64_t kc : {1, 5, 16}) {
    ForceKBlock force(kc);
    {  // the plan holds the three stages and uses them for tiles of every size
      std::unique_ptr<qj::GemmPlan> plan = internal_s8_plan(isa(), 130, 40, 0.01f, 0.1f, QJ_U8, 0.5f);
      ASSERT_TRUE(plan);
      EXPECT_EQ(plan->blk.kc, kc);
      EXPECT_EQ(plan->blk.kc_min_rows, 1);
      for (const auto& stage : plan->kblock_kernels) {
        ASSERT_EQ(stage.size(), static_cast<size_t>(plan->blk.mr));
        for (const qj::KernelRef& r : stage) EXPECT_NE(r.entry(), nullptr);
      }
    }
    uint32_t seed = 2000 + static_cast<uint32_t>(kc) * 100;
    for (int64_t m : m_values(257, 130, false, {13})) {
      GemmCase c;
      c.m = m;
      c.n = 257;
      c.k = 130;
      c.b_zp = (m & 1) != 0;
      c.relu = (m & 2) != 0;
      c.seed = ++seed;
      for (qj_dtype ct : kOutTypes) EXPECT_CASE(with_out(c, ct));
    }
    // Every A type, partitions, and the extreme sums of the full value range across blocks.
    for (qj_dtype at : {QJ_U8, QJ_S8, QJ_F32, QJ_BF16}) {
      GemmCase c;
      c.m = 11;
      c.n = 33;
      c.k = 63;
      c.a_type = at;
      c.threads = 3;
      c.seed = ++seed;
      EXPECT_CASE(with_out(c, QJ_F32));
      EXPECT_CASE(with_out(c, QJ_S8));
    }
    // u8 rows read in place (K whole quads, no weight zero points): one-row tiles of a
    // partitioned call, and the in-place tiles of longer ones.
    for (int64_t m : {1, 2, 9}) {
      GemmCase c;
      c.m = m;
      c.n = 70;
      c.k = 128;
      c.b_zp = false;
      c.threads = 2;
      c.seed = ++seed;
      EXPECT_CASE(c);
      EXPECT_CASE(with_out(c, QJ_S32));
    }
    for (int v : {qjt::kMaxPos, qjt::kMaxNeg}) {
      GemmCase c;
      c.m = 7;
      c.n = 17;
      c.k = 513;
      c.values = v;
      c.b_zp = true;
      c.c_type = QJ_S32;
      c.bias = false;
      c.seed = ++seed;
      EXPECT_CASE(c);
    }
  }
  {  // the blocking's own choice: tiles of A larger than half the L1, mixed tile sizes
    const int64_t k = 4096, n = 40;
    const int nr = qj::weights_nr(isa(), n), kg = qj::weights_kg(isa());
    const qj::GemmBlocking b = qj::choose_blocking(isa(), nr, false, k, 1, kg);
    ASSERT_GT(b.kc, 0);
    ASSERT_GT(b.kc_min_rows, 1);
    uint32_t seed = 2900;
    for (int64_t m : {b.kc_min_rows - 1, 2 * b.kc_min_rows - 1, 3 * b.kc_min_rows - 1, 2 * b.mr + 1}) {
      GemmCase c;
      c.m = m;
      c.n = n;
      c.k = k;
      c.b_zp = true;
      c.seed = ++seed;
      EXPECT_CASE(c);
    }
  }
  {  // group scales fold each group in fp32: never K-blocked
    ForceKBlock force(4);
    EXPECT_EQ(qj::choose_blocking(isa(), 64, true, 1024, 4, qj::weights_kg(isa())).kc, 0);
  }
}

// --- Weights streamed from beyond L3 (src/ops/gemm.cpp, s8_prefetch_bytes) ---------------------------
// On a CPU without AVX-512, s8 weights of 16 MiB and more as packed: the kernels of two rows and
// more prefetch 16 KiB ahead, and calls are K-blocked only with kblock_min_tiles row tiles or more
// (the K-blocked kernels cannot prefetch). Zen 5 prefetches too (weights of twice L2), without the
// tile rule. The rule written out here; then calls on both sides of the tile count, exact.
TEST_P(GemmInt8, StreamedWeightsPrefetchRule) {
  if (isa() == QJ_ISA_SCALAR) GTEST_SKIP() << "no JIT kernels at the scalar tier";
  const bool avx2_cpu = qj::cpu_isa() < QJ_ISA_AVX512;
  for (int64_t k : {4096, 16384}) {
    const int64_t n = 1024;  // 16 MiB at K = 16384 whether a weight takes 1 or 2 bytes
    std::unique_ptr<qj::GemmPlan> plan = internal_s8_plan(isa(), k, n, 0.01f, 0.05f, QJ_U8, 0.5f);
    ASSERT_TRUE(plan);
    const size_t bytes = plan->w->panel_bytes() * static_cast<size_t>(plan->w->n_panels);
    const bool streamed = avx2_cpu && bytes >= (size_t{16} << 20);
    const bool far = qj::amd_family() >= 0x1a && bytes >= 2 * qj::l2_cache_bytes();
    // The GEMV (kernels[0], one row) prefetches 16 KiB ahead from half of L3 on such a CPU.
    const size_t l3 = qj::l3_cache_bytes();
    const bool gemv_pf = avx2_cpu && 2 * bytes >= l3;
    EXPECT_EQ(plan->kblock_min_tiles, streamed ? 8 : 0) << "k " << k << ", " << bytes << " bytes";
    for (size_t r = 0; r < plan->kernels.size(); ++r) {
      EXPECT_EQ(plan->kernels[r].name().find("_pf16384") != std::string::npos,
                r >= 1 ? streamed || far : gemv_pf)
          << plan->kernels[r].name() << ", " << bytes << " bytes, L3 " << l3;
      EXPECT_EQ(plan->kernels[r].name().find("_pf") != std::string::npos, r >= 1 ? streamed || far : gemv_pf)
          << plan->kernels[r].name() << ", " << bytes << " bytes, L3 " << l3;
    }
    // The one-row pair form (AVX2) prefetches 4 KiB ahead where the GEMV prefetches.
    EXPECT_EQ(static_cast<bool>(plan->pair), isa() == QJ_ISA_AVX2);
    if (plan->pair) {
      EXPECT_EQ(plan->pair.name().find("_pf4096") != std::string::npos, gemv_pf) << plan->pair.name();
      EXPECT_EQ(plan->pair.name().find("_pf") != std::string::npos, gemv_pf) << plan->pair.name();
    }
    if (gemv_pf) {
      GemmCase c;
      c.m = 1;
      c.n = n;
      c.k = k;
      c.seed = 3690;
      EXPECT_CASE(c);
    }
    if (plan->blk.kc > 0) {
      const int rows = std::max(plan->blk.kc_min_rows, 1);
      EXPECT_EQ(qj::gemm_call_kblocked(*plan, 7, rows), !streamed) << "k " << k;
      EXPECT_TRUE(qj::gemm_call_kblocked(*plan, 8, rows)) << "k " << k;
      if (rows > 1) EXPECT_FALSE(qj::gemm_call_kblocked(*plan, 8, rows - 1)) << "k " << k;
    }
    if (!streamed) continue;
    // 16 MiB of packed weights (the AVX2 tier): a call of few tiles unblocked with the prefetch, one
    // of kblock_min_tiles tiles K-blocked (this K is blocked for tiles of kc_min_rows rows).
    ASSERT_GT(plan->blk.kc, 0);
    uint32_t seed = 3700;
    for (int64_t m : {int64_t{2}, int64_t{plan->blk.mr} + 1, int64_t{8} * plan->blk.mr}) {
      GemmCase c;
      c.m = m;
      c.n = n;
      c.k = k;
      c.b_zp = m % 2 == 1;
      c.seed = ++seed;
      EXPECT_CASE(c);
    }
  }
}

// --- Weights packed at another tier: the plan repacks them ------------------------------------------
TEST_P(GemmInt8, PlanRepacksWeightsOfAnotherTier) {
  uint32_t seed = 1300;
  for (qj_isa from : qjt::supported_isas()) {
    if (from == isa()) continue;
    for (qj_granularity gran : {QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
      GemmCase c;
      c.pack_isa = from;
      c.gran = gran;
      c.group = gran == QJ_GRAN_GROUP ? 64 : 0;
      c.k = 130 - (gran == QJ_GRAN_GROUP ? 2 : 0);
      c.n = 50;
      c.m = 11;
      c.b_zp = true;
      c.a_type = QJ_S8;
      c.seed = ++seed;
      EXPECT_CASE(with_out(c, QJ_F32));
      EXPECT_CASE(with_out(c, QJ_U8));
    }
  }
}

// --- Seeded random sample of combinations of every dimension ----------------------------------------
TEST_P(GemmInt8, RandomCombinations) {
  // (A TEST_P per tier, so qjt::Picker directly rather than qjt::for_each_random_case.)
  const uint32_t seed0 = qjt::random_seed(20240601u);
  qjt::Picker pick(seed0 + static_cast<uint32_t>(isa()));
  const qj_dtype a_types[] = {QJ_U8, QJ_S8, QJ_F32, QJ_BF16};
  const int64_t groups[] = {4, 32, 64, 128};
  const int iterations = qjt::random_iterations(150);
  for (int it = 0; it < iterations; ++it) {
    GemmCase c;
    c.seed = seed0 - 20240601u + 5000 + it;
    c.a_type = a_types[pick(4)];
    c.gran = static_cast<qj_granularity>(pick(3));
    if (c.gran == QJ_GRAN_GROUP) {
      c.group = groups[pick(4)];
      c.k = c.group * (1 + pick(5));
      if (pick(4) == 0) c.group = c.k;
    } else {
      // short K in multiples of 4 a quarter of the time: the narrow-N and tall kernels
      c.k = pick(4) == 0 ? 4 * (1 + pick(20)) : 1 + pick(300);
    }
    c.n = 1 + pick(pick(4) == 0 ? 300 : 70);
    const int r = mr(c.n, c.k, c.gran == QJ_GRAN_GROUP && c.group != c.k);
    const int mm = pick(5);
    c.m = mm == 0   ? 1 + pick(r + 1)
          : mm == 1 ? r + pick(3)
          : mm == 2 ? 1 + pick(3)
          : mm == 3 ? 1 + pick(120)
                    : 100 + pick(700);  // several row blocks of the tall kernels
    if (c.m < 1) c.m = 1;
    c.a_zp = pick(2);
    c.b_zp = pick(2);
    c.bias = pick(2);
    c.relu = pick(3) == 0;
    c.layout = static_cast<qj_layout>(pick(2));
    c.lda_pad = pick(3) == 0 ? pick(9) : 0;
    c.ldc_pad = pick(3) == 0 ? pick(9) : 0;
    c.a_gran = pick(2) ? QJ_GRAN_ROW : QJ_GRAN_TENSOR;
    c.values = pick(5) == 0 ? qjt::kExtremes : qjt::kRandom;
    c.zero_row = pick(6) == 0;
    c.threads = pick(3) == 0 ? 1 + pick(4) : 1;
    c.parallel = c.threads > 1 && pick(2);
    qj_dtype ct = kOutTypes[pick(5)];
    if (ct == QJ_F32 && pick(2)) c.beta = pick(2) ? 0.5f : -1.0f;
    EXPECT_CASE(with_out(c, ct));
  }
}

// --- Reads and writes stay inside the buffers: A and C end at a PROT_NONE page ----------------------
// Run in a child process (death-test machinery) so an out-of-bounds access is a clean failure.
struct GuardedBuffer {
  uint8_t* base = nullptr;
  size_t map_bytes = 0;
  uint8_t* data = nullptr;  // `bytes` bytes ending exactly at the guard page
  GuardedBuffer(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t body = (bytes + page - 1) / page * page;
    map_bytes = body + page;
    void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base = static_cast<uint8_t*>(p);
    mprotect(base + body, page, PROT_NONE);
    data = base + body - bytes;
  }
  ~GuardedBuffer() {
    if (base) munmap(base, map_bytes);
  }
};

// One plan over random s8 weights, run with A and C at the very end of guard pages: 0 if the run
// succeeded, 1 if it failed, >= 100 if setting up failed (a fault ends the process).
int guarded_run(qj_dtype at, qj_dtype ct, int64_t m, int64_t n, int64_t k, uint32_t wseed) {
  const size_t asz = at == QJ_F32 ? 4 : at == QJ_BF16 ? 2 : 1;
  const size_t csz = ct == QJ_U8 || ct == QJ_S8 ? 1 : ct == QJ_BF16 ? 2 : 4;
  std::vector<int8_t> wq = qjt::random_ints<int8_t>(k * n, -128, 127, wseed);
  std::vector<float> scales(n, 0.01f);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.granularity = QJ_GRAN_CHANNEL;
  wd.scales = scales.data();
  qj_weights w = nullptr;
  if (qj_weights_pack(&wd, wq.data(), n, &w) != QJ_OK) return 100;
  qj_gemm_desc d{};
  d.a_type = at;
  d.a_scale = 0.1f;
  d.a_zero_point = at == QJ_U8 ? 7 : 0;
  d.c_type = ct;
  d.c_scale = 0.5f;
  qj_gemm_plan p = nullptr;
  if (qj_gemm_plan_create(&d, w, &p) != QJ_OK) return 101;
  GuardedBuffer a(m * k * asz), c(m * n * csz);
  if (!a.data || !c.data) return 102;
  std::vector<uint8_t> bytes = qjt::random_ints<uint8_t>(m * k * asz, 0, 255, 9);
  if (at == QJ_F32)
    for (int64_t i = 0; i < m * k; ++i) {
      float v = static_cast<float>(bytes[i * 4]) - 128.0f;
      std::memcpy(&bytes[i * 4], &v, 4);
    }
  if (at == QJ_BF16)
    for (int64_t i = 0; i < m * k; ++i) {
      uint16_t h = qj::f32_to_bf16(static_cast<float>(bytes[i * 2]) - 128.0f);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  std::memcpy(a.data, bytes.data(), bytes.size());
  const int bad = qj_gemm_run(p, m, a.data, k, c.data, n, nullptr) != QJ_OK ? 1 : 0;
  qj_gemm_plan_destroy(p);
  qj_weights_destroy(w);
  return bad;
}

int guarded_runs(qj_isa isa) {
  qjt::IsaCap cap(isa);
  int bad = 0;
  for (qj_dtype at : {QJ_U8, QJ_S8, QJ_F32, QJ_BF16})
    for (qj_dtype ct : {QJ_U8, QJ_S32, QJ_F32, QJ_BF16})
      for (int64_t k : {4, 64, 67})
        for (int64_t n : {1, 15, 17, 49})
          for (int64_t m : {1, 2, 7}) {
            if (ct == QJ_S32 && (at == QJ_F32 || at == QJ_BF16)) continue;
            const int r = guarded_run(at, ct, m, n, k, 7);
            if (r >= 100) return r;
            bad += r;
          }
  // Tall N (u8 A in place, B in registers, two banks of rows per iteration).
  for (qj_dtype ct : {QJ_U8, QJ_S32, QJ_BF16})
    for (int64_t k : {4, 36, 76})
      for (int64_t n : {3, 16, 40})
        for (int64_t m : {16, 17, 33}) {
          const int r = guarded_run(QJ_U8, ct, m, n, k, 13);
          if (r >= 100) return r;
          bad += r;
        }
  // Narrow N (u8 A in place, 8-byte K chunks ending at each row's last byte).
  for (qj_dtype ct : {QJ_U8, QJ_S8, QJ_S32, QJ_F32})
    for (int64_t k : {8, 12, 20, 36, 100})
      for (int64_t n : {4, 8})
        for (int64_t m : {8, 9, 16}) {
          const int r = guarded_run(QJ_U8, ct, m, n, k, 11);
          if (r >= 100) return r;
          bad += r;
        }
  return bad;
}

TEST_P(GemmInt8, StaysInsideBuffersDeathTest) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const qj_isa i = isa();
  EXPECT_EXIT(std::exit(guarded_runs(i)), ::testing::ExitedWithCode(0), "")
      << "a kernel read or wrote past the end of A or C (or a run failed)";
}

INSTANTIATE_TEST_SUITE_P(AllIsas, GemmInt8, ::testing::ValuesIn(qjt::supported_isas()),
                         [](const ::testing::TestParamInfo<qj_isa>& i) {
                           return qjt::isa_param_name(i.param);
                         });

// --- qj_weights_quantize_pack: the computed scales and values against the test's own quantization ---
// Independent definition (header): symmetric, scale = amax / 127 over the tensor, each column or
// each (group, column); q = clamp(rne(w / scale), -127, 127) with w / scale an fp32 division. A
// slice whose amax is 0 quantizes to all zeros; its scale is then irrelevant to every output (the
// sums are 0), so the test uses 1. s32 output checks every q exactly; f32 output checks the scales.
struct OwnQuant {
  std::vector<int32_t> q;  // K x N
  std::vector<float> scales;
};

OwnQuant own_quantize(const std::vector<float>& w, int64_t k, int64_t n, int64_t ld, qj_layout layout,
                      qj_granularity gran, int64_t group) {
  auto at = [&](int64_t kk, int64_t c) { return layout == QJ_LAYOUT_KN ? w[kk * ld + c] : w[c * ld + kk]; };
  const int64_t groups = gran == QJ_GRAN_GROUP ? k / group : 1, gk = k / groups;
  const int64_t count = gran == QJ_GRAN_TENSOR ? 1 : groups * n;
  auto slot = [&](int64_t kk, int64_t c) { return gran == QJ_GRAN_TENSOR ? 0 : (kk / gk) * n + c; };
  std::vector<double> amax(count, 0.0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) amax[slot(kk, c)] = std::max(amax[slot(kk, c)], std::fabs(double(at(kk, c))));
  OwnQuant o;
  o.scales.resize(count);
  for (int64_t i = 0; i < count; ++i) o.scales[i] = amax[i] > 0 ? static_cast<float>(amax[i]) / 127.0f : 1.0f;
  o.q.resize(k * n);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) {
      float t = at(kk, c) / o.scales[slot(kk, c)];
      // Round half to even by hand (no shared helper): nearest integer, ties to the even one.
      double fl = std::floor(double(t)), frac = double(t) - fl;
      double r = frac > 0.5 ? fl + 1 : frac < 0.5 ? fl : (std::fmod(fl, 2.0) == 0 ? fl : fl + 1);
      r = std::min(127.0, std::max(-127.0, r));
      o.q[kk * n + c] = static_cast<int32_t>(r);
    }
  return o;
}

TEST(GemmInt8Quantize, QuantizePackMatchesOwnQuantization) {
  struct Q {
    qj_granularity gran;
    int64_t group, k, n;
    qj_layout layout;
  };
  const Q qs[] = {{QJ_GRAN_TENSOR, 0, 70, 37, QJ_LAYOUT_KN},   {QJ_GRAN_CHANNEL, 0, 70, 37, QJ_LAYOUT_NK},
                  {QJ_GRAN_CHANNEL, 0, 1, 17, QJ_LAYOUT_KN},   {QJ_GRAN_GROUP, 32, 128, 20, QJ_LAYOUT_KN},
                  {QJ_GRAN_GROUP, 64, 192, 33, QJ_LAYOUT_NK},  {QJ_GRAN_GROUP, 128, 256, 16, QJ_LAYOUT_KN},
                  {QJ_GRAN_GROUP, 90, 90, 21, QJ_LAYOUT_NK}};
  uint32_t seed = 77;
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (const Q& q : qs) {
      ++seed;
      const int64_t ld = (q.layout == QJ_LAYOUT_KN ? q.n : q.k) + 3;
      const int64_t rows = q.layout == QJ_LAYOUT_KN ? q.k : q.n;
      std::vector<float> w = qjt::random_floats(rows * ld, -2.0f, 2.0f, seed);
      // Planted slices: column 0 all zero (amax 0); column 1 with amax = 127 so the scale is 1 and
      // x.5 values are exact ties (2.5 -> 2, 3.5 -> 4, -2.5 -> -2); column 2 with one huge value.
      auto put = [&](int64_t kk, int64_t c, float v) {
        if (c < q.n) (q.layout == QJ_LAYOUT_KN ? w[kk * ld + c] : w[c * ld + kk]) = v;
      };
      const float ties[] = {2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, 126.5f, -126.5f};
      for (int64_t kk = 0; kk < q.k; ++kk) {
        put(kk, 0, 0.0f);
        put(kk, 1, kk % 7 == 0 ? 127.0f : ties[kk % 8]);
        if (kk == q.k / 2) put(kk, 2, -1000.0f);
      }
      qj_weights_desc wd{};
      wd.dtype = QJ_S8;
      wd.k = q.k;
      wd.n = q.n;
      wd.layout = q.layout;
      wd.granularity = q.gran;
      wd.group_size = q.group;
      qj_weights pw = nullptr;
      ASSERT_EQ(qj_weights_quantize_pack(&wd, w.data(), ld, &pw), QJ_OK) << qj_last_error();
      OwnQuant own = own_quantize(w, q.k, q.n, ld, q.layout, q.gran, q.group);
      const int64_t m = 9, k = q.k, n = q.n;
      std::vector<uint8_t> a = qjt::random_ints<uint8_t>(m * k, 0, 255, seed + 1);
      // Row 0 of A picks out K index 0 (a one-hot row): its s32 outputs are q[0][n] - za-free.
      for (int64_t j = 0; j < k; ++j) a[j] = j == 0 ? 1 : 0;
      qj::ref::IntWeights rw;
      rw.k = k;
      rw.n = n;
      rw.gran = q.gran == QJ_GRAN_GROUP && q.group == k ? QJ_GRAN_CHANNEL : q.gran;
      rw.group_size = rw.gran == QJ_GRAN_GROUP ? q.group : 0;
      rw.scales = own.scales;
      rw.q = own.q;
      for (qj_dtype ct : {QJ_S32, QJ_F32, QJ_U8}) {
        if (ct == QJ_S32 && rw.gran == QJ_GRAN_GROUP) continue;
        qj_gemm_desc d{};
        d.a_type = QJ_U8;
        d.a_scale = 0.02f;
        d.c_type = ct;
        d.c_scale = 0.3f;
        d.c_zero_point = ct == QJ_U8 ? 128 : 0;
        qj_gemm_plan p = nullptr;
        ASSERT_EQ(qj_gemm_plan_create(&d, pw, &p), QJ_OK) << qj_last_error();
        std::vector<uint8_t> c(m * n * 4, 0xcd), e(m * n * 4, 0xcd);
        ASSERT_EQ(qj_gemm_run(p, m, a.data(), k, c.data(), n, nullptr), QJ_OK) << qj_last_error();
        qj::ref::gemm_int(d, rw, m, a.data(), k, e.data(), n);
        const size_t esz = ct == QJ_U8 ? 1 : 4;
        for (size_t i = 0; i < m * n * esz; ++i)
          if (c[i] != e[i]) {
            ADD_FAILURE() << "quantize_pack differs from the test's own quantization: isa="
                          << qj_isa_name(isa) << " gran=" << q.gran << " group=" << q.group
                          << " layout=" << q.layout << " out=" << qj_dtype_name(ct) << " byte " << i
                          << " (row " << i / esz / n << ", col " << i / esz % n << ")";
            break;
          }
        qj_gemm_plan_destroy(p);
      }
      qj_weights_destroy(pw);
    }
  }
}

}  // namespace
