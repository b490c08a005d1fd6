// INT4 (S4 / U4) weight GEMM against src/ref, bit for bit, at every ISA tier this CPU supports.
//
// The weights are handed to qj_weights_pack as nibbles (both layouts, odd leading dimensions),
// the reference multiplies the same integers (ref::gemm_int: int32 sums per group folded in fp32
// in group order), and the whole output buffer, padding included, must be identical. Cases sweep
// M around the register tile, N around the panel width, K around the 8-wide decode step and the
// group size, every group size, zero points (per tensor, channel, group), every A type (u8 / s8
// with zero points, fp32 / bf16 quantized on the fly) and every output stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "src/core/isa.h"
#include "src/formats/half.h"
#include "src/ops/gemm.h"
#include "src/ops/int_weights.h"
#include "src/ref/gemm_ref.h"
#include "test/test_util.h"

namespace {

enum Values { kRandom, kExtremes };

struct Int4Case {
  int64_t m = 1, n = 1, k = 8;
  qj_dtype w_type = QJ_S4;
  qj_dtype a_type = QJ_U8;
  qj_dtype c_type = QJ_F32;
  qj_granularity gran = QJ_GRAN_GROUP;
  int64_t group = 32;
  bool zp = false;
  bool a_zp = true;
  bool bias = true;
  bool relu = false;
  float beta = 0.0f;
  qj_layout layout = QJ_LAYOUT_KN;
  qj_granularity a_gran = QJ_GRAN_ROW;
  int64_t lda_pad = 0, ldc_pad = 0, wld_pad = 1;
  int values = kRandom;
  int threads = 1;
  uint32_t seed = 1;

  std::string str() const {
    std::ostringstream o;
    o << "m=" << m << " n=" << n << " k=" << k << " w=" << qj_dtype_name(w_type)
      << " a=" << qj_dtype_name(a_type) << " c=" << qj_dtype_name(c_type) << " gran=" << gran
      << " group=" << group << " zp=" << zp << " a_zp=" << a_zp << " bias=" << bias
      << " relu=" << relu << " beta=" << beta << " layout=" << layout << " a_gran=" << a_gran
      << " values=" << values << " threads=" << threads << " seed=" << seed
      << " isa=" << qj_isa_name(qj_max_isa());
    return o.str();
  }
};

size_t dt_size(qj_dtype t) {
  switch (t) {
    case QJ_U8: case QJ_S8: return 1;
    case QJ_BF16: case QJ_F16: return 2;
    default: return 4;
  }
}

std::string run_case(const Int4Case& c) {
  std::mt19937 g(c.seed);
  const int64_t m = c.m, n = c.n, k = c.k;
  const int qlo = c.w_type == QJ_S4 ? -8 : 0, qhi = c.w_type == QJ_S4 ? 7 : 15;
  std::vector<int32_t> q(k * n);
  for (auto& x : q) {
    x = std::uniform_int_distribution<int>(qlo, qhi)(g);
    if (c.values == kExtremes) x = (x & 1) ? qhi : qlo;
  }
  for (int64_t i = 0; i < std::min<int64_t>(q.size(), 5); ++i) q[i] = (i & 1) ? qlo : qhi;
  const int64_t row_bytes = c.layout == QJ_LAYOUT_KN ? n : (k + 1) / 2;
  const int64_t wld = row_bytes + c.wld_pad;
  std::vector<uint8_t> nib = qjt::to_nibbles(q, k, n, c.layout, wld);

  const bool grouped = c.gran == QJ_GRAN_GROUP;
  const int64_t groups = grouped ? k / c.group : 1;
  const int64_t count = c.gran == QJ_GRAN_TENSOR ? 1 : c.gran == QJ_GRAN_CHANNEL ? n : groups * n;
  std::vector<float> scales(count);
  std::vector<int32_t> zps(count, 0);
  for (auto& s : scales) s = std::uniform_real_distribution<float>(0.01f, 0.2f)(g);
  if (c.zp)
    for (auto& z : zps) {
      z = std::uniform_int_distribution<int>(qlo, qhi)(g);
      if (c.values == kExtremes) z = (z & 1) ? qhi : qlo;
    }

  qj_weights_desc wd{};
  wd.dtype = c.w_type;
  wd.k = k;
  wd.n = n;
  wd.layout = c.layout;
  wd.granularity = c.gran;
  wd.group_size = c.group;
  wd.scales = scales.data();
  wd.zero_points = c.zp ? zps.data() : nullptr;
  qj_weights w = nullptr;
  if (qj_weights_pack(&wd, nib.data(), wld, &w) != QJ_OK) return std::string("pack: ") + qj_last_error();

  const int64_t lda = k + c.lda_pad;
  std::vector<uint8_t> a(m * lda * dt_size(c.a_type));
  if (c.a_type == QJ_U8 || c.a_type == QJ_S8) {
    for (auto& x : a) {
      x = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 255)(g));
      if (c.values == kExtremes) x = (x & 1) ? 0x7f : 0x80;  // s8 127 / -128; u8 127 / 128
      if (c.values == kExtremes && c.a_type == QJ_U8) x = (x & 1) ? 255 : 0;
    }
  } else {
    for (int64_t i = 0; i < m * lda; ++i) {
      float v = std::uniform_real_distribution<float>(-3.0f, 3.0f)(g);
      if (c.a_type == QJ_F32) {
        std::memcpy(&a[i * 4], &v, 4);
      } else {
        uint16_t h = qj::f32_to_bf16(v);
        std::memcpy(&a[i * 2], &h, 2);
      }
    }
  }
  std::vector<float> bias(n);
  for (auto& b : bias) b = std::uniform_real_distribution<float>(-20.0f, 20.0f)(g);

  qj_gemm_desc d{};
  d.a_type = c.a_type;
  d.a_scale = 0.03f;
  d.a_zero_point = !c.a_zp ? 0 : (c.a_type == QJ_U8 ? (c.values == kExtremes ? 255 : 131) : (c.values == kExtremes ? -128 : -7));
  d.a_granularity = c.a_gran;
  d.c_type = c.c_type;
  d.c_scale = c.c_type == QJ_U8 || c.c_type == QJ_S8 ? 0.37f : 1.0f;
  d.c_zero_point = c.c_type == QJ_U8 ? 100 : (c.c_type == QJ_S8 ? -3 : 0);
  d.bias = c.bias ? bias.data() : nullptr;
  d.activation = c.relu ? QJ_ACT_RELU : QJ_ACT_NONE;
  d.beta = c.beta;
  qj_gemm_plan plan = nullptr;
  if (std::string e = qjt::create_jit_plan(d, w, &plan); !e.empty()) {
    qj_weights_destroy(w);
    return e;
  }

  const int64_t ldc = n + c.ldc_pad;
  const size_t esz = dt_size(c.c_type);
  std::vector<uint8_t> out(m * ldc * esz + 64);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + 3);
  if (c.c_type == QJ_F32)
    for (int64_t i = 0; i < m * ldc; ++i) {
      float v = std::uniform_real_distribution<float>(-4.0f, 4.0f)(g);
      std::memcpy(&out[i * 4], &v, 4);
    }
  std::vector<uint8_t> expect = out;
  std::string err;
  for (int t = 0; t < c.threads && err.empty(); ++t) {
    qj_partition part{t, c.threads};
    if (qj_gemm_run(plan, m, a.data(), lda, out.data(), ldc, &part) != QJ_OK)
      err = std::string("run: ") + qj_last_error();
  }

  qj::ref::IntWeights rw;
  rw.k = k;
  rw.n = n;
  rw.gran = grouped && c.group == k ? QJ_GRAN_CHANNEL : c.gran;
  rw.group_size = rw.gran == QJ_GRAN_GROUP ? c.group : 0;
  rw.scales = scales;
  if (c.zp) rw.zero_points = zps;
  rw.q = q;
  qj::ref::gemm_int(d, rw, m, a.data(), lda, expect.data(), ldc);

  if (err.empty() && out != expect) {
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != expect[i]) {
        int64_t elem = static_cast<int64_t>(i / esz);
        std::ostringstream o;
        o << "mismatch at byte " << i << " (row " << elem / ldc << ", col " << elem % ldc << "): got "
          << int(out[i]) << " want " << int(expect[i]);
        if (c.c_type == QJ_F32 || c.c_type == QJ_S32) {
          int32_t gi, wi;
          float gf, wf;
          std::memcpy(&gi, &out[elem * 4], 4);
          std::memcpy(&wi, &expect[elem * 4], 4);
          std::memcpy(&gf, &gi, 4);
          std::memcpy(&wf, &wi, 4);
          o << " (as s32 " << gi << " vs " << wi << ", as f32 " << gf << " vs " << wf << ")";
        }
        err = o.str();
        break;
      }
  }
  qj_gemm_plan_destroy(plan);
  qj_weights_destroy(w);
  return err;
}

#define EXPECT_CASE(c)                       \
  do {                                       \
    const Int4Case& cc_ = (c);               \
    EXPECT_EQ(run_case(cc_), "") << cc_.str(); \
  } while (0)

const qj_dtype kWTypes[] = {QJ_S4, QJ_U4};

TEST(GemmInt4, BasicEveryTier) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype wt : kWTypes)
      for (bool zp : {false, true}) {
        Int4Case c;
        c.w_type = wt;
        c.zp = zp;
        c.m = 5, c.n = 37, c.k = 96, c.group = 32;
        EXPECT_CASE(c);
        c.gran = QJ_GRAN_CHANNEL;
        c.k = 70;
        EXPECT_CASE(c);
        c.gran = QJ_GRAN_TENSOR;
        EXPECT_CASE(c);
      }
  }
}

// M around the tile heights (mr = 1..12 depending on tier and granularity), N around the panel
// widths (8, 16, 32), K around the 8-wide step.
TEST(GemmInt4, ShapeSweep) {
  const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 9, 12, 13, 25};
  const int64_t ns[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 65};
  const int64_t ks[] = {1, 7, 8, 9, 15, 16, 23, 33, 64, 100};
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 10;
    for (int64_t m : ms)
      for (int64_t n : ns) {
        Int4Case c;
        c.m = m;
        c.n = n;
        c.k = ks[(m * 7 + n) % 10];
        c.gran = QJ_GRAN_CHANNEL;
        c.w_type = kWTypes[(m + n) % 2];
        c.zp = (m + n) % 3 == 0;
        c.a_type = (n % 2) ? QJ_U8 : QJ_S8;
        c.layout = (m % 2) ? QJ_LAYOUT_KN : QJ_LAYOUT_NK;
        c.c_type = (n % 3 == 0) ? QJ_U8 : QJ_F32;
        c.lda_pad = m % 3;
        c.ldc_pad = n % 2;
        c.seed = ++seed;
        EXPECT_CASE(c);
        // The same shape grouped (K a multiple of the group).
        c.gran = QJ_GRAN_GROUP;
        c.group = 32;
        c.k = 32 * (1 + (m + n) % 3);
        c.c_type = (n % 3 == 0) ? QJ_BF16 : QJ_F32;
        EXPECT_CASE(c);
      }
  }
}

// The large and FBGEMM shapes (qjt::large_and_fbgemm_shapes): per channel (any K) with u8 A and
// requantized u8 C, and grouped (G = 32 where it divides K, else G = K) with fp32 A and fp32 C.
TEST(GemmInt4, LargeAndFbgemmShapes) {
  qjt::each_large_shape_at_every_tier(1, [](const qjt::Shape& s, uint32_t seed) {
    Int4Case c;
    c.m = s.m, c.n = s.n, c.k = s.k, c.seed = seed;
    c.w_type = (s.n % 2) ? QJ_U4 : QJ_S4;
    c.gran = QJ_GRAN_CHANNEL;
    c.zp = true;
    c.c_type = QJ_U8;
    EXPECT_CASE(c);
    c.gran = QJ_GRAN_GROUP;
    c.group = s.k % 32 == 0 ? 32 : s.k;
    c.a_type = QJ_F32;
    c.c_type = QJ_F32;
    c.seed = seed + 1000;
    EXPECT_CASE(c);
  });
}

// The kernel names of an fp32-A plan over S4 / U4 weights (names[r - 1]: the kernel of r rows;
// "_l2" / "_stream" mark the one-row forms of key.param[1], codegen/gemm_int.h), and the pair
// form's kernel name in *pair_name (empty when the plan has none).
std::vector<std::string> int4_kernel_names(qj_isa isa, qj_dtype wt, int64_t n, int64_t k, qj_granularity gran,
                                           size_t* packed_bytes, std::string* pair_name = nullptr) {
  qj_weights_desc wd{};
  wd.dtype = wt;
  wd.k = k;
  wd.n = n;
  wd.layout = QJ_LAYOUT_KN;
  wd.granularity = gran;
  wd.group_size = gran == QJ_GRAN_GROUP ? 128 : 0;
  std::vector<float> scales(static_cast<size_t>(n * (gran == QJ_GRAN_GROUP ? k / 128 : 1)), 0.5f);
  wd.scales = scales.data();
  std::vector<uint8_t> nib(static_cast<size_t>(k * ((n + 1) / 2)), 0x11);
  std::shared_ptr<qj::PackedWeights> w;
  std::unique_ptr<qj::GemmPlan> p;
  qj_gemm_desc gd{};
  gd.a_type = QJ_F32;
  gd.c_type = QJ_F32;
  std::vector<std::string> names;
  if (qj::pack_int_weights(wd, nib.data(), (n + 1) / 2, isa, &w) != QJ_OK ||
      qj::gemm_plan_create(gd, w, &p) != QJ_OK) {
    ADD_FAILURE() << qj_last_error();
    return names;
  }
  *packed_bytes = w->panel_bytes() * static_cast<size_t>(w->n_panels);
  for (const auto& ref : p->kernels) names.push_back(ref.name());
  if (pair_name) *pair_name = p->pair ? p->pair.name() : std::string();
  return names;
}

// Which one-row kernels take a form (the rule written out here): the L2 form on the VNNI tier for
// packed weights of at most 5/8 of L2; the streaming form on the VNNI tier of Zen 5 for weights
// of at least 16 MiB and twice L2 (streamed from DRAM; these K keep the high nibbles scaled);
// neither for two rows or more; the pair form at the AVX2 tier. And the one-row weight prefetch
// from 16 MiB of weights up: 16 KiB ahead at the AVX-512 tiers (at every tier on Zen 5); 8 KiB on
// a CPU without AVX-512.
TEST(GemmInt4, GemvFormRule) {
  const size_t l2 = qj::l2_cache_bytes();
  struct Size {
    int64_t n, k;
    qj_granularity gran;
  };
  const Size sizes[] = {{1024, 1024, QJ_GRAN_CHANNEL}, {1024, 1024, QJ_GRAN_GROUP}, {2048, 1024, QJ_GRAN_GROUP},
                        {8200, 4096, QJ_GRAN_CHANNEL}};
  for (qj_isa isa : qjt::supported_isas()) {
    if (isa < QJ_ISA_AVX2) continue;  // (no JIT kernels below AVX2)
    qjt::IsaCap cap(isa);
    for (const Size& sz : sizes) {
      size_t bytes = 0;
      std::string pair;
      const auto names = int4_kernel_names(isa, QJ_S4, sz.n, sz.k, sz.gran, &bytes, &pair);
      ASSERT_FALSE(names.empty());
      // the pair form at the AVX2 tier (these N are many panels), with the one-row kernel's key,
      // and where that prefetches, 4 KiB ahead
      EXPECT_EQ(pair.find("_pair") != std::string::npos, isa == QJ_ISA_AVX2) << qj_isa_name(isa) << ": " << pair;
      if (!pair.empty()) {
        const std::string one = names[0].substr(0, names[0].find("_pf"));
        const bool pf = one.size() < names[0].size();
        EXPECT_EQ(pair, one + "_pair" + (pf ? "_pf4096" : "")) << names[0];
      }
      const bool l2_form = isa >= QJ_ISA_AVX512_VNNI && bytes * 8 <= l2 * 5;
      const bool stream_form = !l2_form && isa >= QJ_ISA_AVX512_VNNI && qj::amd_family() >= 0x1a &&
                               bytes >= 2 * l2 && bytes >= (size_t{16} << 20);
      for (size_t r = 1; r <= names.size(); ++r) {
        const std::string& name = names[r - 1];
        const std::string where = std::string(qj_isa_name(isa)) + " " + std::to_string(sz.n) + " x " +
                                  std::to_string(sz.k) + " (" + std::to_string(bytes) + " bytes, L2 " +
                                  std::to_string(l2) + ") rows " + std::to_string(r) + ": " + name;
        EXPECT_EQ(name.find("_l2") != std::string::npos, l2_form && r == 1) << where;
        EXPECT_EQ(name.find("_stream") != std::string::npos, stream_form && r == 1) << where;
        const bool big = bytes >= (size_t{16} << 20), avx2_cpu = qj_cpu_isa() < QJ_ISA_AVX512;
        const bool far_one_row = big && !avx2_cpu && (isa >= QJ_ISA_AVX512 || qj::amd_family() >= 0x1a);
        if (r == 1) {
          EXPECT_EQ(name.find("_pf16384") != std::string::npos, far_one_row) << where;
          EXPECT_EQ(name.find("_pf8192") != std::string::npos, big && avx2_cpu) << where;
        }
      }
    }
  }
}

// Every one-row form (forced, qj::gemm_force_int4_gemv_form) against the reference at M = 1, bit
// for bit, at every tier that has it: tails of N, per channel K = 1000 (an odd count of 8-K steps:
// the L2 form's unpaired last step, and the AVX2 tier's steps in fours with one left), groups,
// zero points, S4 and U4. The pair form (AVX2) also over odd and even panel counts, with and
// without a tail panel, and partitions that start slices on odd panels.
TEST(GemmInt4, GemvForms) {
  struct ForceForm {
    explicit ForceForm(int f) { qj::gemm_force_int4_gemv_form(f); }
    ~ForceForm() { qj::gemm_force_int4_gemv_form(-1); }
  };
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (int form : {0, 1, 2, 3}) {
      if ((form == 1 || form == 2) && isa < QJ_ISA_AVX512_VNNI) continue;
      if (form == 3 && isa != QJ_ISA_AVX2) continue;
      ForceForm force(form);
      uint32_t seed = 300 + static_cast<uint32_t>(form);
      for (int64_t n : {200, 1024, 16, 24, 203, 211})
        for (int64_t k : {1000, 1024})
          for (qj_granularity gran : {QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
            if (gran == QJ_GRAN_GROUP && k % 128 != 0) continue;
            if (n < 200 && form != 3) continue;
            Int4Case c;
            c.m = 1, c.n = n, c.k = k, c.gran = gran, c.group = 128, c.seed = ++seed;
            c.w_type = (n + k + gran) % 3 ? QJ_S4 : QJ_U4;
            c.zp = n == 200 || n == 211;
            c.a_type = gran == QJ_GRAN_GROUP ? QJ_F32 : QJ_U8;
            c.c_type = n == 203 ? QJ_BF16 : QJ_F32;
            EXPECT_EQ(run_case(c), "") << c.str() << " form " << form;
            if (form == 3 && n > 24) {  // slices of 26-27 panels starting on odd and even panels
              c.threads = 3;
              c.seed = ++seed;
              EXPECT_EQ(run_case(c), "") << c.str() << " form " << form;
            }
          }
      if (form > 0) {  // the forced form is the one that ran
        size_t bytes = 0;
        std::string pair;
        const auto names = int4_kernel_names(isa, QJ_U4, 200, 1000, QJ_GRAN_CHANNEL, &bytes, &pair);
        ASSERT_FALSE(names.empty());
        if (form == 3)
          EXPECT_NE(pair.find("_pair"), std::string::npos) << pair;
        else
          EXPECT_NE(names[0].find(form == 1 ? "_l2" : "_stream"), std::string::npos) << names[0];
      } else {
        size_t bytes = 0;
        std::string pair;
        int4_kernel_names(isa, QJ_U4, 200, 1000, QJ_GRAN_CHANNEL, &bytes, &pair);
        EXPECT_EQ(pair, "") << qj_isa_name(isa);  // form 0: one panel a pass
      }
    }
  }
}

// Every group size along K (including the whole of K), with and without zero points, at sizes
// where the number of groups and the tile tails vary.
TEST(GemmInt4, GroupSizes) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 100;
    for (int64_t group : {32, 64, 128, 256})
      for (int64_t k : {256, 768})
        for (qj_dtype wt : kWTypes) {
          Int4Case c;
          c.w_type = wt;
          c.gran = QJ_GRAN_GROUP;
          c.group = group;
          c.k = k;
          c.m = 7;
          c.n = 49;
          c.zp = (group / 32 + k) % 2 == 0;
          c.a_type = group == 64 ? QJ_F32 : (group == 128 ? QJ_BF16 : QJ_U8);
          c.c_type = group == 256 ? QJ_S8 : QJ_F32;
          c.seed = ++seed;
          EXPECT_CASE(c);
          c.group = k;  // one group: per channel
          c.c_type = QJ_S32;
          c.bias = false;
          c.a_type = QJ_U8;
          EXPECT_CASE(c);
        }
  }
}

// Every output stage and A type, zero points of every granularity.
TEST(GemmInt4, OutputStagesAndATypes) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 200;
    for (qj_dtype at : {QJ_U8, QJ_S8, QJ_F32, QJ_BF16})
      for (qj_dtype ct : {QJ_U8, QJ_S8, QJ_S32, QJ_F32, QJ_BF16})
        for (qj_granularity gr : {QJ_GRAN_TENSOR, QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
          const bool dynamic = at == QJ_F32 || at == QJ_BF16;
          if (ct == QJ_S32 && (dynamic || gr == QJ_GRAN_GROUP)) continue;
          Int4Case c;
          c.a_type = at;
          c.c_type = ct;
          c.gran = gr;
          c.group = 64;
          c.k = gr == QJ_GRAN_GROUP ? 192 : 77;
          c.m = 6 + (seed % 4);
          c.n = 40;
          c.w_type = kWTypes[seed % 2];
          c.zp = seed % 3 != 0;
          c.bias = ct != QJ_S32 && seed % 2 == 0;
          c.relu = ct != QJ_S32 && seed % 4 < 2;
          c.beta = ct == QJ_F32 && seed % 5 < 2 ? 0.5f : 0.0f;
          c.a_gran = seed % 3 == 1 ? QJ_GRAN_TENSOR : QJ_GRAN_ROW;
          if (dynamic && gr == QJ_GRAN_GROUP && seed % 2 == 0) c.a_gran = QJ_GRAN_GROUP;
          c.a_zp = seed % 2 == 1;
          c.seed = ++seed;
          EXPECT_CASE(c);
        }
  }
}

// Full value ranges: weights and zero points at their extremes, A at its extremes with the
// opposite zero point, long K: the largest sums (int32 exactness of the corrections).
TEST(GemmInt4, Extremes) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 300;
    for (qj_dtype wt : kWTypes)
      for (qj_dtype at : {QJ_U8, QJ_S8})
        for (bool zp : {false, true})
          for (int64_t m : {1, 3}) {  // m = 1: the dual (scaled high nibble) kernels
          Int4Case c;
          c.values = kExtremes;
          c.w_type = wt;
          c.a_type = at;
          c.zp = zp;
          c.gran = QJ_GRAN_CHANNEL;
          c.k = 4100;
          c.m = m;
          c.n = 33;
          c.c_type = QJ_S32;
          c.bias = false;
          c.seed = ++seed;
          EXPECT_CASE(c);
          c.gran = QJ_GRAN_GROUP;
          c.group = 256;
          c.k = 4096;
          c.c_type = QJ_F32;
          EXPECT_CASE(c);
        }
  }
}

// fp32 / bf16 A quantized per (row, weight group): every tile height (incl. the dual m = 1, 2
// kernels), group sizes, zero points.
TEST(GemmInt4, PerGroupActivations) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 500;
    for (int64_t m : {1, 2, 3, 6, 7, 13})
      for (int64_t group : {32, 128}) {
        Int4Case c;
        c.a_type = m % 2 ? QJ_F32 : QJ_BF16;
        c.a_gran = QJ_GRAN_GROUP;
        c.gran = QJ_GRAN_GROUP;
        c.group = group;
        c.k = group * 3;
        c.m = m;
        c.n = 40 + m;
        c.w_type = kWTypes[(m + group / 32) % 2];
        c.zp = m % 3 == 0;
        c.c_type = m == 7 ? QJ_U8 : QJ_F32;
        c.seed = ++seed;
        EXPECT_CASE(c);
      }
  }
}

// Per-group scales follow the activations' local range: with an outlier in one group, the other
// groups keep their precision (the reason to offer it). Checked against the exact product.
TEST(GemmInt4, PerGroupActivationsAreMoreAccurate) {
  const int64_t k = 256, n = 16, group = 64;
  std::vector<float> wf = qjt::random_floats(k * n, -1.0f, 1.0f, 21);
  std::vector<float> af = qjt::random_floats(k, -1.0f, 1.0f, 22);
  af[3] = 500.0f;  // outlier in group 0
  qj_weights_desc wd{};
  wd.dtype = QJ_S4;
  wd.k = k;
  wd.n = n;
  wd.granularity = QJ_GRAN_GROUP;
  wd.group_size = group;
  qj_weights w = nullptr;
  ASSERT_EQ(qj_weights_quantize_pack(&wd, wf.data(), n, &w), QJ_OK);
  std::shared_ptr<qj::PackedWeights> pw;
  ASSERT_EQ(qj::quantize_int_weights(wd, wf.data(), n, qj_max_isa(), &pw), QJ_OK);
  double err[2] = {0, 0};
  for (int mode = 0; mode < 2; ++mode) {
    qj_gemm_desc d{};
    d.a_type = QJ_F32;
    d.a_granularity = mode ? QJ_GRAN_GROUP : QJ_GRAN_ROW;
    d.c_type = QJ_F32;
    qj_gemm_plan p = nullptr;
    ASSERT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK) << qj_last_error();
    std::vector<float> c(n);
    ASSERT_EQ(qj_gemm_run(p, 1, af.data(), k, c.data(), n, nullptr), QJ_OK);
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0;  // with the dequantized weights: only A's quantization differs
      for (int64_t kk = 0; kk < k; ++kk)
        if (kk >= group) exact += static_cast<double>(af[kk]) * pw->q(kk, j) * pw->scale(kk / group, j);
      double g0 = 0;
      for (int64_t kk = 0; kk < group; ++kk) g0 += static_cast<double>(af[kk]) * pw->q(kk, j) * pw->scale(0, j);
      err[mode] += std::fabs(c[j] - (exact + g0));
    }
    qj_gemm_plan_destroy(p);
  }
  // Per row, groups 1..3 (|a| <= 1) are quantized with the outlier's step 500/127 ~ 3.9: they all
  // round to 0 and their whole contribution is lost; per group they keep a step of 1/127. Group 0
  // errs alike in both modes, so the totals differ by that lost contribution: well over 2x here.
  EXPECT_LT(err[1] * 2, err[0]) << "per-row error " << err[0] << ", per-group error " << err[1];
  qj_weights_destroy(w);
}

// Per-(row, group) A: with weights of one group along K (per channel, or grouped with G = K,
// which packing stores per channel) it is per-row A, bit for bit; with grouped S4 weights it is
// its own mode; with grouped S8 weights not implemented.
TEST(GemmInt4, PerGroupActivationsNeedGroupedInt4) {
  std::vector<float> wf = qjt::random_floats(64 * 8, -1.0f, 1.0f, 3);
  std::vector<float> a = qjt::random_floats(3 * 64, -2.0f, 2.0f, 4);
  std::vector<float> bias = qjt::random_floats(8, -1.0f, 1.0f, 5);
  qj_gemm_desc d{};
  d.a_type = QJ_F32;
  d.a_granularity = QJ_GRAN_GROUP;
  d.c_type = QJ_F32;
  d.bias = bias.data();
  qj_gemm_desc rows = d;
  rows.a_granularity = QJ_GRAN_ROW;
  for (qj_dtype wt : {QJ_S4, QJ_S8}) {
    for (int64_t g : {int64_t{0}, int64_t{64}}) {  // per channel; one group of K
      qj_weights_desc wd{};
      wd.dtype = wt;
      wd.k = 64;
      wd.n = 8;
      wd.granularity = g ? QJ_GRAN_GROUP : QJ_GRAN_CHANNEL;
      wd.group_size = g;
      qj_weights w = nullptr;
      ASSERT_EQ(qj_weights_quantize_pack(&wd, wf.data(), 8, &w), QJ_OK) << qj_last_error();
      std::vector<float> out[2];
      for (int i = 0; i < 2; ++i) {
        qj_gemm_plan p = nullptr;
        ASSERT_EQ(qj_gemm_plan_create(i ? &rows : &d, w, &p), QJ_OK) << qj_last_error();
        out[i].assign(3 * 8, 0.0f);
        EXPECT_EQ(qj_gemm_run(p, 3, a.data(), 64, out[i].data(), 8, nullptr), QJ_OK) << qj_last_error();
        qj_gemm_plan_destroy(p);
      }
      EXPECT_EQ(out[0], out[1]) << qj_dtype_name(wt) << " group " << g;
      qj_weights_destroy(w);
    }
    qj_weights_desc wd{};
    wd.dtype = wt;
    wd.k = 64;
    wd.n = 8;
    qj_weights w = nullptr;
    qj_gemm_plan p = nullptr;
    wd.granularity = QJ_GRAN_GROUP;
    wd.group_size = 32;
    ASSERT_EQ(qj_weights_quantize_pack(&wd, wf.data(), 8, &w), QJ_OK);
    EXPECT_EQ(qj_gemm_plan_create(&d, w, &p), wt == QJ_S8 ? QJ_ERR_UNSUPPORTED : QJ_OK) << qj_last_error();
    qj_gemm_plan_destroy(p);
    qj_weights_destroy(w);
  }
}

// Any partition of the work gives the same bytes.
TEST(GemmInt4, Partitions) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (int threads : {2, 3, 5}) {
      Int4Case c;
      c.threads = threads;
      c.m = threads == 5 ? 1 : 40;
      c.n = 100;
      c.k = 128;
      c.group = 64;
      c.zp = true;
      c.w_type = QJ_U4;
      c.a_type = QJ_F32;
      c.seed = 400 + threads;
      EXPECT_CASE(c);
    }
  }
}

// Seeded random sample of combinations of every dimension (QJ_TEST_ITERATIONS / QJ_TEST_SEED
// scale it up for a long local run, test/test_util.h).
TEST(GemmInt4, RandomCombinations) {
  const qj_dtype a_types[] = {QJ_U8, QJ_S8, QJ_F32, QJ_BF16};
  const qj_dtype c_types[] = {QJ_U8, QJ_S8, QJ_S32, QJ_F32, QJ_BF16};
  const int64_t groups[] = {32, 64, 128, 256};
  qjt::for_each_random_case(77001u, 40, [&](qj_isa, qjt::Picker& pick, uint32_t seed) {
    Int4Case c;
    c.seed = seed;
    c.w_type = kWTypes[pick(2)];
    c.a_type = a_types[pick(4)];
    c.c_type = c_types[pick(5)];
    c.gran = static_cast<qj_granularity>(pick(3));
    const bool dynamic = c.a_type == QJ_F32 || c.a_type == QJ_BF16;
    if (c.c_type == QJ_S32 && (dynamic || c.gran == QJ_GRAN_GROUP)) c.c_type = QJ_F32;
    if (c.gran == QJ_GRAN_GROUP) {
      c.group = groups[pick(4)];
      c.k = c.group * (1 + pick(4));
      if (pick(5) == 0) c.group = c.k;
    } else {
      c.k = 1 + pick(pick(3) == 0 ? 600 : 100);
    }
    c.n = 1 + pick(pick(4) == 0 ? 300 : 70);
    c.m = pick.rows(80, 60, 200);
    c.zp = pick(2);
    c.a_zp = pick(2);
    c.bias = c.c_type != QJ_S32 && pick(2);
    c.relu = c.c_type != QJ_S32 && pick(3) == 0;
    c.beta = c.c_type == QJ_F32 && pick(4) == 0 ? (pick(2) ? 0.5f : -1.0f) : 0.0f;
    c.layout = static_cast<qj_layout>(pick(2));
    c.a_gran = pick(3) == 0 ? QJ_GRAN_TENSOR : QJ_GRAN_ROW;
    if (dynamic && pick(3) == 0) c.a_gran = QJ_GRAN_GROUP;  // (one weight group along K: per row)
    c.lda_pad = pick(3) == 0 ? pick(9) : 0;
    c.ldc_pad = pick(3) == 0 ? pick(9) : 0;
    c.wld_pad = pick(3);
    c.values = pick(5) == 0 ? kExtremes : kRandom;
    c.threads = pick(4) == 0 ? 2 + pick(4) : 1;
    EXPECT_CASE(c);
  });
}

std::vector<uint8_t> nibbles_for_desc(const qj_weights_desc& d, int64_t ld) {
  return std::vector<uint8_t>(d.layout == QJ_LAYOUT_KN ? ((d.k + 1) / 2) * ld : d.n * ld, 0x37);
}

TEST(GemmInt4, BadInput) {
  std::vector<float> scales(64 * 4, 0.1f);
  std::vector<int32_t> zps(64 * 4, 0);
  qj_weights_desc d{};
  d.dtype = QJ_S4;
  d.k = 96;
  d.n = 16;
  d.layout = QJ_LAYOUT_KN;
  d.granularity = QJ_GRAN_GROUP;
  d.group_size = 64;  // does not divide 96
  d.scales = scales.data();
  auto nib = nibbles_for_desc(d, 16);
  qj_weights w = reinterpret_cast<qj_weights>(0x1);
  EXPECT_EQ(qj_weights_pack(&d, nib.data(), 16, &w), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("group_size=64"), std::string::npos) << qj_last_error();
  EXPECT_EQ(w, reinterpret_cast<qj_weights>(0x1));  // untouched
  d.group_size = 12;  // divides 96, not a whole number of 8-wide steps
  EXPECT_EQ(qj_weights_pack(&d, nib.data(), 16, &w), QJ_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(qj_last_error()).find("group_size=12"), std::string::npos) << qj_last_error();
  d.group_size = 32;
  zps[5] = 8;  // S4 zero points live in [-8, 7]
  d.zero_points = zps.data();
  EXPECT_EQ(qj_weights_pack(&d, nib.data(), 16, &w), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("zero_points[5]=8"), std::string::npos) << qj_last_error();
  d.dtype = QJ_U4;
  zps[5] = -1;
  EXPECT_EQ(qj_weights_pack(&d, nib.data(), 16, &w), QJ_ERR_INVALID_ARGUMENT);
  zps[5] = 15;
  d.layout = QJ_LAYOUT_NK;  // rows of ceil(96/2) = 48 bytes
  EXPECT_EQ(qj_weights_pack(&d, nib.data(), 47, &w), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("ld=47"), std::string::npos) << qj_last_error();
  nib = nibbles_for_desc(d, 48);
  ASSERT_EQ(qj_weights_pack(&d, nib.data(), 48, &w), QJ_OK) << qj_last_error();
  qj_weights_destroy(w);
  // The int32 exactness limit: k * 255 * 15 <= 2^31 - 1, k <= 561433.
  for (int64_t k : {561433, 561434}) {
    qj_weights_desc e{};
    e.dtype = QJ_U4;
    e.k = k;
    e.n = 1;
    e.layout = QJ_LAYOUT_NK;
    e.granularity = QJ_GRAN_CHANNEL;
    e.scales = scales.data();
    std::vector<uint8_t> col((k + 1) / 2, 0x11);
    qj_weights wk = nullptr;
    ASSERT_EQ(qj_weights_pack(&e, col.data(), (k + 1) / 2, &wk), QJ_OK) << qj_last_error();
    qj_gemm_desc gd{};
    gd.a_type = QJ_U8;
    gd.a_scale = 1.0f;
    gd.c_type = QJ_S32;
    qj_gemm_plan p = nullptr;
    if (k == 561433) {
      EXPECT_EQ(qj_gemm_plan_create(&gd, wk, &p), QJ_OK) << qj_last_error();
    } else {
      EXPECT_EQ(qj_gemm_plan_create(&gd, wk, &p), QJ_ERR_UNSUPPORTED);
      EXPECT_NE(std::string(qj_last_error()).find("561434"), std::string::npos) << qj_last_error();
    }
    qj_gemm_plan_destroy(p);
    qj_weights_destroy(wk);
  }
}

// The weights stay 4-bit in memory: packed bytes are K/2 per column plus the per-group
// parameters (scale, zero point), never an int8 expansion.
TEST(GemmInt4, PackedSizeIsHalfAByte) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    const int64_t k = 1024, n = 256;
    std::vector<float> w(k * n);
    for (int64_t i = 0; i < k * n; ++i) w[i] = std::sin(0.37f * i);
    qj_weights_desc d{};
    d.dtype = QJ_U4;
    d.k = k;
    d.n = n;
    d.layout = QJ_LAYOUT_KN;
    d.granularity = QJ_GRAN_GROUP;
    d.group_size = 128;
    std::shared_ptr<qj::PackedWeights> pw;
    ASSERT_EQ(qj::quantize_int_weights(d, w.data(), n, isa, &pw), QJ_OK);
    const size_t nibbles = k * n / 2, params = (k / 128) * n * 8;  // fp32 scale + int32 zp
    EXPECT_EQ(pw->packed.size(), nibbles + params);
  }
}

// qj_weights_quantize_pack: S4 symmetric, U4 asymmetric; the packed integers are the documented
// rounding of w / scale, and a GEMM with them matches the reference on the same integers.
TEST(GemmInt4, QuantizePack) {
  const int64_t k = 128, n = 24;
  std::vector<float> w = qjt::random_floats(k * n, -2.0f, 1.0f, 7);
  for (qj_dtype wt : kWTypes)
    for (qj_granularity gr : {QJ_GRAN_TENSOR, QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
      qj_weights_desc d{};
      d.dtype = wt;
      d.k = k;
      d.n = n;
      d.layout = QJ_LAYOUT_KN;
      d.granularity = gr;
      d.group_size = 32;
      std::shared_ptr<qj::PackedWeights> pw;
      ASSERT_EQ(qj::quantize_int_weights(d, w.data(), n, qj_max_isa(), &pw), QJ_OK);
      const int64_t gk = gr == QJ_GRAN_GROUP ? 32 : k;
      for (int64_t c = 0; c < n; ++c)
        for (int64_t g0 = 0; g0 < k; g0 += gk) {
          float lo = 0, hi = 0, amax = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            if (gr != QJ_GRAN_TENSOR && (kk < g0 || kk >= g0 + gk)) continue;
            for (int64_t cc = 0; cc < n; ++cc) {
              if (gr != QJ_GRAN_TENSOR && cc != c) continue;
              float v = w[kk * n + cc];
              lo = std::min(lo, v), hi = std::max(hi, v), amax = std::max(amax, std::fabs(v));
            }
          }
          const float scale = wt == QJ_S4 ? amax / 7.0f : (hi - lo) / 15.0f;
          const int32_t zp = wt == QJ_S4 ? 0 : static_cast<int32_t>(std::nearbyint(-lo / scale));
          ASSERT_EQ(pw->scale(g0 / gk, c), scale);
          ASSERT_EQ(pw->zp(g0 / gk, c), zp);
          for (int64_t kk = g0; kk < g0 + gk; ++kk) {
            float t = std::nearbyint(w[kk * n + c] / scale) + zp;
            int32_t want = static_cast<int32_t>(std::min(std::max(t, wt == QJ_S4 ? -7.0f : 0.0f),
                                                         wt == QJ_S4 ? 7.0f : 15.0f));
            ASSERT_EQ(pw->q(kk, c), want) << kk << " " << c;
          }
        }
    }
}

// Extreme magnitudes in qj_weights_quantize_pack (found by fuzzing): subnormal weights whose
// amax / qmax or range / 15 underflows get the least positive scale (not 0, which zeroed them and
// made the library refuse its own serialized image); a U4 range beyond fp32 is an error (it was
// quantized with scale 1: a wrong GEMM result with QJ_OK).
TEST(GemmInt4, QuantizePackExtremeMagnitudes) {
  const int64_t k = 32, n = 2;
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (qj_dtype wt : {QJ_S8, QJ_S4, QJ_U4})
    for (float v : {tiny, 7 * tiny}) {
      std::vector<float> w(static_cast<size_t>(k * n), 0.0f);  // K x N; column 1: one tiny weight
      w[5 * n + 1] = v;
      qj_weights_desc d{};
      d.dtype = wt;
      d.k = k;
      d.n = n;
      d.layout = QJ_LAYOUT_KN;
      d.granularity = QJ_GRAN_CHANNEL;
      std::shared_ptr<qj::PackedWeights> pw;
      ASSERT_EQ(qj::quantize_int_weights(d, w.data(), n, qj_max_isa(), &pw), QJ_OK) << qj_last_error();
      EXPECT_EQ(pw->scale(0, 1), tiny) << qj_dtype_name(wt) << " " << v;
      EXPECT_EQ(pw->q(5, 1) - pw->zp(0, 1), static_cast<int32_t>(v / tiny)) << qj_dtype_name(wt);
      qj_weights qw = nullptr;
      ASSERT_EQ(qj_weights_quantize_pack(&d, w.data(), n, &qw), QJ_OK) << qj_last_error();
      std::vector<uint8_t> img(qj_weights_serialized_size(qw));
      ASSERT_EQ(qj_weights_serialize(qw, img.data(), img.size()), QJ_OK);
      qj_weights back = nullptr;
      EXPECT_EQ(qj_weights_deserialize(img.data(), img.size(), &back), QJ_OK) << qj_last_error();
      qj_weights_destroy(back);
      qj_weights_destroy(qw);
    }
  for (qj_granularity gr : {QJ_GRAN_CHANNEL, QJ_GRAN_TENSOR}) {
    std::vector<float> w(static_cast<size_t>(k * n), 1.0f);
    w[3 * n + 1] = 3e38f;
    w[4 * n + 1] = -3e38f;
    qj_weights_desc d{};
    d.dtype = QJ_U4;
    d.k = k;
    d.n = n;
    d.layout = QJ_LAYOUT_KN;
    d.granularity = gr;
    qj_weights qw = reinterpret_cast<qj_weights>(uintptr_t{0x40});
    EXPECT_EQ(qj_weights_quantize_pack(&d, w.data(), n, &qw), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("overflows fp32"), std::string::npos) << qj_last_error();
    EXPECT_NE(std::string(qj_last_error()).find(gr == QJ_GRAN_CHANNEL ? "of column 1:" : "of the tensor:"),
              std::string::npos) << qj_last_error();
    EXPECT_EQ(qw, reinterpret_cast<qj_weights>(uintptr_t{0x40}));
    d.dtype = QJ_S8;  // symmetric: amax / 127 is fine
    qw = nullptr;
    EXPECT_EQ(qj_weights_quantize_pack(&d, w.data(), n, &qw), QJ_OK) << qj_last_error();
    qj_weights_destroy(qw);
  }
}

// Serialization round trip, and repacking: weights packed under one tier, planned under another.
TEST(GemmInt4, SerializeAndRepack) {
  const int64_t k = 192, n = 40, m = 5;
  std::vector<float> wf = qjt::random_floats(k * n, -1.0f, 1.0f, 11);
  std::vector<float> af = qjt::random_floats(m * k, -1.0f, 1.0f, 12);
  for (qj_dtype wt : kWTypes) {
    qj_weights_desc d{};
    d.dtype = wt;
    d.k = k;
    d.n = n;
    d.layout = QJ_LAYOUT_NK;
    d.granularity = QJ_GRAN_GROUP;
    d.group_size = 64;
    qj_gemm_desc gd{};
    gd.a_type = QJ_F32;
    gd.a_granularity = QJ_GRAN_ROW;
    gd.c_type = QJ_F32;
    std::vector<float> first(m * n), out(m * n);
    qj_weights w0 = nullptr;
    {
      qjt::IsaCap cap(QJ_ISA_AVX2 <= qj_cpu_isa() ? QJ_ISA_AVX2 : QJ_ISA_SCALAR);
      ASSERT_EQ(qj_weights_quantize_pack(&d, wf.data(), k, &w0), QJ_OK) << qj_last_error();
    }
    std::vector<uint8_t> img(qj_weights_serialized_size(w0));
    ASSERT_EQ(qj_weights_serialize(w0, img.data(), img.size()), QJ_OK);
    for (qj_isa isa : qjt::supported_isas()) {
      qjt::IsaCap cap(isa);
      qj_weights w1 = nullptr;
      ASSERT_EQ(qj_weights_deserialize(img.data(), img.size(), &w1), QJ_OK) << qj_last_error();
      for (qj_weights w : {w0, w1}) {
        qj_gemm_plan p = nullptr;
        ASSERT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK) << qj_last_error();
        ASSERT_EQ(qj_gemm_run(p, m, af.data(), k, out.data(), n, nullptr), QJ_OK);
        qj_gemm_plan_destroy(p);
        if (first.empty() || (isa == qjt::supported_isas()[0] && w == w0)) first = out;
        EXPECT_EQ(std::memcmp(out.data(), first.data(), out.size() * 4), 0) << qj_isa_name(isa);
      }
      qj_weights_destroy(w1);
    }
    img[200] ^= 1;
    qj_weights w2 = nullptr;
    EXPECT_EQ(qj_weights_deserialize(img.data(), img.size(), &w2), QJ_ERR_CORRUPT_DATA);
    qj_weights_destroy(w0);
  }
}

}  // namespace
