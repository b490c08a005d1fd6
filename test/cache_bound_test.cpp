// The kernel cache's memory bound (QJ_CACHE_MAX_BYTES), in its own executable because the library
// reads the variable once per process: a global constructor sets it to 16 KiB before anything
// can call into the library (gtest_main's main runs after every static initializer).
//
// Uses the driver's plan object (src/ops/gemm.h) rather than the C handle so the test can see which
// kernels a plan pins (KernelRef::code_bytes) and state the bound exactly: after a plan is created,
// code_bytes <= max(bound, bytes pinned by live plans), since every kernel no live plan holds is
// evictable. Plans that are alive keep working while everything around them is evicted, and
// destroying plans lets the cache shrink back under its bound.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "src/ops/gemm.h"
#include "src/ops/int_weights.h"
#include "src/ref/gemm_ref.h"
#include "test/test_util.h"

namespace {

constexpr uint64_t kBound = 16384;

struct SetCacheBound {
  SetCacheBound() { setenv("QJ_CACHE_MAX_BYTES", "16384", 1); }
} g_set_cache_bound;

qj_cache_stats_t stats() {
  qj_cache_stats_t s{};
  qj_cache_stats(&s);
  return s;
}

// One problem (weights + A) and a plan for one output stage on it.
struct Case {
  int64_t m = 11, n = 37, k = 40;
  qj_gemm_desc desc{};
  std::vector<float> bias;
  std::vector<int8_t> wq;
  std::vector<float> scales;
  std::vector<uint8_t> a;
  std::shared_ptr<qj::PackedWeights> w;
  std::unique_ptr<qj::GemmPlan> plan;
};

// Config i gives a distinct kernel key for i < 40: output type x bias x ReLU x N tail.
std::unique_ptr<Case> make_case(int i) {
  auto c = std::make_unique<Case>();
  const qj_dtype outs[] = {QJ_U8, QJ_S8, QJ_F32, QJ_BF16, QJ_S32};
  const qj_dtype ct = outs[i % 5];
  c->n = 33 + (i / 5);  // 8 distinct N tails
  c->desc.a_type = QJ_U8;
  c->desc.a_scale = 0.04f;
  c->desc.a_zero_point = 17;
  c->desc.c_type = ct;
  c->desc.c_scale = 0.6f;
  c->desc.c_zero_point = ct == QJ_U8 ? 30 : 0;
  c->bias = qjt::random_floats(c->n, -5.0f, 5.0f, 100 + i);
  if (ct != QJ_S32) {
    c->desc.bias = (i / 5) % 2 ? c->bias.data() : nullptr;
    c->desc.activation = (i / 10) % 2 ? QJ_ACT_RELU : QJ_ACT_NONE;
  }
  c->wq = qjt::random_ints<int8_t>(c->k * c->n, -128, 127, 200 + i);
  c->scales = qjt::random_floats(c->n, 0.005f, 0.02f, 300 + i);
  c->a = qjt::random_ints<uint8_t>(c->m * c->k, 0, 255, 400 + i);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = c->k;
  wd.n = c->n;
  wd.granularity = QJ_GRAN_CHANNEL;
  wd.scales = c->scales.data();
  if (qj::pack_int_weights(wd, c->wq.data(), c->n, qj_max_isa(), &c->w) != QJ_OK) return nullptr;
  if (qj::gemm_plan_create(c->desc, c->w, &c->plan) != QJ_OK) return nullptr;
  return c;
}

// Runs the plan and compares with src/ref bit for bit.
bool runs_exactly(const Case& c) {
  const size_t esz = c.desc.c_type == QJ_U8 || c.desc.c_type == QJ_S8 ? 1 : c.desc.c_type == QJ_BF16 ? 2 : 4;
  std::vector<uint8_t> got(c.m * c.n * esz, 0), want(c.m * c.n * esz, 0);
  if (qj::gemm_run(*c.plan, c.m, c.a.data(), c.k, got.data(), c.n, 0, 1) != QJ_OK) return false;
  qj::ref::IntWeights rw;
  rw.k = c.k;
  rw.n = c.n;
  rw.gran = QJ_GRAN_CHANNEL;
  rw.scales = c.scales;
  rw.q.assign(c.wq.begin(), c.wq.end());
  qj::ref::gemm_int(c.desc, rw, c.m, c.a.data(), c.k, want.data(), c.n);
  return got == want;
}

// Bytes of JIT code the live plans pin (each kernel counted once).
uint64_t pinned(const std::vector<const Case*>& live) {
  std::set<const void*> seen;
  uint64_t bytes = 0;
  for (const Case* c : live)
    c->plan->for_each_kernel([&](const qj::KernelRef& r) {
      if (seen.insert(r.entry()).second) bytes += r.code_bytes();
    });
  return bytes;
}

std::vector<qj_isa> jit_isas() {
  std::vector<qj_isa> v;
  for (qj_isa i : qjt::supported_isas())
    if (i != QJ_ISA_SCALAR) v.push_back(i);
  return v;
}

TEST(CacheBound, EnvironmentBoundIsInForce) { EXPECT_EQ(stats().max_bytes, kBound); }

TEST(CacheBound, EvictsUnusedKernelsAndNeverLivePlansCode) {
  for (qj_isa isa : jit_isas()) {
    qjt::IsaCap cap(isa);
    qj_cache_clear();
    const qj_cache_stats_t s0 = stats();
    ASSERT_EQ(s0.code_bytes, 0u);
    // A plan that stays alive throughout: its kernels must survive every eviction.
    std::unique_ptr<Case> survivor = make_case(0);
    ASSERT_TRUE(survivor && survivor->plan->jit) << qj_last_error();
    ASSERT_TRUE(runs_exactly(*survivor));
    for (int pass = 0; pass < 2; ++pass)  // the second pass regenerates evicted keys
      for (int i = 1; i < 40; ++i) {
        std::unique_ptr<Case> c = make_case(i);
        ASSERT_TRUE(c && c->plan->jit) << qj_last_error();
        const uint64_t live = pinned({survivor.get(), c.get()});
        const qj_cache_stats_t s = stats();
        EXPECT_LE(s.code_bytes, std::max(kBound, live))
            << "isa " << qj_isa_name(isa) << " config " << i << ": the cache kept evictable code";
        EXPECT_GE(s.code_bytes, live) << "code of live plans is not counted";
        EXPECT_TRUE(runs_exactly(*c)) << "config " << i;
        EXPECT_TRUE(runs_exactly(*survivor)) << "the live plan broke after config " << i;
      }
    const qj_cache_stats_t s1 = stats();
    EXPECT_GT(s1.evictions, s0.evictions);
    EXPECT_GT(s1.misses - s0.misses, 2 * 39u) << "evicted keys should be regenerated on the second pass";
    // Only the survivor is alive: clearing keeps exactly its kernels.
    qj_cache_clear();
    EXPECT_EQ(stats().code_bytes, pinned({survivor.get()}));
    EXPECT_TRUE(runs_exactly(*survivor));
    survivor.reset();
    qj_cache_clear();
    EXPECT_EQ(stats().code_bytes, 0u);
    EXPECT_EQ(stats().entries, 0u);
  }
}

TEST(CacheBound, CodeBytesGoDownWhenPlansAreDestroyed) {
  for (qj_isa isa : jit_isas()) {
    qjt::IsaCap cap(isa);
    qj_cache_clear();
    // Many plans alive at once: the bound yields to them.
    std::vector<std::unique_ptr<Case>> alive;
    for (int i = 0; i < 6; ++i) {
      alive.push_back(make_case(i));
      ASSERT_TRUE(alive.back() && alive.back()->plan->jit) << qj_last_error();
    }
    std::vector<const Case*> live;
    for (auto& c : alive) live.push_back(c.get());
    const uint64_t held = stats().code_bytes;
    ASSERT_GT(pinned(live), kBound) << "the test needs plans that pin more than the bound";
    EXPECT_GE(held, pinned(live));
    for (auto& c : alive) EXPECT_TRUE(runs_exactly(*c));
    alive.clear();
    // The next generation evicts everything no plan holds.
    std::unique_ptr<Case> next = make_case(39);
    ASSERT_TRUE(next && next->plan->jit);
    const uint64_t after = stats().code_bytes;
    EXPECT_LT(after, held);
    EXPECT_LE(after, std::max(kBound, pinned({next.get()})));
    EXPECT_TRUE(runs_exactly(*next));
    next.reset();
    qj_cache_clear();
    EXPECT_EQ(stats().code_bytes, 0u);
  }
}

// Destroying the plans that held the cache above its bound should bring it back under the bound
// without waiting for some later generation (the memory is otherwise held indefinitely).
TEST(CacheBound, ReleasingPlansReturnsTheCacheUnderItsBound) {
  for (qj_isa isa : jit_isas()) {
    qjt::IsaCap cap(isa);
    qj_cache_clear();
    std::vector<std::unique_ptr<Case>> alive;
    for (int i = 0; i < 6; ++i) {
      alive.push_back(make_case(i));
      ASSERT_TRUE(alive.back() && alive.back()->plan->jit) << qj_last_error();
    }
    ASSERT_GT(stats().code_bytes, kBound);
    alive.clear();
    EXPECT_LE(stats().code_bytes, kBound)
        << "isa " << qj_isa_name(isa) << ": no plan is alive, yet the cache holds more than its bound";
    qj_cache_clear();
  }
}

}  // namespace
