// qj_rowwise_adagrad_fused against src/ref at every ISA tier, bit for bit: coalescing of duplicate
// rows, 1/2/3/8 threads giving identical bits, SGD, the per-occurrence mode, fp16 tables with
// nearest-even and stochastic rounding, and bad inputs leaving the table untouched.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/formats/fp16_stochastic.h"
#include "src/formats/half.h"
#include "src/ops/rowwise_adagrad.h"
#include "src/ref/rowwise_adagrad_ref.h"
#include "test/test_util.h"

namespace {

struct Problem {
  qj_rowwise_adagrad_desc d;
  int64_t rows, nbags;
  std::vector<uint8_t> table;
  std::vector<float> h;
  std::vector<int64_t> idx64, ol64;
  std::vector<uint8_t> idx, ol;
  std::vector<float> w, g;
};

std::vector<uint8_t> pack(const std::vector<int64_t>& v, int bits) {
  std::vector<uint8_t> o(v.size() * bits / 8 + 8);
  for (size_t i = 0; i < v.size(); ++i) {
    if (bits == 32) {
      int32_t x = static_cast<int32_t>(v[i]);
      std::memcpy(&o[i * 4], &x, 4);
    } else {
      std::memcpy(&o[i * 8], &v[i], 8);
    }
  }
  return o;
}

// Indices drawn from few rows, so most rows occur several times, within and across bags.
Problem make(qj_dtype tt, int64_t dim, int wmode, qj_pooling pool, qj_sparse_optimizer opt, qj_update_mode mode,
             bool sr, int ib, int obits, bool lengths, uint32_t seed) {
  Problem p;
  std::memset(&p.d, 0, sizeof p.d);
  auto& d = p.d;
  d.table_type = tt;
  d.dim = dim;
  d.index_bits = ib;
  d.offset_bits = obits;
  d.use_lengths = lengths;
  d.weighted = wmode != 0;
  d.positional = wmode == 2;
  d.pooling = pool;
  d.optimizer = opt;
  d.mode = mode;
  d.learning_rate = 0.05f;
  d.epsilon = 1e-6f;
  d.stochastic_rounding = sr;
  d.grad_stride = dim + (seed % 2);
  p.rows = 23;
  p.nbags = 11;
  std::mt19937 gen(seed);
  std::vector<float> t = qjt::random_floats(static_cast<size_t>(p.rows * dim), -1, 1, seed + 1);
  if (tt == QJ_F32) {
    p.table.resize(t.size() * 4);
    std::memcpy(p.table.data(), t.data(), p.table.size());
  } else {
    p.table.resize(t.size() * 2);
    for (size_t i = 0; i < t.size(); ++i) {
      uint16_t x = qj::f32_to_f16(t[i]);
      std::memcpy(&p.table[i * 2], &x, 2);
    }
  }
  p.h = qjt::random_floats(static_cast<size_t>(p.rows), 0, 0.5f, seed + 2);
  p.ol64.push_back(0);
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < p.nbags; ++b) {
    int64_t len = b == 3 ? 0 : static_cast<int64_t>(gen() % 9);
    lens.push_back(len);
    for (int64_t k = 0; k < len; ++k) p.idx64.push_back(static_cast<int64_t>(gen() % 9) * 2);  // rows 0,2,..,16
    p.ol64.push_back(p.ol64.back() + len);
  }
  if (lengths) p.ol64 = lens;
  p.idx = pack(p.idx64, ib);
  p.ol = pack(p.ol64, obits);
  p.w = qjt::random_floats(p.idx64.size() + 1, -1.5f, 1.5f, seed + 3);
  p.g = qjt::random_floats(static_cast<size_t>(p.nbags * d.grad_stride), -1, 1, seed + 4);
  return p;
}

qj_status run_api(Problem& p, std::vector<uint8_t>& table, std::vector<float>& h, int threads, uint64_t seed = 42) {
  return qj_rowwise_adagrad_fused(&p.d, table.data(), h.data(), p.rows, p.nbags, p.idx.data(),
                                  static_cast<int64_t>(p.idx64.size()), p.ol.data(), p.d.weighted ? p.w.data() : nullptr,
                                  p.g.data(), seed, threads);
}

TEST(RowwiseAdagrad, MatchesReferenceEveryTierAndThreadCount) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    uint32_t n = 0;
    for (qj_dtype tt : {QJ_F32, QJ_F16}) {
      for (bool sr : {false, true}) {
        if (sr && tt == QJ_F32) continue;
        for (qj_sparse_optimizer opt : {QJ_OPT_ROWWISE_ADAGRAD, QJ_OPT_SGD}) {
          for (qj_update_mode mode : {QJ_UPDATE_COALESCED, QJ_UPDATE_PER_OCCURRENCE_RACY}) {
            for (int64_t dim : {1, 7, 8, 15, 16, 17, 33, 64, 100}) {
              ++n;
              const int wmode = static_cast<int>(n % 3);
              const qj_pooling pool = n % 4 == 1 ? QJ_POOL_MEAN : QJ_POOL_SUM;
              const int ib = n % 2 ? 32 : 64, obits = (n / 2) % 2 ? 32 : 64;
              const bool lengths = (n / 3) % 2;
              Problem p = make(tt, dim, wmode, pool, opt, mode, sr, ib, obits, lengths, 77 + n);
              SCOPED_TRACE(std::string(qj_dtype_name(tt)) + (sr ? " sr" : "") + " opt " + std::to_string(opt) +
                           " mode " + std::to_string(mode) + " dim " + std::to_string(dim) + " w " +
                           std::to_string(wmode) + " pool " + std::to_string(pool));
              std::vector<uint8_t> want = p.table;
              std::vector<float> hw = p.h;
              ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(p.d, want.data(), hw.data(), p.rows, p.nbags, p.idx.data(),
                                                         static_cast<int64_t>(p.idx64.size()), p.ol.data(),
                                                         p.d.weighted ? p.w.data() : nullptr, p.g.data(), 42));
              ASSERT_NE(want, p.table) << "the update changed nothing: the test would not see a broken kernel";
              // Coalesced: any thread count gives the same bits. Per-occurrence: one thread only
              // (several race by design).
              for (int threads : mode == QJ_UPDATE_COALESCED ? std::vector<int>{1, 2, 3, 8} : std::vector<int>{1}) {
                std::vector<uint8_t> got = p.table;
                std::vector<float> hg = p.h;
                ASSERT_EQ(run_api(p, got, hg, threads), QJ_OK) << qj_last_error();
                ASSERT_EQ(got, want) << threads << " threads";
                if (opt == QJ_OPT_ROWWISE_ADAGRAD) {
                  for (size_t r = 0; r < hw.size(); ++r) ASSERT_EQ(qj::f32_bits(hg[r]), qj::f32_bits(hw[r])) << "h row " << r;
                } else {
                  ASSERT_EQ(hg, p.h) << "SGD must not touch the momentum";
                }
              }
            }
          }
        }
      }
    }
  }
}

// Seeded random sample of every option with random dims, table sizes, bag lengths and index
// distributions (QJ_TEST_ITERATIONS / QJ_TEST_SEED scale it up for a long local run,
// test/test_util.h): the reference's bits at 1 and 3 threads (per-occurrence mode: 1 thread).
TEST(RowwiseAdagrad, RandomCombinationsEveryTier) {
  qjt::for_each_random_case(99001u, 25, [&](qj_isa, qjt::Picker& pick, uint32_t seed) {
    const qj_dtype tt = pick(2) ? QJ_F32 : QJ_F16;
    const bool sr = tt == QJ_F16 && pick(2);
    const int64_t dim = pick(4) == 0 ? 1 + pick(1100) : 1 + pick(140);
    const int wmode = pick(3);
    const qj_pooling pool = pick(2) ? QJ_POOL_MEAN : QJ_POOL_SUM;
    const qj_sparse_optimizer opt = pick(4) == 0 ? QJ_OPT_SGD : QJ_OPT_ROWWISE_ADAGRAD;
    const qj_update_mode mode = pick(4) == 0 ? QJ_UPDATE_PER_OCCURRENCE_RACY : QJ_UPDATE_COALESCED;
    Problem p = make(tt, dim, wmode, pool, opt, mode, sr, pick(2) ? 32 : 64, pick(2) ? 32 : 64, pick(2), seed);
    // Replace make()'s small fixed problem by a random one of the same options.
    p.rows = 1 + pick(pick(3) == 0 ? 5000 : 50);
    p.nbags = pick(30);
    const int64_t hot = 1 + pick(static_cast<int>(p.rows));  // rows drawn from [0, hot): duplicates
    p.idx64.clear();
    p.ol64.assign(1, 0);
    std::vector<int64_t> lens;
    for (int64_t b = 0; b < p.nbags; ++b) {
      const int64_t len = pick(5) == 0 ? 0 : pick(pick(4) == 0 ? 200 : 12);
      lens.push_back(len);
      for (int64_t k = 0; k < len; ++k) p.idx64.push_back(pick(3) == 0 ? pick(static_cast<int>(p.rows)) : pick(static_cast<int>(hot)));
      p.ol64.push_back(p.ol64.back() + len);
    }
    if (p.d.use_lengths) p.ol64 = lens;
    p.idx = pack(p.idx64, p.d.index_bits);
    p.ol = pack(p.ol64, p.d.offset_bits);
    const std::vector<float> t = qjt::random_floats(static_cast<size_t>(p.rows * dim), -1, 1, seed + 1);
    p.table.assign(t.size() * (tt == QJ_F32 ? 4 : 2), 0);
    for (size_t i = 0; i < t.size(); ++i) {
      if (tt == QJ_F32) {
        std::memcpy(&p.table[i * 4], &t[i], 4);
      } else {
        const uint16_t x = qj::f32_to_f16(t[i]);
        std::memcpy(&p.table[i * 2], &x, 2);
      }
    }
    p.h = qjt::random_floats(static_cast<size_t>(p.rows), 0, 0.5f, seed + 2);
    p.w = qjt::random_floats(p.idx64.size() + 1, -1.5f, 1.5f, seed + 3);
    p.g = qjt::random_floats(static_cast<size_t>(p.nbags * p.d.grad_stride + 1), -1, 1, seed + 4);
    SCOPED_TRACE(std::string(qj_dtype_name(tt)) + (sr ? " sr" : "") + " opt " + std::to_string(opt) + " mode " +
                 std::to_string(mode) + " dim " + std::to_string(dim) + " w " + std::to_string(wmode) + " pool " +
                 std::to_string(pool) + " rows " + std::to_string(p.rows) + " bags " + std::to_string(p.nbags) +
                 " seed " + std::to_string(seed));
    std::vector<uint8_t> want = p.table;
    std::vector<float> hw = p.h;
    ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(p.d, want.data(), hw.data(), p.rows, p.nbags, p.idx.data(),
                                               static_cast<int64_t>(p.idx64.size()), p.ol.data(),
                                               p.d.weighted ? p.w.data() : nullptr, p.g.data(), 42));
    for (int threads : mode == QJ_UPDATE_COALESCED ? std::vector<int>{1, 3} : std::vector<int>{1}) {
      std::vector<uint8_t> got = p.table;
      std::vector<float> hg = p.h;
      ASSERT_EQ(run_api(p, got, hg, threads), QJ_OK) << qj_last_error();
      ASSERT_EQ(got, want) << threads << " threads";
      for (size_t r = 0; r < hw.size(); ++r) ASSERT_EQ(qj::f32_bits(hg[r]), qj::f32_bits(hw[r])) << "h row " << r;
    }
  });
}

// Coalescing in numbers: a row used three times gets one step with the summed gradient, not
// three steps (which is what the per-occurrence mode does).
TEST(RowwiseAdagrad, CoalescedIsOneStepPerRow) {
  Problem p = make(QJ_F32, 4, 0, QJ_POOL_SUM, QJ_OPT_ROWWISE_ADAGRAD, QJ_UPDATE_COALESCED, false, 64, 64, false, 5);
  p.idx64 = {3, 3, 3};
  p.ol64 = {0, 2, 3};
  p.nbags = 2;
  p.idx = pack(p.idx64, 64);
  p.ol = pack(p.ol64, 64);
  std::fill(p.h.begin(), p.h.end(), 0.0f);
  std::vector<uint8_t> t = p.table;
  std::vector<float> h = p.h;
  ASSERT_EQ(run_api(p, t, h, 2), QJ_OK) << qj_last_error();
  const float* g0 = p.g.data();
  const float* g1 = p.g.data() + p.d.grad_stride;
  float G[4], s = 0;
  for (int j = 0; j < 4; ++j) {
    G[j] = 2 * g0[j] + g1[j];
    s += G[j] * G[j];
  }
  EXPECT_NEAR(h[3], s / 4, 1e-6f);
  const float* w0 = reinterpret_cast<const float*>(p.table.data()) + 3 * 4;
  const float* w1 = reinterpret_cast<const float*>(t.data()) + 3 * 4;
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(w1[j], w0[j] - 0.05f * G[j] / (std::sqrt(s / 4) + 1e-6f), 1e-5f);
  std::vector<uint8_t> t2 = p.table;
  std::vector<float> h2(p.h.size(), 0.0f);
  p.d.mode = QJ_UPDATE_PER_OCCURRENCE_RACY;
  ASSERT_EQ(run_api(p, t2, h2, 1), QJ_OK);
  float s3 = 0;
  for (int j = 0; j < 4; ++j) s3 += 2 * g0[j] * g0[j] + g1[j] * g1[j];
  EXPECT_NEAR(h2[3], s3 / 4, 1e-5f);  // three separate steps accumulate three squared gradients
}

// Stochastic rounding: reproducible for a seed, different for another, and unbiased: a value a
// quarter of the way between two fp16 neighbours rounds up about a quarter of the time.
TEST(RowwiseAdagrad, StochasticRoundingIsReproducibleAndUnbiased) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    const int64_t dim = 4096;
    qj_rowwise_adagrad_desc d;
    std::memset(&d, 0, sizeof d);
    d.table_type = QJ_F16;
    d.dim = dim;
    d.index_bits = d.offset_bits = 32;
    d.pooling = QJ_POOL_SUM;
    d.optimizer = QJ_OPT_SGD;
    d.learning_rate = 1.0f;
    d.stochastic_rounding = 1;
    // w = 1.0 (fp16 ulp 2^-10); G = -2^-12: w + 2^-12 lies a quarter of an ulp above 1.0.
    std::vector<uint16_t> w(dim, qj::f32_to_f16(1.0f)), w2, w3;
    std::vector<float> g(dim, -std::ldexp(1.0f, -12));
    const int32_t idx[1] = {0}, off[2] = {0, 1};
    w2 = w3 = w;
    ASSERT_EQ(qj_rowwise_adagrad_fused(&d, w.data(), nullptr, 1, 1, idx, 1, off, nullptr, g.data(), 7, 1), QJ_OK)
        << qj_last_error();
    ASSERT_EQ(qj_rowwise_adagrad_fused(&d, w2.data(), nullptr, 1, 1, idx, 1, off, nullptr, g.data(), 7, 1), QJ_OK);
    ASSERT_EQ(qj_rowwise_adagrad_fused(&d, w3.data(), nullptr, 1, 1, idx, 1, off, nullptr, g.data(), 8, 1), QJ_OK);
    EXPECT_EQ(w, w2);
    EXPECT_NE(w, w3);
    int up = 0;
    for (uint16_t x : w) {
      ASSERT_TRUE(x == 0x3c00 || x == 0x3c01) << std::hex << x;
      up += x == 0x3c01;
    }
    // Binomial(4096, 1/4): mean 1024, sd 27.7; +-6 sd.
    EXPECT_NEAR(up, 1024, 166) << qj_isa_name(isa);
    // Nearest-even rounding instead: always down.
    d.stochastic_rounding = 0;
    std::vector<uint16_t> wn(dim, qj::f32_to_f16(1.0f));
    ASSERT_EQ(qj_rowwise_adagrad_fused(&d, wn.data(), nullptr, 1, 1, idx, 1, off, nullptr, g.data(), 7, 1), QJ_OK);
    for (uint16_t x : wn) ASSERT_EQ(x, 0x3c00);
  }
}

TEST(RowwiseAdagrad, BadInputsLeaveTheTableUntouched) {
  Problem p = make(QJ_F32, 8, 1, QJ_POOL_SUM, QJ_OPT_ROWWISE_ADAGRAD, QJ_UPDATE_COALESCED, false, 64, 64, false, 9);
  std::vector<uint8_t> t = p.table;
  std::vector<float> h = p.h;
  p.idx64.back() = p.rows;
  p.idx = pack(p.idx64, 64);
  EXPECT_EQ(run_api(p, t, h, 3), QJ_ERR_OUT_OF_RANGE);
  std::string msg = qj_last_error();
  int64_t last_bag = p.nbags - 1;
  while (p.ol64[last_bag] == p.ol64[last_bag + 1]) --last_bag;  // the bag holding the last index
  EXPECT_NE(msg.find("bag " + std::to_string(last_bag) + ":"), std::string::npos) << msg;
  EXPECT_NE(msg.find("indices[" + std::to_string(p.idx64.size() - 1) + "] = 23"), std::string::npos) << msg;
  EXPECT_EQ(t, p.table);
  EXPECT_EQ(h, p.h);
  p.idx64.back() = 0;
  p.idx = pack(p.idx64, 64);
  p.ol64[2] = p.ol64[1] - 1;
  p.ol = pack(p.ol64, 64);
  EXPECT_EQ(run_api(p, t, h, 1), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("bag 1"), std::string::npos) << qj_last_error();
  EXPECT_EQ(t, p.table);
  qj_rowwise_adagrad_desc bad = p.d;
  bad.table_type = QJ_BF16;
  EXPECT_EQ(qj_rowwise_adagrad_fused(&bad, t.data(), h.data(), p.rows, 0, nullptr, 0, nullptr, nullptr, nullptr, 0, 1),
            QJ_ERR_INVALID_ARGUMENT);
  bad = p.d;
  bad.stochastic_rounding = 1;
  EXPECT_EQ(qj_rowwise_adagrad_fused(&bad, t.data(), h.data(), p.rows, 0, nullptr, 0, nullptr, nullptr, nullptr, 0, 1),
            QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("stochastic_rounding"), std::string::npos);
  bad = p.d;
  bad.pooling = QJ_POOL_NONE;
  EXPECT_EQ(qj_rowwise_adagrad_fused(&bad, t.data(), h.data(), p.rows, 0, nullptr, 0, nullptr, nullptr, nullptr, 0, 1),
            QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(qj_rowwise_adagrad_fused(&p.d, t.data(), nullptr, p.rows, p.nbags, p.idx.data(),
                                     static_cast<int64_t>(p.idx64.size()), p.ol.data(), p.w.data(), p.g.data(), 0, 1),
            QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("momentum is NULL"), std::string::npos);
  EXPECT_EQ(qj_rowwise_adagrad_fused(&p.d, t.data(), h.data(), p.rows, 0, nullptr, 0, nullptr, nullptr, nullptr, 0, 0),
            QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(qj_rowwise_adagrad_fused(&p.d, t.data(), h.data(), p.rows, p.nbags, p.idx.data(),
                                     static_cast<int64_t>(p.idx64.size()), p.ol.data(), p.w.data(), p.g.data(), 0, 1025),
            QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("num_threads=1025 must be in [1, 1024]"), std::string::npos)
      << qj_last_error();
  EXPECT_EQ(t, p.table);
  EXPECT_EQ(h, p.h);
}

// The driver's own structure: hash grouping of many indices (collisions, several occurrences of a
// row across many bags, rows far apart), the per-bag shortcut for single unweighted occurrences
// next to duplicated and weighted rows, rows of every tail length, the software pipeline across
// range boundaries (1/2/3/8 threads), at every tier, bit for bit against the reference.
struct BigCase {
  qj_rowwise_adagrad_desc d;
  int64_t rows, nbags;
  std::vector<int64_t> idx64, off64;
  std::vector<uint8_t> idx, off, table;
  std::vector<float> h, w, g;
};

BigCase make_big(qj_dtype tt, int64_t dim, bool weighted, qj_pooling pool, bool sr, int ib, uint32_t seed) {
  BigCase c;
  std::memset(&c.d, 0, sizeof c.d);
  c.d.table_type = tt;
  c.d.dim = dim;
  c.d.index_bits = ib;
  c.d.offset_bits = 64;
  c.d.weighted = weighted;
  c.d.pooling = pool;
  c.d.optimizer = QJ_OPT_ROWWISE_ADAGRAD;
  c.d.mode = QJ_UPDATE_COALESCED;
  c.d.learning_rate = 0.03f;
  c.d.epsilon = 1e-7f;
  c.d.stochastic_rounding = sr;
  c.rows = 3000;
  c.nbags = 37;
  std::mt19937 gen(seed);
  c.off64.push_back(0);
  for (int64_t b = 0; b < c.nbags; ++b) {
    const int64_t len = b % 11 == 5 ? 0 : 1 + static_cast<int64_t>(gen() % 120);
    for (int64_t k = 0; k < len; ++k) {
      // mostly distinct rows (the shortcut), a hot set of 40 rows (duplicates within and across
      // bags), and rows that collide in a power-of-two hash (multiples of 1024)
      const uint32_t kind = gen() % 10;
      int64_t r = kind < 6 ? static_cast<int64_t>(gen() % c.rows) : kind < 9 ? static_cast<int64_t>(gen() % 40) * 7
                                                                          : static_cast<int64_t>(gen() % 3) * 1024;
      c.idx64.push_back(r);
    }
    c.off64.push_back(static_cast<int64_t>(c.idx64.size()));
  }
  c.idx = pack(c.idx64, ib);
  c.off = pack(c.off64, 64);
  const std::vector<float> t = qjt::random_floats(static_cast<size_t>(c.rows * dim), -1, 1, seed + 1);
  if (tt == QJ_F32) {
    c.table.resize(t.size() * 4);
    std::memcpy(c.table.data(), t.data(), c.table.size());
  } else {
    c.table.resize(t.size() * 2);
    for (size_t i = 0; i < t.size(); ++i) {
      const uint16_t x = qj::f32_to_f16(t[i]);
      std::memcpy(&c.table[i * 2], &x, 2);
    }
  }
  c.h = qjt::random_floats(static_cast<size_t>(c.rows), 0, 0.5f, seed + 2);
  c.w = qjt::random_floats(c.idx64.size() + 1, -1.5f, 1.5f, seed + 3);
  c.g = qjt::random_floats(static_cast<size_t>(c.nbags * dim), -1, 1, seed + 4);
  return c;
}

// Runs c through src/ref and through the API at each thread count: the same table bytes and
// momentum bits, and a table the update changed.
void expect_big_matches_reference(const BigCase& c, bool weighted, uint64_t seed, std::initializer_list<int> threads) {
  std::vector<uint8_t> want = c.table;
  std::vector<float> hw = c.h;
  const int64_t ni = static_cast<int64_t>(c.idx64.size());
  const float* w = weighted ? c.w.data() : nullptr;
  ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(c.d, want.data(), hw.data(), c.rows, c.nbags, c.idx.data(), ni,
                                             c.off.data(), w, c.g.data(), seed));
  ASSERT_NE(want, c.table) << "the update changed nothing: the test would not see a broken kernel";
  for (int t : threads) {
    std::vector<uint8_t> got = c.table;
    std::vector<float> hg = c.h;
    ASSERT_EQ(qj_rowwise_adagrad_fused(&c.d, got.data(), hg.data(), c.rows, c.nbags, c.idx.data(), ni, c.off.data(), w,
                                       c.g.data(), seed, t),
              QJ_OK)
        << qj_last_error();
    ASSERT_EQ(got, want) << t << " threads";
    for (size_t r = 0; r < hw.size(); ++r) ASSERT_EQ(qj::f32_bits(hg[r]), qj::f32_bits(hw[r])) << "h row " << r;
  }
}

TEST(RowwiseAdagrad, ManyIndicesEveryTierMatchReference) {
  const std::vector<int64_t> dims = {1, 4, 7, 8, 15, 16, 17, 31, 32, 33, 64, 96, 128, 163, 256, 512, 1000};
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    uint32_t n = 0;
    for (int64_t dim : dims) {
      for (int variant = 0; variant < 3; ++variant) {
        ++n;
        const qj_dtype tt = variant == 0 ? QJ_F32 : QJ_F16;
        const bool sr = variant == 2;
        const bool weighted = n % 3 == 1;
        const qj_pooling pool = n % 4 == 2 ? QJ_POOL_MEAN : QJ_POOL_SUM;
        BigCase c = make_big(tt, dim, weighted, pool, sr, n % 2 ? 32 : 64, 1000 + n);
        SCOPED_TRACE(std::string(qj_dtype_name(tt)) + (sr ? " sr" : "") + " dim " + std::to_string(dim) +
                     (weighted ? " weighted" : "") + (pool == QJ_POOL_MEAN ? " mean" : " sum"));
        ASSERT_NO_FATAL_FAILURE(expect_big_matches_reference(c, weighted, 99, {1, 2, 3, 8}));
      }
    }
  }
}

// Unweighted rows that occur once go to the AVX-512 tier's register-held-G runs (dim = 16 NV up
// to 256; beyond, fp16 up to 512 and fp32 any, with the first 256 values in registers) or, for
// other widths, to the per-row update: every width class, table type and rounding, at every tier
// and thread count. The per-occurrence mode sends every unweighted bag through the same runs:
// checked on the same cases (one thread, the reference's order) with a row repeated back to back
// in some bags (its second momentum step comes before its first table update there), AdaGrad and
// SGD.
TEST(RowwiseAdagrad, UnweightedRunsEveryWidthMatchReference) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    uint32_t n = 0;
    for (int64_t dim : {16, 48, 128, 256, 272, 400, 512, 528, 1024, 1000}) {
      for (int variant = 0; variant < 3; ++variant) {
        ++n;
        const qj_dtype tt = variant == 0 ? QJ_F32 : QJ_F16;
        const bool sr = variant == 2;
        const qj_pooling pool = n % 2 ? QJ_POOL_SUM : QJ_POOL_MEAN;
        BigCase c = make_big(tt, dim, false, pool, sr, n % 2 ? 32 : 64, 5000 + n);
        SCOPED_TRACE(std::string(qj_dtype_name(tt)) + (sr ? " sr" : "") + " dim " + std::to_string(dim));
        ASSERT_NO_FATAL_FAILURE(expect_big_matches_reference(c, false, 11, {1, 3}));
        for (int64_t b = 0; b < c.nbags; b += 3)  // back-to-back repeats
          if (c.off64[b + 1] - c.off64[b] >= 3) c.idx64[c.off64[b] + 1] = c.idx64[c.off64[b]];
        c.idx = pack(c.idx64, c.d.index_bits);
        c.d.mode = QJ_UPDATE_PER_OCCURRENCE_RACY;
        ASSERT_NO_FATAL_FAILURE(expect_big_matches_reference(c, false, 11, {1}));
        c.d.optimizer = QJ_OPT_SGD;
        ASSERT_NO_FATAL_FAILURE(expect_big_matches_reference(c, false, 11, {1}));
      }
    }
  }
}

// Tables larger than the last-level cache prefetch rows into L2 (prefetcht1) instead of L1 (a
// separate instantiation of every update path), or for rows under 512 bytes into L1 and also
// farther ahead into L2: both forced here on small tables (results identical), coalesced and
// per-occurrence, at every tier.
TEST(RowwiseAdagrad, L2PrefetchPathsMatchReference) {
  struct Force {
    explicit Force(int mode) { qj::rowwise_adagrad_force_prefetch_l2(mode); }
    ~Force() { qj::rowwise_adagrad_force_prefetch_l2(-1); }
  };
  // 1: prefetcht1 only; 2: prefetchw plus the farther prefetcht1 (by default: rows under 512 bytes
  // of tables larger than the L3)
  for (int mode : {1, 2}) {
    Force force(mode);
    for (qj_isa isa : qjt::supported_isas()) {
      qjt::IsaCap cap(isa);
      SCOPED_TRACE(std::string(qj_isa_name(isa)) + " prefetch mode " + std::to_string(mode));
      uint32_t n = 0;
      for (int64_t dim : {7, 32, 128, 272, 1024}) {
        for (int variant = 0; variant < 3; ++variant) {
          ++n;
          const qj_dtype tt = variant == 0 ? QJ_F32 : QJ_F16;
          const bool sr = variant == 2;
          const bool weighted = n % 3 == 1;
          BigCase c = make_big(tt, dim, weighted, n % 2 ? QJ_POOL_SUM : QJ_POOL_MEAN, sr, n % 2 ? 32 : 64, 7000 + n);
          SCOPED_TRACE(std::string(qj_dtype_name(tt)) + (sr ? " sr" : "") + " dim " + std::to_string(dim) +
                       (weighted ? " weighted" : ""));
          ASSERT_NO_FATAL_FAILURE(expect_big_matches_reference(c, weighted, 23, {1, 3}));
          c.d.mode = QJ_UPDATE_PER_OCCURRENCE_RACY;  // one thread: the reference's order
          ASSERT_NO_FATAL_FAILURE(expect_big_matches_reference(c, weighted, 23, {1}));
        }
      }
    }
  }
}

// Non-finite and extreme values through every update path (register-held G, wide rows, tails,
// nearest-even and stochastic rounding): table rows holding +-inf, NaNs and +-65504 (fp16) /
// +-FLT_MAX (fp32) keep following the reference (the stochastic bits go to finite values only;
// NaN and inf pass unchanged), and a large learning rate pushes finite values past the fp16 range.
// SGD also takes inf / NaN gradients (in columns apart from the table's specials, so each result
// has one NaN source).
TEST(RowwiseAdagrad, NonFiniteValuesFollowTheReference) {
  const uint16_t h_special[] = {0x7c00, 0xfc00, 0x7e00, 0x7d23, 0xfe01, 0x7bff, 0xfbff, 0x7bfe};
  const float f_special[] = {INFINITY, -INFINITY, NAN, -NAN, 3.4028235e38f, -3.4028235e38f, 1e38f, -1e38f};
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    uint32_t n = 0;
    for (int64_t dim : {16, 40, 128, 256, 272, 1000}) {
      for (int variant = 0; variant < 4; ++variant) {
        ++n;
        const qj_dtype tt = variant == 0 ? QJ_F32 : QJ_F16;
        const bool sr = variant >= 2;
        const bool sgd = variant == 3;
        BigCase c = make_big(tt, dim, false, QJ_POOL_SUM, sr, 32, 7000 + n);
        c.d.learning_rate = 300.0f;  // steps of ~300: fp16 values near 65504 overflow
        if (sgd) c.d.optimizer = QJ_OPT_SGD;
        SCOPED_TRACE(std::string(qj_dtype_name(tt)) + (sr ? " sr" : "") + (sgd ? " sgd" : "") + " dim " +
                     std::to_string(dim));
        // specials in columns 0..7 of every third row; gradients (SGD) in columns 8..9
        for (int64_t r = 0; r < c.rows; r += 3)
          for (int64_t col = 0; col < 8; ++col) {
            if (tt == QJ_F16)
              std::memcpy(&c.table[(r * dim + col) * 2], &h_special[(col + r) % 8], 2);
            else
              std::memcpy(&c.table[(r * dim + col) * 4], &f_special[(col + r) % 8], 4);
          }
        if (sgd)
          for (int64_t b = 0; b < c.nbags; b += 4) {
            c.g[b * dim + 8] = b % 8 ? INFINITY : -INFINITY;
            c.g[b * dim + 9] = NAN;
          }
        ASSERT_NO_FATAL_FAILURE(expect_big_matches_reference(c, false, 5, {1, 2}));
      }
    }
  }
}

// Stochastic rounding of results beyond fp16's range: finite ones round toward zero to +-65504
// (the random bits must not carry a value near FLT_MAX into the exponent: that made NaN), inf
// stays inf and NaN NaN, whatever the payload. Checked against these values, not the reference.
TEST(RowwiseAdagrad, StochasticRoundingOfHugeResults) {
  EXPECT_EQ(qj::f32_to_f16_stochastic(3.4028235e38f, 0x1fff), 0x7bff);
  EXPECT_EQ(qj::f32_to_f16_stochastic(-3.4028235e38f, 0x1fff), 0xfbff);
  const int64_t dim = 40;  // vectors and a tail
  // per column of the one bag's gradient g (SGD, lr 1: w = 1 - g); what w must become
  struct Col {
    float g;
    uint16_t want;  // 0: any NaN
  };
  const Col cols[] = {{-3.4028235e38f, 0x7bff}, {3.4028235e38f, 0xfbff}, {-3.3e38f, 0x7bff}, {-1e30f, 0x7bff},
                      {-65600.0f, 0x7bff},      {-INFINITY, 0x7c00},     {INFINITY, 0xfc00}};
  std::vector<float> g(dim, 0.0f);
  for (int64_t j = 0; j < dim; ++j) {
    const int c = static_cast<int>(j % 8);
    g[j] = c < 7 ? cols[c].g : qj::bits_f32(j % 16 == 7 ? 0xffffffffu : 0x7fffffffu);  // NaN, full payload
  }
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_update_mode mode : {QJ_UPDATE_COALESCED, QJ_UPDATE_PER_OCCURRENCE_RACY}) {
      qj_rowwise_adagrad_desc d;
      std::memset(&d, 0, sizeof d);
      d.table_type = QJ_F16;
      d.dim = dim;
      d.index_bits = 32;
      d.offset_bits = 32;
      d.pooling = QJ_POOL_SUM;
      d.optimizer = QJ_OPT_SGD;
      d.mode = mode;
      d.learning_rate = 1.0f;
      d.stochastic_rounding = 1;
      std::vector<uint16_t> table(2 * dim, 0x3c00);  // 1.0
      const int32_t idx[] = {1};
      const int32_t off[] = {0, 1};
      for (uint64_t seed : {1u, 2u, 3u}) {
        ASSERT_EQ(qj_rowwise_adagrad_fused(&d, table.data(), nullptr, 2, 1, idx, 1, off, nullptr, g.data(), seed, 1),
                  QJ_OK)
            << qj_last_error();
        for (int64_t j = 0; j < dim; ++j) {
          const int c = static_cast<int>(j % 8);
          const uint16_t h = table[dim + j];
          if (c == 7)
            EXPECT_TRUE((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) << std::hex << h << " col " << j << " " << qj_isa_name(isa);
          else
            EXPECT_EQ(h, cols[c].want) << "col " << j << " g " << g[j] << " " << qj_isa_name(isa);
          table[dim + j] = 0x3c00;
        }
        for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(table[j], 0x3c00) << "row 0 was written";
      }
    }
  }
}

// A caller's pool that, like a work-stealing pool, runs queued work on the waiting caller: here
// another row-wise AdaGrad call (a different table, larger) while the outer call's slices run.
// The outer call's result must be that of the same call without the nested one (the slices read
// the calling thread's grouping scratch, which the nested call must not reuse).
std::function<void()> g_queued;
void stealing_pool(void*, qj_task_fn fn, void* ctx, int32_t n) {
  std::vector<std::thread> ts;
  for (int32_t t = 1; t < n; ++t) ts.emplace_back(fn, ctx, t, n);
  if (g_queued) {
    std::function<void()> f = std::move(g_queued);
    g_queued = nullptr;
    f();
  }
  fn(ctx, 0, n);
  for (auto& t : ts) t.join();
}

TEST(RowwiseAdagrad, NestedCallOnAWaitingCallerThread) {
  struct Call {
    qj_rowwise_adagrad_desc d;
    int64_t rows, bags;
    std::vector<float> table, mom, grad;
    std::vector<int32_t> idx, off;
    Call(int64_t dim, int64_t rows_, int64_t bags_, int per_bag, uint32_t seed) : rows(rows_), bags(bags_) {
      std::memset(&d, 0, sizeof d);
      d.table_type = QJ_F32;
      d.dim = dim;
      d.index_bits = 32;
      d.offset_bits = 32;
      d.pooling = QJ_POOL_SUM;
      d.optimizer = QJ_OPT_ROWWISE_ADAGRAD;
      d.learning_rate = 0.1f;
      d.epsilon = 1e-5f;
      table = qjt::random_floats(rows * dim, -1.0f, 1.0f, seed);
      mom.assign(rows, 0.0f);
      grad = qjt::random_floats(bags * dim, -1.0f, 1.0f, seed + 1);
      idx = qjt::random_ints<int32_t>(bags * per_bag, 0, static_cast<int>(rows - 1), seed + 2);
      for (int64_t b = 0; b <= bags; ++b) off.push_back(static_cast<int32_t>(b * per_bag));
    }
    qj_status run() {
      return qj_rowwise_adagrad_fused(&d, table.data(), mom.data(), rows, bags, idx.data(),
                                      static_cast<int64_t>(idx.size()), off.data(), nullptr, grad.data(), 7, 3);
    }
  };
  Call want(32, 500, 40, 5, 1), outer(32, 500, 40, 5, 1), inner(256, 4000, 400, 20, 9);
  ASSERT_EQ(want.run(), QJ_OK) << qj_last_error();
  qj_set_parallel_for(stealing_pool, nullptr);
  g_queued = [&] { EXPECT_EQ(inner.run(), QJ_OK) << qj_last_error(); };
  const qj_status st = outer.run();
  qj_set_parallel_for(nullptr, nullptr);
  EXPECT_FALSE(g_queued) << "the pool did not run the queued call";
  ASSERT_EQ(st, QJ_OK) << qj_last_error();
  EXPECT_EQ(0, std::memcmp(outer.table.data(), want.table.data(), want.table.size() * 4));
  EXPECT_EQ(0, std::memcmp(outer.mom.data(), want.mom.data(), want.mom.size() * 4));
}

// An fp32 sum-pooled row-wise AdaGrad descriptor (coalesced: the memset's 0), lr 0.01, eps 1e-6.
qj_rowwise_adagrad_desc adagrad_f32_desc(int64_t dim, int index_bits) {
  qj_rowwise_adagrad_desc d;
  std::memset(&d, 0, sizeof d);
  d.table_type = QJ_F32;
  d.dim = dim;
  d.index_bits = index_bits;
  d.offset_bits = 64;
  d.pooling = QJ_POOL_SUM;
  d.optimizer = QJ_OPT_ROWWISE_ADAGRAD;
  d.mode = QJ_UPDATE_COALESCED;
  d.learning_rate = 0.01f;
  d.epsilon = 1e-6f;
  return d;
}

// The grouping's scratch is reused across calls (slots tagged with a call generation, never
// cleared; the compact slots' 8-bit generation wraps every 255 calls) and its 16-byte slots are
// used when num_rows does not fit 32 bits: a long sequence of calls with changing index sets and
// sizes stays equal to the reference applied call by call.
TEST(RowwiseAdagrad, RepeatedCallsReuseTheGroupingScratch) {
  for (int64_t num_rows_declared : {int64_t{0}, int64_t{1} << 33}) {
    const int64_t rows = 600, dim = 5;
    const qj_rowwise_adagrad_desc d = adagrad_f32_desc(dim, 64);
    std::vector<float> t = qjt::random_floats(static_cast<size_t>(rows * dim), -1, 1, 5), tref = t;
    std::vector<float> h(rows, 0.25f), href = h;
    std::mt19937 gen(17);
    for (int call = 0; call < 300; ++call) {
      const int64_t n = 1 + static_cast<int64_t>(gen() % (call % 50 == 0 ? 900 : 40));
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (auto& v : idx) v = static_cast<int64_t>(gen() % (call % 2 ? 30 : rows));
      const int64_t off[3] = {0, n / 2, n};
      std::vector<float> g = qjt::random_floats(static_cast<size_t>(2 * dim), -1, 1, 100 + call);
      ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(d, tref.data(), href.data(), rows, 2, idx.data(), n, off, nullptr,
                                                 g.data(), 0));
      ASSERT_EQ(qj_rowwise_adagrad_fused(&d, t.data(), h.data(), num_rows_declared ? num_rows_declared : rows, 2,
                                         idx.data(), n, off, nullptr, g.data(), 0, 1 + call % 3),
                QJ_OK)
          << qj_last_error();
      ASSERT_EQ(0, std::memcmp(t.data(), tref.data(), t.size() * 4)) << "call " << call;
      ASSERT_EQ(0, std::memcmp(h.data(), href.data(), h.size() * 4)) << "call " << call;
    }
  }
}

// Rows whose hashes collide in the grouping's table (rowwise_adagrad_row_hash: the same top 16
// bits, so the same first slot at every table size a call of this length gets), repeated in an
// interleaved order within and across bags: each occurrence probes past the other rows' slots to
// find its own. Compact and 16-byte slots (a declared row count above 2^32), every tier.
TEST(RowwiseAdagrad, CollidingRowsAreCoalesced) {
  const int64_t rows = 1 << 20, dim = 3;
  const uint64_t top = qj::rowwise_adagrad_row_hash(12345) >> 48;
  std::vector<int64_t> coll;
  for (int64_t r = 0; r < rows && coll.size() < 8; ++r)
    if (qj::rowwise_adagrad_row_hash(static_cast<uint64_t>(r)) >> 48 == top) coll.push_back(r);
  ASSERT_EQ(coll.size(), 8u);
  std::vector<int64_t> idx;
  std::mt19937 gen(3);
  for (int k = 0; k < 48; ++k) idx.push_back(coll[gen() % coll.size()]);
  const int64_t n = static_cast<int64_t>(idx.size()), off[4] = {0, 17, 30, n};
  const qj_rowwise_adagrad_desc d = adagrad_f32_desc(dim, 64);
  const std::vector<float> t0 = qjt::random_floats(static_cast<size_t>(rows * dim), -1, 1, 8), h0(rows, 0.25f);
  const std::vector<float> g = qjt::random_floats(static_cast<size_t>(3 * dim), -1, 1, 9);
  std::vector<float> want = t0, hw = h0;
  ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(d, want.data(), hw.data(), rows, 3, idx.data(), n, off, nullptr, g.data(), 0));
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (int64_t declared : {rows, int64_t{1} << 33}) {
      SCOPED_TRACE(std::string(qj_isa_name(isa)) + " declared rows " + std::to_string(declared));
      std::vector<float> t = t0, h = h0;
      ASSERT_EQ(qj_rowwise_adagrad_fused(&d, t.data(), h.data(), declared, 3, idx.data(), n, off, nullptr, g.data(), 0, 1),
                QJ_OK)
          << qj_last_error();
      ASSERT_EQ(0, std::memcmp(t.data(), want.data(), t.size() * 4));
      ASSERT_EQ(0, std::memcmp(h.data(), hw.data(), h.size() * 4));
    }
  }
}

// After a call much larger than the next one, the thread's grouping scratch is released and
// rebuilt (rowwise_adagrad.cpp): the small call after a large one still matches the reference.
TEST(RowwiseAdagrad, ScratchReleasedAfterALargeCall) {
  const qj_rowwise_adagrad_desc d = adagrad_f32_desc(1, 32);
  const int64_t rows = 1000;
  std::vector<float> t = qjt::random_floats(rows, -1, 1, 3), tref = t, h(rows, 0.5f), href = h;
  std::mt19937 gen(5);
  for (int64_t n : {(int64_t{1} << 20) + 9, int64_t{100}}) {
    std::vector<int32_t> idx(static_cast<size_t>(n));
    for (auto& v : idx) v = static_cast<int32_t>(gen() % rows);
    const int64_t off[2] = {0, n};
    const float g[1] = {0.25f};
    ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(d, tref.data(), href.data(), rows, 1, idx.data(), n, off, nullptr, g, 0));
    ASSERT_EQ(qj_rowwise_adagrad_fused(&d, t.data(), h.data(), rows, 1, idx.data(), n, off, nullptr, g, 0, 1), QJ_OK)
        << qj_last_error();
    ASSERT_EQ(0, std::memcmp(t.data(), tref.data(), t.size() * 4)) << n;
    ASSERT_EQ(0, std::memcmp(h.data(), href.data(), h.size() * 4)) << n;
  }
}

// The stochastic-rounding bits are the documented function (src/formats/fp16_stochastic.h) and the
// two-step row key equals the one-step one.
TEST(RowwiseAdagrad, StochasticBitsAreTheDocumentedFunction) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{7}, ~uint64_t{0} - 3}) {
    for (uint64_t row : {uint64_t{0}, uint64_t{12345}, uint64_t{1} << 40}) {
      const uint32_t key = qj::sr_row_key(seed, row);
      ASSERT_EQ(key, qj::sr_row_key_from(qj::sr_seed_key(seed), row));
      for (uint32_t j : {0u, 1u, 15u, 16u, 17u, 31u, 32u, 48u, 1000u, 1009u}) {
        // j and j + 16 (j % 32 < 16) share one product: its bits 19-31 and 6-18
        const uint32_t q = j % 32 < 16 ? j : j - 16;
        const uint32_t p = (key ^ (q * 0x9E3779B9u)) * 0x2C1B3C6Du;
        const uint32_t want = j % 32 < 16 ? p >> 19 : (p >> 6) % 8192;
        ASSERT_EQ(qj::sr_bits(key, j), want);
        ASSERT_LT(qj::sr_bits(key, j), 1u << 13);
      }
    }
  }
}

}  // namespace
