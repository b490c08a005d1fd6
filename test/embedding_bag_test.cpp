// Embedding-bag through the C API against src/ref, at every ISA tier.
//
// Every path is compared bit for bit with the reference, fused (integer-decoded) rows and float
// rows alike: the kernels perform the reference's fp32 operations (fma / add / multiply) in the
// same order for every element, so no error bound is needed and none is used (a bound would only
// hide a changed summation order). Output buffers are pre-filled with a sentinel and compared
// whole, so gaps between output rows (out_stride > dim) must stay untouched.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "src/core/isa.h"
#include "src/formats/half.h"
#include "src/ops/embedding_bag.h"
#include "src/ref/embedding_bag_ref.h"
#include "test/test_util.h"

namespace {

const int64_t kDims[] = {1, 4, 7, 8, 15, 16, 17, 31, 32, 33, 64, 96, 128, 163, 256, 512, 1000};

struct Format {
  qj_dtype t;
  bool sbf;
};
const Format kFormats[] = {{QJ_F32, false},        {QJ_F16, false},        {QJ_BF16, false},
                           {QJ_FUSED_8BIT, false}, {QJ_FUSED_4BIT, false}, {QJ_FUSED_2BIT, false},
                           {QJ_FUSED_8BIT, true},  {QJ_FUSED_4BIT, true},  {QJ_FUSED_2BIT, true},
                           {QJ_MXFP4_E2M1, false}, {QJ_MXINT8, false},     {QJ_MXFP8_E4M3, false},
                           {QJ_MXFP8_E5M2, false}};

bool is_mx(qj_dtype t) { return t == QJ_MXFP4_E2M1 || t == QJ_MXINT8 || t == QJ_MXFP8_E4M3 || t == QJ_MXFP8_E5M2; }

std::string fmt_name(const Format& f) { return std::string(qj_dtype_name(f.t)) + (f.sbf ? "_sbf" : ""); }

int64_t natural_row(const Format& f, int64_t dim) { return qj::ref::emb_row_bytes(f.t, dim, f.sbf); }

// A random MX code without NaN or Inf (sums of several NaNs have no defined payload).
uint8_t finite_code(qj_dtype t, uint8_t c) {
  if (t == QJ_MXFP8_E4M3 && (c & 0x7f) == 0x7f) return c ^ 1;
  if (t == QJ_MXFP8_E5M2 && ((c >> 2) & 0x1f) == 0x1f) return c & 0x83;
  return c;
}
// E8M0 scales around 1 (2^-9 .. 2^8), sometimes 0x00 (2^-127: subnormal products).
uint8_t random_scale(std::mt19937& g) { return g() % 23 == 0 ? 0 : static_cast<uint8_t>(118 + g() % 18); }
// Scales at the ends of the E8M0 range, where the kernels switch between their folded and
// unfolded blocks (codegen/embedding_bag.cpp, emit_mx_group): 0..12, 120..139 (E4M3 folds up to
// 134), 240..255.
uint8_t boundary_scale(std::mt19937& g) {
  const uint32_t r = g() % 3, k = g() % (r == 0 ? 13 : r == 1 ? 20 : 16);
  return static_cast<uint8_t>(r == 0 ? k : r == 1 ? 120 + k : 240 + k);
}

// A table of random rows (float rows: values in [-1, 1] with a few -0.0; fused rows: random codes,
// scale in [0.001, 0.1], bias in [-1, 1]), rows `stride` bytes apart, padding bytes random.
// MX rows: random finite codes and scales; SPLIT rows put their scales in *scales.
std::vector<uint8_t> make_table(const Format& f, int64_t dim, int64_t rows, int64_t stride, uint32_t seed,
                                std::vector<uint8_t>* scales = nullptr, bool boundary_scales = false) {
  std::mt19937 g(seed);
  std::vector<uint8_t> t(static_cast<size_t>(rows * stride));
  for (auto& b : t) b = static_cast<uint8_t>(g());
  std::uniform_real_distribution<float> val(-1.0f, 1.0f), sc(0.001f, 0.1f);
  const int64_t blocks = (dim + 31) / 32;
  if (scales) scales->assign(static_cast<size_t>(rows * blocks), 0);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = &t[r * stride];
    if (f.t == QJ_MXFP4_E2M1) {
      for (int64_t b = 0; b < blocks; ++b) row[b * 17 + 16] = boundary_scales ? boundary_scale(g) : random_scale(g);
      continue;
    }
    if (is_mx(f.t)) {
      // (boundary_scales: every code, NaN and Inf ones included, kept raw in 1 of 8 rows)
      if (!boundary_scales || g() % 8 != 0)
        for (int64_t j = 0; j < blocks * 32; ++j) row[j] = finite_code(f.t, row[j]);
      for (int64_t b = 0; b < blocks; ++b)
        (*scales)[r * blocks + b] = boundary_scales ? boundary_scale(g) : random_scale(g);
      continue;
    }
    if (f.t == QJ_F32 || f.t == QJ_F16 || f.t == QJ_BF16) {
      for (int64_t j = 0; j < dim; ++j) {
        float v = (g() % 17 == 0) ? -0.0f : val(g);
        if (f.t == QJ_F32) {
          std::memcpy(row + 4 * j, &v, 4);
        } else {
          uint16_t h = f.t == QJ_F16 ? qj::f32_to_f16(v) : qj::f32_to_bf16(v);
          std::memcpy(row + 2 * j, &h, 2);
        }
      }
      continue;
    }
    // fused: codes stay random bytes; write scale and bias
    const int bits = f.t == QJ_FUSED_8BIT ? 8 : f.t == QJ_FUSED_4BIT ? 4 : 2;
    const int64_t data = (dim * bits + 7) / 8;
    float s = sc(g), b = val(g);
    if (bits == 8 && !f.sbf) {
      std::memcpy(row + data, &s, 4);
      std::memcpy(row + data + 4, &b, 4);
    } else {
      uint16_t s16 = qj::f32_to_f16(s), b16 = qj::f32_to_f16(b);
      uint8_t* sb = f.sbf ? row : row + data;
      std::memcpy(sb, &s16, 2);
      std::memcpy(sb + 2, &b16, 2);
    }
  }
  return t;
}

struct Bags {
  std::vector<int64_t> lengths;
  std::vector<int64_t> idx;
  int64_t total() const { return static_cast<int64_t>(idx.size()); }
};

// Bag lengths in [0, 2 * avg], with an empty bag and one bag longer than any prefetch distance
// used here (40 indices).
Bags make_bags(int64_t nbags, int64_t avg, int64_t index_limit, uint32_t seed) {
  std::mt19937 g(seed);
  Bags b;
  for (int64_t i = 0; i < nbags; ++i) {
    int64_t len = static_cast<int64_t>(g() % (2 * avg + 1));
    if (i == 1) len = 0;
    if (i == 2) len = 40;
    b.lengths.push_back(len);
    for (int64_t k = 0; k < len; ++k) b.idx.push_back(static_cast<int64_t>(g() % index_limit));
  }
  return b;
}

struct Case {
  Format f;
  int64_t dim;
  qj_pooling pool = QJ_POOL_SUM;
  qj_dtype out = QJ_F32;
  int weight_mode = 0;  // 0 none, 1 per index, 2 positional
  int index_bits = 64, offset_bits = 64;
  bool lengths = false;
  bool remap = false;
  int prefetch = 16;
  int hint = 0;          // qj_prefetch_hint
  int64_t out_pad = 0;   // out_stride - dim
  int64_t row_pad = 0;   // row_stride - natural
  int64_t nbags = 9, avg = 5, rows = 57;
  bool boundary_scales = false;  // MX rows: boundary_scale instead of random_scale, and NaN / Inf
                                 // codes in some rows (SPLIT)
  bool nan_payloads_free = false;  // f32 output: any NaN matches any NaN (else bit for bit)
  std::string str() const {
    char b[256];
    std::snprintf(b, sizeof b, "%s dim %lld pool %d out %s w %d i%d o%d %s%s pf %d/%d opad %lld rpad %lld", fmt_name(f).c_str(),
                  static_cast<long long>(dim), static_cast<int>(pool), qj_dtype_name(out), weight_mode, index_bits,
                  offset_bits, lengths ? "lengths" : "offsets", remap ? " remap" : "", prefetch, hint,
                  static_cast<long long>(out_pad), static_cast<long long>(row_pad));
    return b;
  }
};

std::vector<uint8_t> pack_ints(const std::vector<int64_t>& v, int bits) {
  std::vector<uint8_t> out(v.size() * bits / 8 + 8);
  for (size_t i = 0; i < v.size(); ++i) {
    if (bits == 32) {
      int32_t x = static_cast<int32_t>(v[i]);
      std::memcpy(&out[i * 4], &x, 4);
    } else {
      std::memcpy(&out[i * 8], &v[i], 8);
    }
  }
  return out;
}

// Runs one case through the C API (whole call, and as 3 partition slices) and the reference.
void run_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(c.str());
  const int64_t natural = natural_row(c.f, c.dim);
  const int64_t stride = natural + c.row_pad;
  std::vector<uint8_t> scales;
  std::vector<uint8_t> table = make_table(c.f, c.dim, c.rows, stride, seed, &scales, c.boundary_scales);
  std::vector<int32_t> remap;
  int64_t index_limit = c.rows;
  if (c.remap) {
    std::mt19937 g(seed + 1);
    remap.resize(static_cast<size_t>(c.rows + 5));
    for (auto& r : remap) r = (g() % 4 == 0) ? -1 : static_cast<int32_t>(g() % c.rows);
    index_limit = static_cast<int64_t>(remap.size());
  }
  Bags bags = make_bags(c.nbags, c.avg, index_limit, seed + 2);
  std::vector<int64_t> offs{0};
  for (int64_t l : bags.lengths) offs.push_back(offs.back() + l);
  std::vector<uint8_t> idx = pack_ints(bags.idx, c.index_bits);
  std::vector<uint8_t> ol = pack_ints(c.lengths ? bags.lengths : offs, c.offset_bits);
  std::vector<float> w = qjt::random_floats(static_cast<size_t>(bags.total() + 1), -2.0f, 2.0f, seed + 3);

  qj_embedding_bag_desc d;
  std::memset(&d, 0, sizeof d);
  d.row_type = c.f.t;
  d.dim = c.dim;
  d.index_bits = c.index_bits;
  d.offset_bits = c.offset_bits;
  d.use_lengths = c.lengths;
  d.weighted = c.weight_mode != 0;
  d.positional = c.weight_mode == 2;
  d.pooling = c.pool;
  d.out_type = c.out;
  d.out_stride = c.dim + c.out_pad;
  d.prefetch_distance = c.prefetch;
  d.prefetch_hint = static_cast<qj_prefetch_hint>(c.hint);
  d.scale_bias_first = c.f.sbf;
  d.remap = c.remap ? remap.data() : nullptr;
  d.remap_size = c.remap ? static_cast<int64_t>(remap.size()) : 0;
  d.row_stride = c.row_pad ? stride : 0;

  const bool gather = c.pool == QJ_POOL_NONE;
  const int64_t out_rows = gather ? bags.total() : c.nbags;
  const int ob = c.out == QJ_F32 ? 4 : 2;
  const size_t out_bytes = static_cast<size_t>((out_rows * d.out_stride + 64) * ob);
  std::vector<uint8_t> want(out_bytes, 0xcd), got(out_bytes, 0xcd), got3(out_bytes, 0xcd);

  qj::ref::EmbTable rt{c.f.t, c.dim, c.f.sbf, stride, table.data(), c.rows, scales.data()};
  ASSERT_TRUE(qj::ref::embedding_bag(d, rt, c.nbags, idx.data(), bags.total(), gather ? nullptr : ol.data(),
                                     d.weighted ? w.data() : nullptr, want.data(), 0, out_rows));

  qj_embedding_bag_plan p = nullptr;
  ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
  SCOPED_TRACE(qj_embedding_bag_plan_kernel_name(p));
  if (qj_max_isa() >= QJ_ISA_AVX2) EXPECT_EQ(std::string(qj_embedding_bag_plan_kernel_name(p)).rfind("emb_ref", 0), std::string::npos);
  qj_embedding_bag_args args{table.data(), scales.data(), c.rows, c.nbags, idx.data(), bags.total(),
                             gather ? nullptr : ol.data(), d.weighted ? w.data() : nullptr, got.data()};
  if (is_mx(c.f.t) && c.f.t != QJ_MXFP4_E2M1) {
    ASSERT_EQ(qj_embedding_bag_run_ex(p, &args, nullptr), QJ_OK) << qj_last_error();
  } else {  // the plain entry point (rows that need no scale array)
    ASSERT_EQ(qj_embedding_bag_run(p, table.data(), c.rows, c.nbags, idx.data(), bags.total(),
                                   gather ? nullptr : ol.data(), d.weighted ? w.data() : nullptr, got.data(), nullptr),
              QJ_OK)
        << qj_last_error();
  }
  args.out = got3.data();
  for (int t = 0; t < 3; ++t) {
    qj_partition part{t, 3};
    ASSERT_EQ(qj_embedding_bag_run_ex(p, &args, &part), QJ_OK) << qj_last_error();
  }
  // The built-in pool's entry point with the struct (every row format; SPLIT rows need it).
  std::vector<uint8_t> gotp(out_bytes, 0xcd);
  args.out = gotp.data();
  ASSERT_EQ(qj_embedding_bag_run_parallel_ex(p, &args, 3), QJ_OK) << qj_last_error();
  qj_embedding_bag_plan_destroy(p);
  for (size_t i = 0; i < out_bytes; ++i) {
    if (got[i] != want[i]) {
      const int64_t e = static_cast<int64_t>(i) / ob;
      if (c.nan_payloads_free && ob == 4) {  // both NaN: equal (a sum of NaNs has no defined payload)
        float gv, wv;
        std::memcpy(&gv, &got[4 * e], 4);
        std::memcpy(&wv, &want[4 * e], 4);
        if (std::isnan(gv) && std::isnan(wv)) continue;
      }
      FAIL() << "first difference at output row " << e / d.out_stride << " col " << e % d.out_stride
             << " (byte " << i << "): got 0x" << std::hex << int(got[i]) << " want 0x" << int(want[i]);
    }
  }
  ASSERT_EQ(0, std::memcmp(got.data(), got3.data(), out_bytes)) << "3-way partition differs";
  ASSERT_EQ(0, std::memcmp(got.data(), gotp.data(), out_bytes)) << "qj_embedding_bag_run_parallel_ex differs";
}

// The main sweep: every tier x format x dim x pooling x output type; the remaining parameters
// rotate with the case number so that every value of each appears many times per tier.
// At the AVX-512 tier the driver picks the ymm kernel for very short quantized rows, so
// the sweep runs that tier twice: forced zmm, and forced ymm.
struct PreferYmm {
  explicit PreferYmm(int v) { qj::embedding_set_prefer_ymm(v); }
  ~PreferYmm() { qj::embedding_set_prefer_ymm(-1); }
};

TEST(EmbeddingBag, SweepMatchesReferenceEveryTier) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    PreferYmm zmm_only(0);
    uint32_t n = 0;
    for (const Format& f : kFormats) {
      for (int64_t dim : kDims) {
        for (qj_pooling pool : {QJ_POOL_SUM, QJ_POOL_MEAN, QJ_POOL_NONE}) {
          for (qj_dtype out : {QJ_F32, QJ_F16, QJ_BF16}) {
            Case c{f, dim};
            c.pool = pool;
            c.out = out;
            c.weight_mode = static_cast<int>(n % 3);
            if (pool == QJ_POOL_NONE && c.weight_mode == 2) c.weight_mode = 1;
            c.index_bits = (n / 3) % 2 ? 32 : 64;
            c.offset_bits = (n / 2) % 2 ? 32 : 64;
            c.lengths = (n / 5) % 2;
            c.remap = n % 7 == 3;
            c.prefetch = (n % 4 == 0) ? 0 : (n % 4 == 1 ? 2 : (n % 8 == 2 ? QJ_PREFETCH_AUTO : 16));
            c.hint = static_cast<int>((n / 4) % 5);
            c.out_pad = (n % 5 == 2) ? 3 : 0;
            c.row_pad = (n % 6 == 1) ? 5 : 0;
            if (dim >= 512) {
              c.nbags = 5;
              c.avg = 3;
            }
            run_case(c, 1000 + n);
            if (HasFatalFailure() || HasFailure()) return;
            ++n;
          }
        }
      }
    }
  }
}

// The ymm kernels selected at the AVX-512 tier for short rows: the same sweep, forced to ymm.
TEST(EmbeddingBag, YmmKernelsAtTheAvx512Tier) {
  if (qj_cpu_isa() < QJ_ISA_AVX512) GTEST_SKIP() << "no AVX-512 tier on this CPU";
  qjt::IsaCap cap(QJ_ISA_AVX512);
  PreferYmm ymm(1);
  uint32_t n = 0;
  for (const Format& f : kFormats)
    for (int64_t dim : {1, 7, 17, 32, 33, 64, 96, 128})
      for (qj_pooling pool : {QJ_POOL_SUM, QJ_POOL_MEAN, QJ_POOL_NONE}) {
        Case c{f, dim};
        c.pool = pool;
        c.weight_mode = static_cast<int>(n % 2);
        c.out = n % 3 == 0 ? QJ_F32 : n % 3 == 1 ? QJ_F16 : QJ_BF16;
        run_case(c, 90000 + n++);
        if (HasFailure()) return;
      }
}

// Seeded random sample of every option at random dims and bag shapes (QJ_TEST_ITERATIONS /
// QJ_TEST_SEED scale it up for a long local run, test/test_util.h).
TEST(EmbeddingBag, RandomCombinationsEveryTier) {
  qjt::for_each_random_case(11001u, 40, [&](qj_isa, qjt::Picker& pick, uint32_t seed) {
    const Format& f = kFormats[pick(static_cast<int>(std::size(kFormats)))];
    Case c{f, pick(4) == 0 ? 1 + pick(1100) : 1 + pick(140)};
    c.pool = static_cast<qj_pooling>(pick(3));
    const qj_dtype outs[] = {QJ_F32, QJ_F16, QJ_BF16};
    c.out = outs[pick(3)];
    c.weight_mode = pick(3);
    if (c.pool == QJ_POOL_NONE && c.weight_mode == 2) c.weight_mode = 1;
    c.index_bits = pick(2) ? 32 : 64;
    c.offset_bits = pick(2) ? 32 : 64;
    c.lengths = pick(2);
    c.remap = pick(5) == 0;
    const int pf = pick(5);
    c.prefetch = pf == 0 ? 0 : pf == 1 ? 1 + pick(4) : pf == 2 ? QJ_PREFETCH_AUTO : 1 + pick(64);
    c.hint = pick(5);
    c.out_pad = pick(3) == 0 ? pick(9) : 0;
    c.row_pad = pick(3) == 0 ? pick(9) : 0;
    c.nbags = pick(8);
    c.avg = pick(4) == 0 ? pick(80) : pick(8);
    c.rows = 1 + pick(pick(3) == 0 ? 2000 : 60);
    if (c.dim > 256) c.avg = std::min<int64_t>(c.avg, 6);
    run_case(c, seed);
  });
}

// Every combination of the index/offset/weight/remap/prefetch options, for a few dims.
TEST(EmbeddingBag, OptionCombinationsEveryTier) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    uint32_t n = 0;
    for (const Format& f : kFormats) {
      for (int64_t dim : {7, 33, 130}) {
        for (int wm = 0; wm < 3; ++wm)
          for (int ib : {32, 64})
            for (int obits : {32, 64})
              for (bool len : {false, true})
                for (bool rm : {false, true})
                  for (int pf : {0, 16}) {
                    Case c{f, dim};
                    c.weight_mode = wm;
                    c.index_bits = ib;
                    c.offset_bits = obits;
                    c.lengths = len;
                    c.remap = rm;
                    c.prefetch = pf;
                    c.pool = n % 2 ? QJ_POOL_MEAN : QJ_POOL_SUM;
                    c.nbags = 4;
                    c.avg = 3;
                    run_case(c, 50000 + n++);
                    if (HasFatalFailure() || HasFailure()) return;
                  }
      }
    }
  }
}

qj_embedding_bag_desc simple_desc(qj_dtype t, int64_t dim) {
  qj_embedding_bag_desc d;
  std::memset(&d, 0, sizeof d);
  d.row_type = t;
  d.dim = dim;
  d.index_bits = 32;
  d.offset_bits = 32;
  d.pooling = QJ_POOL_SUM;
  d.out_type = QJ_F32;
  d.prefetch_distance = QJ_PREFETCH_AUTO;
  return d;
}

TEST(EmbeddingBag, EmptyInputsEveryTier) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype t : {QJ_F32, QJ_FUSED_4BIT}) {
      qj_embedding_bag_desc d = simple_desc(t, 20);
      qj_embedding_bag_plan p;
      ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
      std::vector<float> out(3 * 20, 7.0f);
      const int32_t offs[4] = {0, 0, 0, 0};
      // Three empty bags and an empty index array: zeros (indices and table may be NULL).
      ASSERT_EQ(qj_embedding_bag_run(p, nullptr, 0, 3, nullptr, 0, offs, nullptr, out.data(), nullptr), QJ_OK)
          << qj_last_error();
      for (float v : out) ASSERT_EQ(v, 0.0f);
      // No bags at all: a no-op, even without offsets.
      ASSERT_EQ(qj_embedding_bag_run(p, nullptr, 0, 0, nullptr, 0, nullptr, nullptr, nullptr, nullptr), QJ_OK);
      ASSERT_EQ(qj_embedding_bag_run(p, nullptr, 0, 0, nullptr, 0, offs, nullptr, nullptr, nullptr), QJ_OK);
      qj_embedding_bag_plan_destroy(p);
    }
  }
}

// Every kind of bad input: the right code, a message naming the bag and the index, and an
// untouched output, whether the bad bag is in this thread's slice or another's.
TEST(EmbeddingBag, BadInputsNameBagAndIndexAndWriteNothing) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    const int64_t dim = 8, rows = 10;
    std::vector<float> table = qjt::random_floats(rows * dim, -1, 1, 5);
    for (int ib : {32, 64}) {
      for (bool lengths : {false, true}) {
        qj_embedding_bag_desc d = simple_desc(QJ_F32, dim);
        d.index_bits = ib;
        d.offset_bits = 64;
        d.use_lengths = lengths;
        qj_embedding_bag_plan p;
        ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK);
        auto run = [&](std::vector<int64_t> idx, std::vector<int64_t> ol, int64_t nbags, const qj_partition* part,
                       qj_status want, const std::vector<std::string>& needles) {
          std::vector<uint8_t> ix = pack_ints(idx, ib);
          std::vector<float> out(static_cast<size_t>((nbags + 1) * dim), 3.5f);
          qj_status s = qj_embedding_bag_run(p, table.data(), rows, nbags, ix.data(), static_cast<int64_t>(idx.size()),
                                             ol.data(), nullptr, out.data(), part);
          EXPECT_EQ(s, want) << qj_last_error();
          std::string msg = qj_last_error();
          for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
          if (want != QJ_OK)
            for (float v : out) ASSERT_EQ(v, 3.5f) << "output written on error: " << msg;
        };
        auto ol = [&](std::vector<int64_t> offsets) {
          if (!lengths) return offsets;
          std::vector<int64_t> l;
          for (size_t i = 1; i < offsets.size(); ++i) l.push_back(offsets[i] - offsets[i - 1]);
          return l;
        };
        const qj_partition p0{0, 3}, p2{2, 3};
        // index == num_rows in bag 2, position 4
        run({1, 2, 3, 4, 10, 5}, ol({0, 2, 3, 6}), 3, nullptr, QJ_ERR_OUT_OF_RANGE, {"bag 2", "indices[4] = 10"});
        // negative index in bag 0; this thread's slice (p2) does not hold bag 0
        run({-1, 2, 3, 4, 1, 5}, ol({0, 2, 3, 6}), 3, &p2, QJ_ERR_OUT_OF_RANGE, {"bag 0", "indices[0] = -1"});
        run({1, 2, 3, 4, 1, 5}, ol({0, 2, 3, 6}), 3, &p0, QJ_OK, {});
        if (ib == 64) run({1, 2, int64_t{1} << 40, 4}, ol({0, 2, 4}), 2, &p0, QJ_ERR_OUT_OF_RANGE, {"bag 1", "indices[2]"});
        if (!lengths) {
          std::vector<int64_t> i6{1, 2, 3, 4, 1, 5};
          run(i6, {1, 2, 3, 6}, 3, nullptr, QJ_ERR_INVALID_ARGUMENT, {"bag 0", "offsets[0] = 1"});
          run(i6, {0, 3, 2, 6}, 3, &p0, QJ_ERR_INVALID_ARGUMENT, {"bag 1", "offsets[2] = 2", "less than"});
          run(i6, {0, 2, 7, 6}, 3, &p2, QJ_ERR_INVALID_ARGUMENT, {"bag 1", "offsets[2] = 7", "overruns"});
          run(i6, {0, 2, 3, 5}, 3, nullptr, QJ_ERR_INVALID_ARGUMENT,
              {"bag 2", "offsets[num_bags = 3] = 5", "num_indices = 6"});
          run(i6, {0}, 0, nullptr, QJ_ERR_INVALID_ARGUMENT, {"num_bags = 0", "num_indices = 6"});
        } else {
          std::vector<int64_t> i6{1, 2, 3, 4, 1, 5};
          run(i6, {2, -1, 5}, 3, &p0, QJ_ERR_INVALID_ARGUMENT, {"bag 1", "lengths[1] = -1", "negative"});
          run(i6, {2, 1, 5}, 3, &p2, QJ_ERR_INVALID_ARGUMENT, {"bag 2", "lengths[2] = 5", "overruns"});
          run(i6, {2, 1, 2}, 3, nullptr, QJ_ERR_INVALID_ARGUMENT, {"bag 2", "sum to 5", "num_indices = 6"});
          run(i6, {7}, 0, nullptr, QJ_ERR_INVALID_ARGUMENT, {"num_bags = 0", "num_indices = 6"});  // (lengths unread)
        }
        qj_embedding_bag_plan_destroy(p);
      }
    }
    // Remap: an index past the remap table; a remap entry past the table; a bad entry at creation.
    qj_embedding_bag_desc d = simple_desc(QJ_F32, dim);
    std::vector<int32_t> remap{0, -1, 3, 12};
    d.remap = remap.data();
    d.remap_size = 4;
    qj_embedding_bag_plan p;
    ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK);
    std::vector<float> out(dim, 3.5f);
    const int32_t i1[2] = {2, 4};
    const int32_t o1[2] = {0, 2};
    EXPECT_EQ(qj_embedding_bag_run(p, table.data(), rows, 1, i1, 2, o1, nullptr, out.data(), nullptr), QJ_ERR_OUT_OF_RANGE);
    EXPECT_NE(std::string(qj_last_error()).find("indices[1] = 4 is outside the remap table"), std::string::npos)
        << qj_last_error();
    const int32_t i2[2] = {2, 1};
    EXPECT_EQ(qj_embedding_bag_run(p, table.data(), rows, 1, i2, 2, o1, nullptr, out.data(), nullptr), QJ_ERR_OUT_OF_RANGE);
    EXPECT_NE(std::string(qj_last_error()).find("row 12"), std::string::npos) << qj_last_error();
    for (float v : out) ASSERT_EQ(v, 3.5f);
    qj_embedding_bag_plan_destroy(p);
    remap[1] = -2;
    EXPECT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("remap[1] = -2"), std::string::npos) << qj_last_error();
  }
}

TEST(EmbeddingBag, BadDescsAndArguments) {
  qj_embedding_bag_desc d = simple_desc(QJ_F32, 8);
  // A failing create leaves *out as it was (a sentinel here, never dereferenced).
  qj_embedding_bag_plan const sentinel = reinterpret_cast<qj_embedding_bag_plan>(uintptr_t{0x40});
  qj_embedding_bag_plan p = sentinel;
  auto expect_bad = [&](const qj_embedding_bag_desc& bd, const char* needle) {
    EXPECT_EQ(qj_embedding_bag_plan_create(&bd, &p), QJ_ERR_INVALID_ARGUMENT) << needle;
    EXPECT_NE(std::string(qj_last_error()).find(needle), std::string::npos) << qj_last_error();
    EXPECT_EQ(p, sentinel);
  };
  qj_embedding_bag_desc b = d;
  b.row_type = QJ_S8;
  expect_bad(b, "row_type=2");
  b = d;
  b.dim = 0;
  expect_bad(b, "dim=0");
  b = d;
  b.index_bits = 16;
  expect_bad(b, "index_bits=16");
  b = d;
  b.pooling = static_cast<qj_pooling>(9);
  expect_bad(b, "pooling=9");
  b = d;
  b.out_type = QJ_U8;
  expect_bad(b, "out_type=1");
  b = d;
  b.positional = 1;
  expect_bad(b, "positional=1 needs weighted=1");
  b = d;
  b.out_stride = 7;
  expect_bad(b, "out_stride=7");
  b = d;
  b.scale_bias_first = 1;
  expect_bad(b, "scale_bias_first=1");
  b = d;
  b.row_stride = 31;
  expect_bad(b, "row_stride=31");
  b = d;
  b.prefetch_distance = -2;
  expect_bad(b, "prefetch_distance=-2");
  b = d;
  b.remap_size = 5;
  expect_bad(b, "remap_size=5");
  b = d;
  b.prefetch_hint = static_cast<qj_prefetch_hint>(5);
  expect_bad(b, "prefetch_hint=5");
  EXPECT_EQ(qj_embedding_bag_plan_create(nullptr, &p), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(p, sentinel);

  ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK);
  float table[16] = {}, out[8];
  const int32_t idx[1] = {0};
  const int32_t offs[2] = {0, 1};
  EXPECT_EQ(qj_embedding_bag_run(p, table, 2, 1, idx, 1, nullptr, nullptr, out, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("offsets_or_lengths is NULL"), std::string::npos);
  EXPECT_EQ(qj_embedding_bag_run(p, table, 2, 1, nullptr, 1, offs, nullptr, out, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(qj_embedding_bag_run(p, table, 2, 1, idx, 1, offs, nullptr, nullptr, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(qj_embedding_bag_run(p, table, -1, 1, idx, 1, offs, nullptr, out, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("num_rows=-1"), std::string::npos);
  qj_partition bad{3, 2};
  EXPECT_EQ(qj_embedding_bag_run(p, table, 2, 1, idx, 1, offs, nullptr, out, &bad), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(qj_embedding_bag_run(nullptr, table, 2, 1, idx, 1, offs, nullptr, out, nullptr), QJ_ERR_INVALID_ARGUMENT);
  qj_embedding_bag_plan_destroy(p);
  d.weighted = 1;
  ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK);
  EXPECT_EQ(qj_embedding_bag_run(p, table, 2, 1, idx, 1, offs, nullptr, out, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("weights is NULL"), std::string::npos);
  qj_embedding_bag_plan_destroy(p);
}

// run_parallel with several threads equals one thread, bit for bit; and one concatenated output
// filled by two tables through out_stride.
TEST(EmbeddingBag, ParallelAndConcatenatedOutputs) {
  Case c{{QJ_FUSED_8BIT, false}, 64};
  const int64_t rows = 100, nb = 37;
  std::vector<uint8_t> t8 = make_table(c.f, 64, rows, natural_row(c.f, 64), 9);
  std::vector<uint8_t> t4 = make_table({QJ_FUSED_4BIT, false}, 32, rows, natural_row({QJ_FUSED_4BIT, false}, 32), 10);
  Bags b = make_bags(nb, 6, rows, 11);
  std::vector<int64_t> offs{0};
  for (int64_t l : b.lengths) offs.push_back(offs.back() + l);
  qj_embedding_bag_desc d8 = simple_desc(QJ_FUSED_8BIT, 64), d4 = simple_desc(QJ_FUSED_4BIT, 32);
  d8.index_bits = d8.offset_bits = d4.index_bits = d4.offset_bits = 64;
  d8.out_stride = d4.out_stride = 96;  // [64 from table 8 | 32 from table 4]
  qj_embedding_bag_plan p8, p4;
  ASSERT_EQ(qj_embedding_bag_plan_create(&d8, &p8), QJ_OK);
  ASSERT_EQ(qj_embedding_bag_plan_create(&d4, &p4), QJ_OK);
  std::vector<float> one(nb * 96, -1.0f), many(nb * 96, -1.0f);
  ASSERT_EQ(qj_embedding_bag_run(p8, t8.data(), rows, nb, b.idx.data(), b.total(), offs.data(), nullptr, one.data(), nullptr), QJ_OK);
  ASSERT_EQ(qj_embedding_bag_run(p4, t4.data(), rows, nb, b.idx.data(), b.total(), offs.data(), nullptr, one.data() + 64, nullptr), QJ_OK);
  for (int threads : {2, 3, 8}) {
    std::fill(many.begin(), many.end(), -1.0f);
    ASSERT_EQ(qj_embedding_bag_run_parallel(p8, t8.data(), rows, nb, b.idx.data(), b.total(), offs.data(), nullptr, many.data(), threads), QJ_OK);
    ASSERT_EQ(qj_embedding_bag_run_parallel(p4, t4.data(), rows, nb, b.idx.data(), b.total(), offs.data(), nullptr, many.data() + 64, threads), QJ_OK);
    ASSERT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * 4)) << threads << " threads";
  }
  // a bad index fails every slice; nothing is written
  std::vector<int64_t> bad = b.idx;
  bad.back() = rows;
  std::fill(many.begin(), many.end(), -1.0f);
  EXPECT_EQ(qj_embedding_bag_run_parallel(p8, t8.data(), rows, nb, bad.data(), b.total(), offs.data(), nullptr, many.data(), 3),
            QJ_ERR_OUT_OF_RANGE);
  EXPECT_NE(std::string(qj_last_error()).find("bag 36"), std::string::npos) << qj_last_error();
  for (float v : many) ASSERT_EQ(v, -1.0f);
  for (int32_t nt : {0, -1, 1025, std::numeric_limits<int32_t>::max()}) {
    EXPECT_EQ(qj_embedding_bag_run_parallel(p8, t8.data(), rows, nb, b.idx.data(), b.total(), offs.data(), nullptr,
                                            many.data(), nt),
              QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qj_last_error()).find("num_threads=" + std::to_string(nt)), std::string::npos) << qj_last_error();
  }
  for (float v : many) ASSERT_EQ(v, -1.0f);
  // More threads than bags: one per bag runs, same bits.
  std::vector<float> single(many.size(), -1.0f), wide(many.size(), -1.0f);
  ASSERT_EQ(qj_embedding_bag_run_parallel(p8, t8.data(), rows, nb, b.idx.data(), b.total(), offs.data(), nullptr,
                                          single.data(), 1), QJ_OK);
  ASSERT_EQ(qj_embedding_bag_run_parallel(p8, t8.data(), rows, nb, b.idx.data(), b.total(), offs.data(), nullptr,
                                          wide.data(), 1024), QJ_OK) << qj_last_error();
  EXPECT_EQ(0, std::memcmp(single.data(), wide.data(), single.size() * sizeof(float)));
  qj_embedding_bag_plan_destroy(p8);
  qj_embedding_bag_plan_destroy(p4);
}

// The bags of each slice of a parallel pooled call (qj::bag_slice): the slices cover the bags in
// order, once; the prefix is the slice's first index; offsets and lengths agree; and no slice
// holds more than its share of the cost (indices + 1 per bag) by more than half of its first and
// last bags (a bag goes to the slice that holds its middle).
TEST(EmbeddingBag, BagSlicesPartitionAndBalance) {
  std::mt19937 g(4242);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t nb = 1 + static_cast<int64_t>(g() % 40);
    std::vector<int64_t> len(static_cast<size_t>(nb)), offs{0};
    for (auto& l : len) {
      const uint32_t kind = g() % 4;
      l = kind == 0 ? 0 : kind == 1 ? static_cast<int64_t>(g() % 400) : static_cast<int64_t>(g() % 8);
      offs.push_back(offs.back() + l);
    }
    const int64_t ni = offs.back();
    for (int32_t n : {1, 2, 3, 5, 64}) {
      int64_t next_bag = 0;
      for (int32_t t = 0; t < n; ++t) {
        int64_t b0, b1, pre, l0, l1, lpre;
        qj::bag_slice(64, false, offs.data(), nb, ni, t, n, &b0, &b1, &pre);
        qj::bag_slice(64, true, len.data(), nb, ni, t, n, &l0, &l1, &lpre);
        ASSERT_EQ(b0, l0);
        ASSERT_EQ(b1, l1);
        ASSERT_EQ(b0, next_bag) << "trial " << trial << " slice " << t << " of " << n;
        ASSERT_LE(b0, b1);
        if (b1 > b0) {
          ASSERT_EQ(pre, offs[static_cast<size_t>(b0)]);
          ASSERT_EQ(lpre, pre);
        }
        // its cost against its share: at most half of its first and of its last bag over it
        double cost = 0;
        for (int64_t b = b0; b < b1; ++b) cost += static_cast<double>(len[static_cast<size_t>(b)] + 1);
        const double edges = b1 > b0 ? static_cast<double>(len[static_cast<size_t>(b0)] + len[static_cast<size_t>(b1 - 1)] + 2) / 2 : 0;
        const double share = static_cast<double>(ni + nb) / n;
        ASSERT_LE(cost, share + edges + 1) << "trial " << trial << " slice " << t << " of " << n;
        next_bag = b1;
      }
      ASSERT_EQ(next_bag, nb);
    }
  }
}

TEST(EmbeddingBag, HugePageTableAllocation) {
  const size_t bytes = (size_t{5} << 20) + 123;
  void* t = qj_embedding_table_alloc(bytes);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t) % (size_t{2} << 20), 0u);
  auto* b = static_cast<uint8_t*>(t);
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[bytes - 1], 0);
  b[bytes - 1] = 1;
  // Advised as huge pages: the mapping's VmFlags carry "hg" (where the kernel has THP at all).
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0) {
    std::ifstream smaps("/proc/self/smaps");
    std::string line, flags;
    bool in_mapping = false;
    while (std::getline(smaps, line)) {
      uintptr_t lo, hi;
      if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
        in_mapping = lo <= reinterpret_cast<uintptr_t>(t) && reinterpret_cast<uintptr_t>(t) < hi;
      } else if (in_mapping && line.rfind("VmFlags:", 0) == 0) {
        flags = line;
      }
    }
    EXPECT_NE((flags + " ").find(" hg "), std::string::npos) << "the table's mapping: " << flags;
  }
  qj_embedding_table_free(t, bytes);
  EXPECT_EQ(qj_embedding_table_alloc(0), nullptr);
  // Sizes no address space holds: NULL (the rounding to 2 MiB must not wrap to a small mapping).
  for (size_t huge : {SIZE_MAX, SIZE_MAX - (size_t{2} << 20) + 2, size_t{1} << 62}) {
    EXPECT_EQ(qj_embedding_table_alloc(huge), nullptr) << huge;
    EXPECT_NE(std::string(qj_last_error()).find("qj_embedding_table_alloc"), std::string::npos) << qj_last_error();
  }
}

}  // namespace

namespace {

// A buffer whose last byte is followed by an inaccessible page (and whose first byte follows one),
// so any read or write past either end of a table or an output faults.
class Guarded {
 public:
  explicit Guarded(size_t bytes) : bytes_(bytes) {
    const size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    span_ = (bytes + pg - 1) / pg * pg + 2 * pg;
    base_ = static_cast<uint8_t*>(mmap(nullptr, span_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    mprotect(base_ + pg, span_ - 2 * pg, PROT_READ | PROT_WRITE);
    data_ = base_ + span_ - pg - bytes;  // ends exactly at the trailing guard page
  }
  ~Guarded() { munmap(base_, span_); }
  uint8_t* data() const { return data_; }

 private:
  size_t bytes_, span_;
  uint8_t* base_;
  uint8_t* data_;
};

// Every format and tail dim, with the last table row and the last output row against guard pages:
// the kernels must read exactly the row bytes and write exactly the output elements.
TEST(EmbeddingBag, ExactTailsAgainstGuardPages) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    for (const Format& f : kFormats) {
      for (int64_t dim : {1, 3, 5, 7, 9, 15, 17, 31, 33, 63, 65, 163}) {
        for (qj_dtype out : {QJ_F32, QJ_F16, QJ_BF16}) {
          for (qj_pooling pool : {QJ_POOL_SUM, QJ_POOL_NONE}) {
            SCOPED_TRACE(fmt_name(f) + " dim " + std::to_string(dim) + " out " + qj_dtype_name(out));
            const int64_t rows = 3, rb = natural_row(f, dim);
            std::vector<uint8_t> scales;
            std::vector<uint8_t> src = make_table(f, dim, rows, rb, static_cast<uint32_t>(dim), &scales);
            Guarded table(src.size());
            std::memcpy(table.data(), src.data(), src.size());
            const int ob = out == QJ_F32 ? 4 : 2;
            const int64_t nidx = 4;
            const int64_t out_rows = pool == QJ_POOL_NONE ? nidx : 2;
            Guarded o(static_cast<size_t>(out_rows * dim * ob));
            const int64_t idx[nidx] = {2, 0, 2, 2};  // the last row, the first row
            const int64_t offs[3] = {0, 1, 4};
            qj_embedding_bag_desc d = simple_desc(f.t, dim);
            d.index_bits = d.offset_bits = 64;
            d.scale_bias_first = f.sbf;
            d.out_type = out;
            d.pooling = pool;
            d.prefetch_distance = 2;
            qj_embedding_bag_plan p;
            ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
            qj_embedding_bag_args args{table.data(), scales.data(), rows, 2, idx, nidx, offs, nullptr, o.data()};
            ASSERT_EQ(qj_embedding_bag_run_ex(p, &args, nullptr), QJ_OK) << qj_last_error();
            std::vector<uint8_t> want(static_cast<size_t>(out_rows * dim * ob));
            qj::ref::EmbTable rt{f.t, dim, f.sbf, rb, src.data(), rows, scales.data()};
            ASSERT_TRUE(qj::ref::embedding_bag(d, rt, 2, idx, nidx, offs, nullptr, want.data(), 0, out_rows));
            ASSERT_EQ(0, std::memcmp(o.data(), want.data(), want.size()));
            qj_embedding_bag_plan_destroy(p);
          }
        }
      }
    }
  }
}

// Bags longer than the default prefetch distance (up to 64 rows ahead for 4/2-bit and MX rows, 16
// for the others), with the default distance and hint, so the prefetching kernels run past the
// distance and stop it at the end of the index array (which ends at a guard page: an index read
// beyond it faults). Weighted / positional / unweighted pooled rows (their per-row scale, bias
// and bias sum are scalar lane-0 operations), sum and mean, every tier, bit-exact. Dims 1000 and
// 2100 take several column blocks (2100: more than two, the run-time block loop), where the Zen 5
// AVX-512 kernels of 4-bit, 2-bit, half and MX rows also prefetch the next bag's rows (and SPLIT
// rows' scale bytes) from every block (key param[5] bit 0, `nb` in the name; 2-bit rows, and
// 4-bit rows of dim 1000, then at half the default distance), and every block after the first
// prefetches its own bytes of the row `distance` ahead (bit 1, `bp`; all these formats, and at the
// AVX2 tier 8-bit, 4-bit and f16 rows of three blocks or more on any CPU): their index reads stop
// at the same array end.
TEST(EmbeddingBag, LongBagsDefaultPrefetchEveryTier) {
  const Format formats[] = {{QJ_FUSED_8BIT, false}, {QJ_FUSED_4BIT, false}, {QJ_FUSED_2BIT, false},
                            {QJ_FUSED_8BIT, true},  {QJ_FUSED_4BIT, true},  {QJ_F16, false},
                            {QJ_MXFP4_E2M1, false}, {QJ_MXINT8, false},     {QJ_MXFP8_E4M3, false}};
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    uint32_t n_case = 0;
    for (const Format& f : formats) {
      for (int64_t dim : {17, 32, 64, 130, 1000, 2100}) {
        for (int wm = 0; wm < 3; ++wm) {
          const int ib = n_case % 2 ? 32 : 64;
          const qj_pooling pool = (n_case / 2) % 2 ? QJ_POOL_MEAN : QJ_POOL_SUM;
          SCOPED_TRACE(fmt_name(f) + " dim " + std::to_string(dim) + " wm " + std::to_string(wm));
          const int64_t rows = 300, rb = natural_row(f, dim), nbags = 5;
          std::vector<uint8_t> scales;  // SPLIT MX rows
          std::vector<uint8_t> table = make_table(f, dim, rows, rb, 7000 + n_case, &scales);
          const int64_t offs[nbags + 1] = {0, 150, 150, 151, 221, 421};  // 150, 0, 1, 70, 200
          const int64_t n = offs[nbags];
          std::mt19937 g(8000 + n_case++);
          Guarded idx(static_cast<size_t>(n * ib / 8));
          for (int64_t i = 0; i < n; ++i) {
            const int64_t v = static_cast<int64_t>(g() % rows);
            if (ib == 32) {
              const int32_t v32 = static_cast<int32_t>(v);
              std::memcpy(idx.data() + i * 4, &v32, 4);
            } else {
              std::memcpy(idx.data() + i * 8, &v, 8);
            }
          }
          std::vector<float> wts(static_cast<size_t>(n));
          for (auto& v : wts) v = static_cast<float>(g() % 2000) / 1000.0f - 1.0f;
          qj_embedding_bag_desc d = simple_desc(f.t, dim);
          d.index_bits = ib;
          d.offset_bits = 64;
          d.scale_bias_first = f.sbf;
          d.weighted = wm != 0;
          d.positional = wm == 2;
          d.pooling = pool;
          qj_embedding_bag_plan p;
          ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
          const std::string name = qj_embedding_bag_plan_kernel_name(p);
          if (isa >= QJ_ISA_AVX2) EXPECT_NE(name.find("_pf"), std::string::npos) << name;
          const bool zen5_blocks = dim >= 1000 && isa >= QJ_ISA_AVX512 && qj::amd_family() >= 0x1a;
          // AVX2 8-bit, 4-bit and f16 rows of three column blocks or more (dims 1000, 2100 here;
          // 130 has two)
          const bool avx2_blocks = dim >= 1000 && isa == QJ_ISA_AVX2 &&
                                   (f.t == QJ_FUSED_8BIT || f.t == QJ_FUSED_4BIT || f.t == QJ_F16);
          const bool next_bag =
              zen5_blocks && (f.t == QJ_FUSED_4BIT || f.t == QJ_FUSED_2BIT || f.t == QJ_F16 || is_mx(f.t));
          const std::string pf_tail = name.substr(name.rfind("_pf") + 3);  // <dist><hint>[nb][bp]__<isa>
          EXPECT_EQ(pf_tail.find("nb") != std::string::npos, next_bag) << name;
          EXPECT_EQ(pf_tail.find("bp__") != std::string::npos, zen5_blocks || avx2_blocks) << name;  // (no fp32 rows here)
          if (next_bag && f.t == QJ_FUSED_2BIT) {
            const std::string half = "_pf" + std::to_string(qj::embedding_default_prefetch(f.t, dim) / 2) + "t";
            EXPECT_NE(name.find(half), std::string::npos) << name;
          }
          // positional weights are read at the position in the bag (< 200, within the array)
          const float* w = wm == 0 ? nullptr : wts.data();
          std::vector<float> got(static_cast<size_t>(nbags * dim), -7.0f), want(got.size(), -7.0f);
          const bool split = is_mx(f.t) && f.t != QJ_MXFP4_E2M1;
          const qj_embedding_bag_args args{table.data(), split ? scales.data() : nullptr, rows, nbags,
                                           idx.data(), n, offs, w, got.data()};
          ASSERT_EQ(qj_embedding_bag_run_ex(p, &args, nullptr), QJ_OK) << qj_last_error();
          qj::ref::EmbTable rt{f.t, dim, f.sbf, rb, table.data(), rows, args.table_scales};
          ASSERT_TRUE(qj::ref::embedding_bag(d, rt, nbags, idx.data(), n, offs, w, want.data(), 0, nbags));
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << name;
          qj_embedding_bag_plan_destroy(p);
        }
      }
    }
  }
}

// QJ_PREFETCH_HINT_AUTO: prefetcht0 for float rows of dim <= 64, prefetcht2 for the rest, except
// on Zen 5 (AMD family 0x1A), where every row takes prefetcht0 (the kernel's name carries the
// instruction); an explicit hint is kept.
TEST(EmbeddingBag, AutoPrefetchHintByRowSize) {
  if (qj_cpu_isa() < QJ_ISA_AVX2) GTEST_SKIP() << "no JIT tier";
  const char* rest = qj::amd_family() >= 0x1a ? "t0__" : "t2__";  // all but float rows of dim <= 64
  struct Case {
    qj_dtype t;
    int64_t dim;
    qj_prefetch_hint hint;
    const char* want;
  } cases[] = {{QJ_F32, 32, QJ_PREFETCH_HINT_AUTO, "t0__"},  {QJ_F32, 65, QJ_PREFETCH_HINT_AUTO, rest},
               {QJ_F16, 64, QJ_PREFETCH_HINT_AUTO, "t0__"}, {QJ_BF16, 65, QJ_PREFETCH_HINT_AUTO, rest},
               {QJ_F16, 1, QJ_PREFETCH_HINT_AUTO, "t0__"},   {QJ_FUSED_8BIT, 32, QJ_PREFETCH_HINT_AUTO, rest},
               {QJ_MXFP4_E2M1, 64, QJ_PREFETCH_HINT_AUTO, rest}, {QJ_FUSED_4BIT, 64, QJ_PREFETCH_HINT_T2, "t2__"},
               {QJ_F32, 32, QJ_PREFETCH_HINT_T2, "t2__"},    {QJ_F32, 256, QJ_PREFETCH_HINT_T0, "t0__"}};
  for (const Case& c : cases) {
    qj_embedding_bag_desc d = simple_desc(c.t, c.dim);
    d.prefetch_hint = c.hint;
    qj_embedding_bag_plan p;
    ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
    const std::string name = qj_embedding_bag_plan_kernel_name(p);
    EXPECT_NE(name.find(c.want), std::string::npos) << name << " want " << c.want;
    qj_embedding_bag_plan_destroy(p);
  }
}

// The default distance of 4/2-bit rows of one cache line: 64 rows ahead on CPUs with AVX-512, 16
// on CPUs without it (measured on a Zen 3: src/ops/embedding_bag.cpp); 8-bit rows 16 either way
// but on Zen 5 (32). Rows of about 1 KiB (8-bit dim 1024, 4-bit dim 2048): 16 ahead on CPUs
// without AVX-512, 8 with it, 4 for 8-bit rows on Zen 5.
TEST(EmbeddingBag, DefaultDistanceOfShortRowsByCpu) {
  if (qj_cpu_isa() < QJ_ISA_AVX2) GTEST_SKIP() << "no JIT tier";
  const bool avx512 = qj_cpu_isa() >= QJ_ISA_AVX512;
  for (qj_dtype t : {QJ_FUSED_4BIT, QJ_FUSED_2BIT, QJ_FUSED_8BIT}) {
    const int want = t == QJ_FUSED_8BIT ? (qj::amd_family() >= 0x1a ? 32 : 16) : (avx512 ? 64 : 16);
    EXPECT_EQ(qj::embedding_default_prefetch(t, 32), want) << qj_dtype_name(t);
    qj_embedding_bag_desc d = simple_desc(t, 32);
    qj_embedding_bag_plan p;
    ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
    const std::string name = qj_embedding_bag_plan_kernel_name(p);
    EXPECT_NE(name.find("_pf" + std::to_string(want) + "t"), std::string::npos) << name << " want " << want;
    qj_embedding_bag_plan_destroy(p);
  }
  const bool zen5 = qj::amd_family() >= 0x1a;
  EXPECT_EQ(qj::embedding_default_prefetch(QJ_FUSED_8BIT, 1024), zen5 ? 4 : avx512 ? 8 : 16);
  EXPECT_EQ(qj::embedding_default_prefetch(QJ_FUSED_4BIT, 2048), avx512 ? 8 : 16);
}

// MX rows with scales at both ends of the E8M0 range and around 1 (products that are
// subnormal, that overflow, NaN blocks) and, for the SPLIT ones, rows with NaN / Inf codes; few
// rows so that bags mix them; dims up to several column blocks: bit for bit against the
// reference on every tier, for each pooling and weighting, except that NaN matches NaN (NaN
// codes, 0xFF scales and inf - inf meet in the sums; which NaN a sum of two keeps is not
// specified).
TEST(EmbeddingBag, MxScaleRangeEnds) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 900;
    for (qj_dtype t : {QJ_MXINT8, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP4_E2M1})
      for (int64_t dim : {32, 64, 40, 1000})
        for (qj_pooling pool : {QJ_POOL_SUM, QJ_POOL_MEAN, QJ_POOL_NONE})
          for (int wm : {0, 1}) {
            Case c{{t, false}, dim};
            c.pool = pool;
            c.weight_mode = wm;
            c.rows = 9;
            c.nbags = 12;
            c.avg = 6;
            c.boundary_scales = true;
            c.nan_payloads_free = true;
            run_case(c, ++seed);
          }
  }
}

// The last scale byte of the folded blocks and the first one after it, where the largest codes'
// products overflow: a bag of a large positive row and a row of the most negative code is -inf in
// the reference (the product rounds to -inf first), finite if the two were summed in one
// rounding. Unweighted sums (the FMA form), bit for bit.
TEST(EmbeddingBag, MxFoldedScaleOverflowEdge) {
  struct Edge {
    qj_dtype t;
    uint8_t pos, neg, last;  // largest positive / negative code, last folded scale byte
  } edges[] = {{QJ_MXINT8, 0x7f, 0x80, 253},      // 127, -128
               {QJ_MXFP8_E4M3, 0x7e, 0xfe, 246},  // +-448
               {QJ_MXFP8_E5M2, 0x7b, 0xfb, 239},  // +-57344
               {QJ_MXFP4_E2M1, 0x77, 0xff, 252}};  // two codes of +-6 per byte
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (const Edge& e : edges) {
      const qj_dtype t = e.t;
      SCOPED_TRACE(std::string(qj_isa_name(isa)) + " " + qj_dtype_name(t));
      // rows: 0 large positive (scale: MXINT8 254, where 127 stays finite; else the last folded),
      // 1 most negative at the first unfolded scale, 2 most negative at the last folded one
      const bool fp4 = t == QJ_MXFP4_E2M1;
      const int64_t rb = fp4 ? 17 : 32;
      std::vector<uint8_t> scales{static_cast<uint8_t>(t == QJ_MXINT8 ? 254 : e.last),
                                  static_cast<uint8_t>(e.last + 1), e.last};
      std::vector<uint8_t> table(static_cast<size_t>(3 * rb));
      for (int r = 0; r < 3; ++r) {
        std::fill(table.begin() + r * rb, table.begin() + r * rb + (fp4 ? 16 : 32), r == 0 ? e.pos : e.neg);
        if (fp4) table[static_cast<size_t>(r * rb + 16)] = scales[static_cast<size_t>(r)];
      }
      const int64_t idx[7] = {0, 1, 0, 2, 1, 0, 2};
      const int64_t offs[5] = {0, 2, 4, 6, 7};
      qj_embedding_bag_desc d = simple_desc(t, 32);
      d.index_bits = 64;
      d.offset_bits = 64;
      qj_embedding_bag_plan p;
      ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
      std::vector<float> got(4 * 32), want(4 * 32);
      const uint8_t* sc = fp4 ? nullptr : scales.data();
      qj_embedding_bag_args a{table.data(), sc, 3, 4, idx, 7, offs, nullptr, got.data()};
      ASSERT_EQ(qj_embedding_bag_run_ex(p, &a, nullptr), QJ_OK) << qj_last_error();
      qj::ref::EmbTable rt{t, 32, false, rb, table.data(), 3, sc};
      ASSERT_TRUE(qj::ref::embedding_bag(d, rt, 4, idx, 7, offs, nullptr, want.data(), 0, 4));
      EXPECT_TRUE(std::isinf(want[0]) && want[0] < 0) << want[0];  // bag {0, 1}: the overflow
      EXPECT_TRUE(std::isfinite(want[32])) << want[32];             // bag {0, 2}
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << got[0] << " " << got[32];
      qj_embedding_bag_plan_destroy(p);
    }
  }
}

// FP8 NaN codes at the first and last bytes of blocks (E4M3 rows find them by a running minimum
// over the row's code bytes, codegen/embedding_bag.cpp): one NaN code per row, since a row found
// to hold one has all of its NaN codes placed exactly.
TEST(EmbeddingBag, MxFp8NanCodesAtBlockEdges) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype t : {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2}) {
      SCOPED_TRACE(std::string(qj_isa_name(isa)) + " " + qj_dtype_name(t));
      const int64_t dim = 160;  // 5 blocks: two pairs and a single one
      const int R = 6, nan_at[R] = {0, 63, 64, 127, 128, 159};
      const int64_t rb = qj::ref::emb_row_bytes(t, dim, false);
      std::vector<uint8_t> table(static_cast<size_t>(R * rb), t == QJ_MXFP8_E4M3 ? 0x38 : 0x3c);  // 1.0
      std::vector<uint8_t> scales(R * 5, 127);
      for (int r = 0; r < R; ++r) table[r * rb + nan_at[r]] = t == QJ_MXFP8_E4M3 ? 0x7f : 0xfd;
      for (qj_pooling pool : {QJ_POOL_NONE, QJ_POOL_SUM}) {
        qj_embedding_bag_desc d = simple_desc(t, dim);
        d.pooling = pool;
        qj_embedding_bag_plan p;
        ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
        const int32_t idx[R] = {0, 1, 2, 3, 4, 5}, offs[R + 1] = {0, 1, 2, 3, 4, 5, 6};
        std::vector<float> out(R * dim, 5.0f);
        const bool gather = pool == QJ_POOL_NONE;
        qj_embedding_bag_args a{table.data(), scales.data(), R, gather ? 0 : R, idx, R, gather ? nullptr : offs,
                                nullptr, out.data()};
        ASSERT_EQ(qj_embedding_bag_run_ex(p, &a, nullptr), QJ_OK) << qj_last_error();
        for (int r = 0; r < R; ++r) {
          for (int64_t j = 0; j < dim; ++j) {
            if (j == nan_at[r])
              ASSERT_TRUE(std::isnan(out[r * dim + j])) << r << " " << j;
            else
              ASSERT_EQ(out[r * dim + j], 1.0f) << r << " " << j;
          }
        }
        qj_embedding_bag_plan_destroy(p);
      }
    }
  }
}

// MX rows: a NaN scale byte makes its block NaN, 0x00 is 2^-127, FP8 NaN codes give NaN; and SPLIT
// rows without their scale array are refused.
TEST(EmbeddingBag, MxSpecialScalesAndCodes) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype t : {QJ_MXFP4_E2M1, QJ_MXINT8, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2}) {
      SCOPED_TRACE(std::string(qj_isa_name(isa)) + " " + qj_dtype_name(t));
      const int64_t dim = 70;  // 3 blocks, the last partial
      std::vector<uint8_t> row(static_cast<size_t>(qj::ref::emb_row_bytes(t, dim, false)), 0);
      std::vector<uint8_t> scales{0xff, 0x00, 127};
      if (t == QJ_MXFP4_E2M1) {
        for (int b = 0; b < 3; ++b) {
          for (int j = 0; j < 16; ++j) row[b * 17 + j] = 0x72;  // codes 2 (1.0) and 7 (6.0)
          row[b * 17 + 16] = scales[b];
        }
      } else {
        for (size_t j = 0; j < row.size(); ++j) row[j] = t == QJ_MXINT8 ? 64 : t == QJ_MXFP8_E4M3 ? 0x38 : 0x3c;  // 1.0
        if (t != QJ_MXINT8) {
          row[64] = t == QJ_MXFP8_E4M3 ? 0xff : 0x7d;  // NaN codes: block 2, first vector
          row[52] = t == QJ_MXFP8_E4M3 ? 0x7f : 0xfe;  // block 1, second vector (of 16)
        }
      }
      const bool fp8 = t == QJ_MXFP8_E4M3 || t == QJ_MXFP8_E5M2;
      qj_embedding_bag_desc d = simple_desc(t, dim);
      d.pooling = QJ_POOL_NONE;
      qj_embedding_bag_plan p;
      ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
      const int32_t idx[1] = {0};
      std::vector<float> out(dim, 5.0f);
      qj_embedding_bag_args a{row.data(), scales.data(), 1, 0, idx, 1, nullptr, nullptr, out.data()};
      ASSERT_EQ(qj_embedding_bag_run_ex(p, &a, nullptr), QJ_OK) << qj_last_error();
      for (int64_t j = 0; j < 32; ++j) ASSERT_TRUE(std::isnan(out[j])) << j;
      const float tiny = std::ldexp(1.0f, -127);
      for (int64_t j = 32; j < 64; ++j) {
        if (fp8 && j == 52) {
          ASSERT_TRUE(std::isnan(out[j]));
          continue;
        }
        ASSERT_EQ(out[j], (t == QJ_MXFP4_E2M1 ? (j % 2 ? 6.0f : 1.0f) : 1.0f) * tiny) << j;
      }
      if (fp8) {
        ASSERT_TRUE(std::isnan(out[64]));
        ASSERT_EQ(out[65], 1.0f);
        // Pooled and weighted (the first row sets the sums, the second adds to them): the NaN
        // codes' lanes are NaN, the others 2 + 3 times the value.
        qj_embedding_bag_desc dw = simple_desc(t, dim);
        dw.weighted = 1;
        qj_embedding_bag_plan pw;
        ASSERT_EQ(qj_embedding_bag_plan_create(&dw, &pw), QJ_OK) << qj_last_error();
        const int32_t idx2[2] = {0, 0}, offs[2] = {0, 2};
        const float wts[2] = {2.0f, 3.0f};
        qj_embedding_bag_args aw{row.data(), scales.data(), 1, 1, idx2, 2, offs, wts, out.data()};
        ASSERT_EQ(qj_embedding_bag_run_ex(pw, &aw, nullptr), QJ_OK) << qj_last_error();
        for (int64_t j = 0; j < dim; ++j) {
          if (j < 32 || j == 52 || j == 64)
            ASSERT_TRUE(std::isnan(out[j])) << j;
          else
            ASSERT_EQ(out[j], 5.0f * (j < 64 ? tiny : 1.0f)) << j;
        }
        qj_embedding_bag_plan_destroy(pw);
      }
      if (t != QJ_MXFP4_E2M1) {
        EXPECT_EQ(qj_embedding_bag_run(p, row.data(), 1, 0, idx, 1, nullptr, nullptr, out.data(), nullptr),
                  QJ_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(qj_last_error()).find("table_scales"), std::string::npos) << qj_last_error();
        EXPECT_EQ(qj_embedding_bag_run_parallel(p, row.data(), 1, 0, idx, 1, nullptr, nullptr, out.data(), 2),
                  QJ_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(qj_last_error()).find("qj_embedding_bag_run_parallel_ex"), std::string::npos)
            << qj_last_error();
      }
      EXPECT_EQ(qj_embedding_bag_run_parallel_ex(p, nullptr, 2), QJ_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(qj_last_error()).find("args is NULL"), std::string::npos) << qj_last_error();
      qj_embedding_bag_plan_destroy(p);
    }
  }
}

// fp16 / bf16 outputs of special values (gather passes fp32 rows through unchanged): NaNs whose
// payload would round into an infinity, infinities, values that round to infinity, subnormals.
TEST(EmbeddingBag, SpecialValuesRoundLikeTheReference) {
  const uint32_t bits[] = {0x7f800001u, 0x7f808000u, 0xffbfffffu, 0x7fc00000u, 0x7f800000u, 0xff800000u,
                           0x7f7fffffu, 0x477ff000u, 0x477fefffu, 0x00000001u, 0x80000000u, 0x33000000u,
                           0x33000001u, 0x387fc000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu};
  const int64_t dim = sizeof(bits) / 4;
  std::vector<float> row(dim);
  for (int64_t j = 0; j < dim; ++j) row[j] = qj::bits_f32(bits[j]);
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype out : {QJ_F16, QJ_BF16}) {
      qj_embedding_bag_desc d = simple_desc(QJ_F32, dim);
      d.pooling = QJ_POOL_NONE;
      d.out_type = out;
      qj_embedding_bag_plan p;
      ASSERT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK);
      const int32_t idx[1] = {0};
      std::vector<uint16_t> got(dim), want(dim);
      ASSERT_EQ(qj_embedding_bag_run(p, row.data(), 1, 0, idx, 1, nullptr, nullptr, got.data(), nullptr), QJ_OK);
      for (int64_t j = 0; j < dim; ++j) {
        want[j] = out == QJ_F16 ? qj::f32_to_f16(row[j]) : qj::f32_to_bf16(row[j]);
        EXPECT_EQ(got[j], want[j]) << qj_isa_name(isa) << " " << qj_dtype_name(out) << " input 0x" << std::hex << bits[j];
      }
      qj_embedding_bag_plan_destroy(p);
    }
  }
}

}  // namespace
