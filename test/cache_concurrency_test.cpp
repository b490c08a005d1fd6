// The kernel cache under concurrency (also run under ThreadSanitizer in CI's sanitizer job).
//
// - Single flight: 8 threads create plans for overlapping kernel keys at the same moment (a
//   barrier per round), run them against src/ref and destroy them. Afterwards the cache holds
//   exactly one kernel per miss, and the number of misses equals the number of distinct keys,
//   measured by creating every configuration once more, sequentially, after qj_cache_clear (a
//   sequential pass cannot generate a key twice). Lookups (hits + misses) add up.
// - One plan (and one weights object) shared by 8 threads: concurrent creation from the same
//   weights, concurrent runs on private buffers, and the FBGEMM model of each thread running its
//   own partition of one shared C.
// - qj_cache_clear and qj_cache_stats racing with plan creation: live plans keep working.
// Problems are small so the TSan build stays fast.
#include <asmjit/x86.h>
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "src/core/kernel_cache.h"
#include "src/ref/gemm_ref.h"
#include "test/gemm_case.h"
#include "test/test_util.h"

namespace {

using qjt::GemmCase;

constexpr int kThreads = 8;

// Configurations whose kernel keys overlap: some differ only in M or K (same keys: hits), others
// in output type, epilogue options, zero points, N tail or grouping (new keys).
std::vector<GemmCase> configs() {
  std::vector<GemmCase> v;
  auto add = [&](int64_t m, int64_t n, int64_t k, qj_dtype at, qj_dtype ct, bool bias, bool relu,
                 bool bzp, qj_granularity gran, int64_t group) {
    GemmCase c;
    c.m = m;
    c.n = n;
    c.k = k;
    c.a_type = at;
    c.c_type = ct;
    c.bias = bias;
    c.relu = relu;
    c.b_zp = bzp;
    c.gran = gran;
    c.group = group;
    c.seed = static_cast<uint32_t>(v.size() + 1);
    v.push_back(c);
  };
  add(5, 37, 64, QJ_U8, QJ_U8, true, false, false, QJ_GRAN_CHANNEL, 0);
  add(9, 37, 40, QJ_U8, QJ_U8, true, false, false, QJ_GRAN_CHANNEL, 0);  // same keys as above
  add(3, 37, 64, QJ_S8, QJ_F32, true, true, true, QJ_GRAN_CHANNEL, 0);
  add(6, 20, 64, QJ_U8, QJ_S32, false, false, true, QJ_GRAN_TENSOR, 0);
  add(4, 50, 64, QJ_F32, QJ_BF16, false, false, false, QJ_GRAN_GROUP, 32);
  add(2, 50, 96, QJ_F32, QJ_BF16, false, false, false, QJ_GRAN_GROUP, 32);  // same keys as above
  add(7, 16, 33, QJ_U8, QJ_S8, true, true, false, QJ_GRAN_CHANNEL, 0);
  add(1, 40, 64, QJ_BF16, QJ_F32, true, false, true, QJ_GRAN_CHANNEL, 0);
  add(5, 37, 64, QJ_U8, QJ_F32, false, false, false, QJ_GRAN_CHANNEL, 0);
  add(8, 9, 20, QJ_S8, QJ_U8, false, true, true, QJ_GRAN_CHANNEL, 0);
  return v;
}

qj_cache_stats_t stats() {
  qj_cache_stats_t s{};
  qj_cache_stats(&s);
  return s;
}

class CacheConcurrency : public ::testing::TestWithParam<qj_isa> {};

TEST_P(CacheConcurrency, SingleFlightAndConsistentStats) {
  qjt::IsaCap cap(GetParam());
  const std::vector<GemmCase> cfg = configs();
  const int rounds = static_cast<int>(cfg.size());
  constexpr int kPasses = 3;  // each pass starts from an empty cache: every key is contended again
  std::vector<uint64_t> misses(kPasses), hits(kPasses);
  for (int pass = 0; pass < kPasses; ++pass) {
    qj_cache_clear();  // no plan is alive: the cache is empty now
    const qj_cache_stats_t s0 = stats();
    ASSERT_EQ(s0.entries, 0u);
    // In round r, thread t runs configuration (r + t % 3) % rounds, so each configuration is
    // created by ~3 threads at the same moment, and in 3 different rounds.
    std::vector<std::string> errors(kThreads * rounds);
    std::barrier sync(kThreads);
    std::vector<std::thread> th;
    for (int t = 0; t < kThreads; ++t)
      th.emplace_back([&, t] {
        for (int r = 0; r < rounds; ++r) {
          sync.arrive_and_wait();
          errors[t * rounds + r] = qjt::run_gemm_case(cfg[(r + t % 3) % rounds]);
        }
      });
    for (auto& x : th) x.join();
    for (int i = 0; i < kThreads * rounds; ++i)
      EXPECT_EQ(errors[i], "") << cfg[(i % rounds + (i / rounds) % 3) % rounds].str();
    const qj_cache_stats_t s1 = stats();
    misses[pass] = s1.misses - s0.misses;
    hits[pass] = s1.hits - s0.hits;
    EXPECT_EQ(s1.evictions, s0.evictions) << "the default bound should not evict here";
    EXPECT_EQ(s1.entries, misses[pass]) << "every generated kernel is cached exactly once";
    if (misses[pass] > 0) EXPECT_GT(s1.generation_ns, s0.generation_ns);
    if (GetParam() == QJ_ISA_SCALAR) {
      EXPECT_EQ(misses[pass], 0u);
      EXPECT_EQ(s1.fallbacks - s0.fallbacks, static_cast<uint64_t>(kThreads * rounds))
          << "one fallback per plan at the scalar tier";
    } else {
      EXPECT_GT(misses[pass], 0u);
      EXPECT_EQ(s1.fallbacks, s0.fallbacks) << "no JIT plan should fall back";
    }
  }

  // Sequential phase: the distinct keys, and the lookups each configuration makes.
  qj_cache_clear();
  const qj_cache_stats_t s2 = stats();
  EXPECT_EQ(s2.entries, 0u);
  EXPECT_EQ(s2.code_bytes, 0u) << "no plan is alive, the cache is clear: no JIT code should be held";
  std::vector<uint64_t> lookups(rounds);
  for (int r = 0; r < rounds; ++r) {
    const qj_cache_stats_t a = stats();
    EXPECT_EQ(qjt::run_gemm_case(cfg[r]), "") << cfg[r].str();
    const qj_cache_stats_t b = stats();
    lookups[r] = (b.hits + b.misses) - (a.hits + a.misses);
  }
  const qj_cache_stats_t s3 = stats();
  const uint64_t distinct = s3.misses - s2.misses;
  uint64_t expected_lookups = 0;
  for (int t = 0; t < kThreads; ++t)
    for (int r = 0; r < rounds; ++r) expected_lookups += lookups[(r + t % 3) % rounds];
  for (int pass = 0; pass < kPasses; ++pass) {
    EXPECT_EQ(misses[pass], distinct) << "pass " << pass << ": concurrent creation generated " << misses[pass]
                                      << " kernels for " << distinct << " distinct keys (single flight violated)";
    EXPECT_EQ(hits[pass] + misses[pass], expected_lookups) << "pass " << pass;
  }
  qj_cache_clear();
}

// Reference output for one problem.
struct Problem {
  int64_t m = 23, n = 45, k = 70;
  std::vector<int8_t> wq;
  std::vector<float> scales;
  std::vector<int32_t> zps;
  std::vector<uint8_t> a;
  qj_gemm_desc desc{};
  std::vector<float> bias;
  qj::ref::IntWeights ref_w() const {
    qj::ref::IntWeights r;
    r.k = k;
    r.n = n;
    r.gran = QJ_GRAN_CHANNEL;
    r.scales = scales;
    r.zero_points = zps;
    r.q.assign(wq.begin(), wq.end());
    return r;
  }
};

Problem make_problem() {
  Problem p;
  p.wq = qjt::random_ints<int8_t>(p.k * p.n, -128, 127, 11);
  p.scales = qjt::random_floats(p.n, 0.001f, 0.02f, 12);
  p.zps = qjt::random_ints<int32_t>(p.n, -128, 127, 13);
  p.a = qjt::random_ints<uint8_t>(p.m * p.k, 0, 255, 14);
  p.bias = qjt::random_floats(p.n, -20.0f, 20.0f, 15);
  p.desc.a_type = QJ_U8;
  p.desc.a_scale = 0.03f;
  p.desc.a_zero_point = 120;
  p.desc.c_type = QJ_U8;
  p.desc.c_scale = 0.4f;
  p.desc.c_zero_point = 90;
  p.desc.bias = p.bias.data();
  return p;
}

TEST_P(CacheConcurrency, OnePlanSharedByManyThreads) {
  qjt::IsaCap cap(GetParam());
  const Problem pr = make_problem();
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = pr.k;
  wd.n = pr.n;
  wd.granularity = QJ_GRAN_CHANNEL;
  wd.scales = pr.scales.data();
  wd.zero_points = pr.zps.data();
  qj_weights w = nullptr;
  ASSERT_EQ(qj_weights_pack(&wd, pr.wq.data(), pr.n, &w), QJ_OK) << qj_last_error();
  std::vector<uint8_t> want(pr.m * pr.n);
  qj::ref::gemm_int(pr.desc, pr.ref_w(), pr.m, pr.a.data(), pr.k, want.data(), pr.n);

  // Concurrent plan creation from one weights object; each thread runs its own plan and the shared
  // plan on private buffers.
  qj_gemm_plan shared = nullptr;
  ASSERT_EQ(qj_gemm_plan_create(&pr.desc, w, &shared), QJ_OK) << qj_last_error();
  std::atomic<int> bad{0};
  std::barrier sync(kThreads);
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t)
    th.emplace_back([&] {
      sync.arrive_and_wait();
      qj_gemm_plan mine = nullptr;
      if (qj_gemm_plan_create(&pr.desc, w, &mine) != QJ_OK) {
        bad++;
        return;
      }
      for (int rep = 0; rep < 3; ++rep)
        for (qj_gemm_plan p : {mine, shared}) {
          std::vector<uint8_t> c(pr.m * pr.n, 0);
          if (qj_gemm_run(p, pr.m, pr.a.data(), pr.k, c.data(), pr.n, nullptr) != QJ_OK || c != want) bad++;
        }
      qj_gemm_plan_destroy(mine);
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0) << "a concurrent run differed from src/ref";

  // FBGEMM model: thread t runs partition {t, 8} of one shared C, all at once.
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<uint8_t> c(pr.m * pr.n, 0);
    std::vector<qj_status> st(kThreads, QJ_OK);
    std::vector<std::thread> parts;
    for (int t = 0; t < kThreads; ++t)
      parts.emplace_back([&, t] {
        qj_partition part{t, kThreads};
        st[t] = qj_gemm_run(shared, pr.m, pr.a.data(), pr.k, c.data(), pr.n, &part);
      });
    for (auto& x : parts) x.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(st[t], QJ_OK);
    EXPECT_EQ(c, want) << "concurrent partitions of one C";
  }
  qj_gemm_plan_destroy(shared);
  qj_weights_destroy(w);
}

// Clearing the cache and reading its statistics while other threads create, run and destroy
// plans: live plans keep their code, results stay exact.
TEST_P(CacheConcurrency, ClearAndStatsRacingWithPlans) {
  qjt::IsaCap cap(GetParam());
  const std::vector<GemmCase> cfg = configs();
  std::atomic<bool> stop{false};
  std::thread clearer([&] {
    while (!stop.load()) {
      qj_cache_clear();
      qj_cache_stats_t s;
      qj_cache_stats(&s);
      std::this_thread::yield();
    }
  });
  std::vector<std::string> errors(4 * cfg.size());
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      for (size_t i = 0; i < cfg.size(); ++i) errors[t * cfg.size() + i] = qjt::run_gemm_case(cfg[(i + t) % cfg.size()]);
    });
  for (auto& x : th) x.join();
  stop = true;
  clearer.join();
  for (size_t i = 0; i < errors.size(); ++i) EXPECT_EQ(errors[i], "") << i;
  qj_cache_clear();
  const qj_cache_stats_t s = stats();
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.code_bytes, 0u);
}

// A generator that throws (bad_alloc from the emitter's containers or the name) fails its own
// generation with QJ_ERR_OUT_OF_MEMORY: the threads waiting for that generation get the failure
// instead of waiting forever, the key is not left half-made in the cache, and a later lookup
// generates it.
std::atomic<int> g_name_calls{0};
bool emit_ret(const qj::KernelKey&, asmjit::x86::Assembler& a, std::string*) {
  a.ret();
  return true;
}
std::string name_throws_first(const qj::KernelKey&) {
  if (g_name_calls.fetch_add(1) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the others queue up
    throw std::bad_alloc();
  }
  return "test_throwing_generator";
}

TEST(CacheGeneration, AGeneratorThatThrowsEndsItsGeneration) {
  const qj::KernelFamily fam{emit_ret, name_throws_first};
  qj::KernelKey key = qj::KernelKey::zeroed();
  key.op = qj::KernelOp::kConvert;
  key.param[5] = 0x5eed5eedu;
  std::atomic<int> ok{0}, oom{0}, other{0};
  const qj_cache_stats_t s0 = stats();
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      qj::KernelRef r;
      const qj_status s = qj::acquire_kernel(key, fam, &r);
      (s == QJ_OK ? ok : s == QJ_ERR_OUT_OF_MEMORY ? oom : other)++;
      if (s == QJ_ERR_OUT_OF_MEMORY) EXPECT_NE(std::string(qj_last_error()).find("out of memory"), std::string::npos);
    });
  for (auto& t : ts) t.join();
  EXPECT_GE(oom.load(), 1);  // the generation that threw, and the threads that waited for it
  EXPECT_EQ(other.load(), 0);
  // Every lookup is a miss (the one that threw, or a later regeneration), a hit, or a wait for the
  // failed generation (each other QJ_ERR_OUT_OF_MEMORY): a failed wait is not a hit.
  const qj_cache_stats_t s1 = stats();
  const uint64_t misses = s1.misses - s0.misses;
  EXPECT_EQ(s1.hits - s0.hits, 4 - misses - static_cast<uint64_t>(oom.load() - 1))
      << "misses " << misses << ", failed " << oom.load() << ", ok " << ok.load();
  qj::KernelRef r;
  ASSERT_EQ(qj::acquire_kernel(key, fam, &r), QJ_OK) << qj_last_error();
  EXPECT_NE(r.entry(), nullptr);
  EXPECT_EQ(r.name(), "test_throwing_generator");
}

INSTANTIATE_TEST_SUITE_P(AllIsas, CacheConcurrency, ::testing::ValuesIn(qjt::supported_isas()),
                         [](const ::testing::TestParamInfo<qj_isa>& i) {
                           return qjt::isa_param_name(i.param);
                         });

}  // namespace
