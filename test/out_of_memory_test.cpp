// Running out of memory in a run leaves C untouched. A forked child (its pool started first) lowers
// its address-space limit (RLIMIT_AS) to a little more than one slice's scratch needs, then runs a
// GEMM whose slices each pack a 12 MiB block of fp32 A: the call either succeeds with the right
// output or fails with QJ_ERR_OUT_OF_MEMORY and C as it was. (Before the slices' scratch was
// sized ahead of the call, one slice often wrote its rows and another then failed.)
#include <gtest/gtest.h>
#include <malloc.h>
#include <quantjit/quantjit.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "test/test_util.h"

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // (shadow memory needs far more address space than a limit allows)
#else
constexpr bool kSanitized = false;
#endif

constexpr int64_t kM = 24, kN = 16, kK = 32768;
constexpr float kSentinel = -7.0f;

// Outcomes a child reports through its exit status.
enum Outcome { kRight = 0, kCleanFailure = 1, kWrong = 2, kPartial = 3, kSetupFailed = 4 };

size_t address_space_bytes() {
  long pages = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
  std::fclose(f);
  return static_cast<size_t>(pages) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

struct Problem {
  qj_weights w = nullptr;
  qj_gemm_plan plan = nullptr;
  std::vector<float> a = qjt::random_floats(kM * kK, -10.0f, 10.0f, 7);
  std::vector<float> want;
  Problem() {
    std::vector<int8_t> b = qjt::random_ints<int8_t>(kK * kN, -128, 127, 8);
    std::vector<float> scales(kN, 0.01f);
    qj_weights_desc wd = qjt::nk_desc(QJ_S8, kK, kN);
    wd.granularity = QJ_GRAN_CHANNEL;
    wd.scales = scales.data();
    EXPECT_EQ(qj_weights_pack(&wd, b.data(), kK, &w), QJ_OK) << qj_last_error();
    qj_gemm_desc gd{};
    gd.a_type = QJ_F32;
    gd.a_granularity = QJ_GRAN_ROW;
    gd.c_type = QJ_F32;
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &plan), QJ_OK) << qj_last_error();
    // On a thread of its own, whose scratch goes with it: a child starts with none.
    want.assign(kM * kN, 0.0f);
    std::thread([&] {
      EXPECT_EQ(qj_gemm_run(plan, kM, a.data(), kK, want.data(), kN, nullptr), QJ_OK) << qj_last_error();
    }).join();
  }
  ~Problem() {
    qj_gemm_plan_destroy(plan);
    qj_weights_destroy(w);
  }
};

// In the child: start the pool's threads (a small parallel run), cap the address space at its
// present size plus extra bytes, run p on `threads` threads and exit with the outcome.
[[noreturn]] void child(const Problem& p, int32_t threads, size_t extra) {
  alarm(60);
  {
    std::vector<float> a(64 * 64, 1.0f), c(64 * kN);
    qj_weights_desc wd = qjt::nk_desc(QJ_S8, 64, kN);
    std::vector<int8_t> b(64 * kN, 1);
    std::vector<float> scales(kN, 0.5f);
    wd.granularity = QJ_GRAN_CHANNEL;
    wd.scales = scales.data();
    qj_weights w = nullptr;
    qj_gemm_plan small = nullptr;
    qj_gemm_desc gd{};
    gd.a_type = QJ_F32;
    gd.a_granularity = QJ_GRAN_ROW;
    gd.c_type = QJ_F32;
    if (qj_weights_pack(&wd, b.data(), 64, &w) != QJ_OK || qj_gemm_plan_create(&gd, w, &small) != QJ_OK)
      std::_Exit(kSetupFailed);
    for (int i = 0; i < 4; ++i)
      if (qj_gemm_run_parallel(small, 64, a.data(), 64, c.data(), kN, threads) != QJ_OK) std::_Exit(kSetupFailed);
  }
  std::vector<float> c(kM * kN, kSentinel);
  const rlimit limit{static_cast<rlim_t>(address_space_bytes() + extra), RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(kSetupFailed);
  const qj_status st = qj_gemm_run_parallel(p.plan, kM, p.a.data(), kK, c.data(), kN, threads);
  if (st == QJ_OK) std::_Exit(c == p.want ? kRight : kWrong);
  int64_t written = 0;
  for (float v : c) written += v != kSentinel;
  std::_Exit(st == QJ_ERR_OUT_OF_MEMORY && written == 0 ? kCleanFailure : kPartial);
}

TEST(OutOfMemory, ParallelRunWritesAllOrNothing) {
  if (kSanitized) GTEST_SKIP() << "an address-space limit and sanitizers";
  // Large blocks always from fresh mappings, and one arena: otherwise malloc raises its threshold
  // after the first 12 MiB block is freed, or serves a block from the address space a thread's
  // arena reserved earlier, and the limit does not bite.
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 256 << 10), 1);
  ASSERT_EQ(mallopt(M_ARENA_MAX, 1), 1);
  Problem p;
  int failures = 0;
  for (int32_t threads : {2, 3}) {
    for (size_t extra_mib : {0, 4, 16}) {
      for (int trial = 0; trial < 4; ++trial) {
        const pid_t pid = fork();
        if (pid == 0) child(p, threads, extra_mib << 20);
        int status = -1;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
        const int outcome = WEXITSTATUS(status);
        ASSERT_NE(outcome, kSetupFailed) << "threads " << threads;
        EXPECT_NE(outcome, kWrong) << "threads " << threads << ", " << extra_mib << " MiB: wrong output";
        EXPECT_NE(outcome, kPartial) << "threads " << threads << ", " << extra_mib
                                     << " MiB: failed after writing part of C";
        failures += outcome == kCleanFailure;
      }
    }
  }
  // The limits must bite, or the test shows nothing.
  EXPECT_GT(failures, 0) << "no run ran out of memory: the limits need to be lower";
}

}  // namespace
