// The kernel cache under concurrency with a tight memory bound (QJ_CACHE_MAX_BYTES=16384, set by a
// global constructor before the library reads it), so that generation, eviction after a miss and
// eviction when a plan releases its kernels all race with each other. Named *concurrency* so CI
// also runs it under ThreadSanitizer. Every run must match src/ref bit for bit; afterwards, with no
// plan alive, the cache is back under its bound.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <barrier>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "test/gemm_case.h"
#include "test/test_util.h"

namespace {

constexpr uint64_t kBound = 16384;

struct SetCacheBound {
  SetCacheBound() { setenv("QJ_CACHE_MAX_BYTES", "16384", 1); }
} g_set_cache_bound;

class BoundConcurrency : public ::testing::TestWithParam<qj_isa> {};

TEST_P(BoundConcurrency, EvictionRacesWithPlans) {
  qjt::IsaCap cap(GetParam());
  qj_cache_stats_t s0{};
  qj_cache_stats(&s0);
  ASSERT_EQ(s0.max_bytes, kBound);
  // Distinct output stages and N tails: many more kernels than the bound holds.
  std::vector<qjt::GemmCase> cfg;
  const qj_dtype outs[] = {QJ_U8, QJ_S8, QJ_F32, QJ_BF16, QJ_S32};
  for (int i = 0; i < 10; ++i) {
    qjt::GemmCase c;
    c.m = 3 + i % 4;
    c.n = 17 + 3 * i;
    c.k = 40;
    c.c_type = outs[i % 5];
    c.bias = c.c_type != QJ_S32;
    c.b_zp = i % 2;
    c.seed = 100 + i;
    cfg.push_back(c);
  }
  constexpr int kThreads = 6, kRounds = 10;
  std::vector<std::string> errors(kThreads * kRounds);
  std::barrier sync(kThreads);
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t)
    th.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        sync.arrive_and_wait();
        errors[t * kRounds + r] = qjt::run_gemm_case(cfg[(r + t % 4) % cfg.size()]);
      }
    });
  for (auto& x : th) x.join();
  for (size_t i = 0; i < errors.size(); ++i) EXPECT_EQ(errors[i], "") << "thread " << i / kRounds << " round " << i % kRounds;
  qj_cache_stats_t s1{};
  qj_cache_stats(&s1);
  if (GetParam() != QJ_ISA_SCALAR) EXPECT_GT(s1.evictions, s0.evictions);
  EXPECT_LE(s1.code_bytes, kBound) << "no plan is alive: the cache must be back under its bound";
  qj_cache_clear();
  qj_cache_stats(&s1);
  EXPECT_EQ(s1.code_bytes, 0u);
  EXPECT_EQ(s1.entries, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, BoundConcurrency, ::testing::ValuesIn(qjt::supported_isas()),
                         [](const ::testing::TestParamInfo<qj_isa>& i) {
                           return qjt::isa_param_name(i.param);
                         });

}  // namespace
