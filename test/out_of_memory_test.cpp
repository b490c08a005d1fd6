// Running out of memory in a run leaves C untouched. A forked child (its pool started first) lowers
// its address-space limit (RLIMIT_AS) to a little more than one slice's scratch needs, then runs a
// GEMM whose slices each pack a large block of fp32 A (integer and float weights): the call either
// succeeds with the right output or fails with QJ_ERR_OUT_OF_MEMORY and C as it was. (Before the slices' scratch was
// sized ahead of the call, one slice often wrote its rows and another then failed.)
#include <gtest/gtest.h>
#include <malloc.h>
#include <quantjit/quantjit.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "src/formats/half.h"
#include "test/test_util.h"

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // (shadow memory needs far more address space than a limit allows)
#else
constexpr bool kSanitized = false;
#endif

constexpr int64_t kN = 16, kK = 32768;
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

// fp32 A (K = 32768) times N = 16 weights: S8 (A quantized per row while packed: 12 MiB of packed
// A per slice) or F16 (A packed as fp32: 1.75 MiB per slice).
struct Problem {
  int64_t m;
  qj_weights w = nullptr;
  qj_gemm_plan plan = nullptr;
  std::vector<float> a;
  std::vector<float> want;
  Problem(qj_dtype w_type, int64_t rows) : m(rows), a(qjt::random_floats(rows * kK, -10.0f, 10.0f, 7)) {
    qj_weights_desc wd = qjt::nk_desc(w_type, kK, kN);
    std::vector<float> scales(kN, 0.01f);
    std::vector<int8_t> b8 = qjt::random_ints<int8_t>(kK * kN, -128, 127, 8);
    std::vector<uint16_t> b16(kK * kN);
    for (size_t i = 0; i < b16.size(); ++i) b16[i] = qj::f32_to_f16(b8[i] / 128.0f);
    if (w_type == QJ_S8) {
      wd.granularity = QJ_GRAN_CHANNEL;
      wd.scales = scales.data();
    }
    const void* b = w_type == QJ_S8 ? static_cast<const void*>(b8.data()) : b16.data();
    EXPECT_EQ(qj_weights_pack(&wd, b, kK, &w), QJ_OK) << qj_last_error();
    qj_gemm_desc gd{};
    gd.a_type = QJ_F32;
    gd.a_granularity = QJ_GRAN_ROW;
    gd.c_type = QJ_F32;
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &plan), QJ_OK) << qj_last_error();
    // On a thread of its own, whose scratch goes with it: a child starts with none.
    want.assign(m * kN, 0.0f);
    std::thread([&] {
      EXPECT_EQ(qj_gemm_run(plan, m, a.data(), kK, want.data(), kN, nullptr), QJ_OK) << qj_last_error();
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
  std::vector<float> c(p.m * kN, kSentinel);
  const rlimit limit{static_cast<rlim_t>(address_space_bytes() + extra), RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(kSetupFailed);
  const qj_status st = qj_gemm_run_parallel(p.plan, p.m, p.a.data(), kK, c.data(), kN, threads);
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
  struct Case {
    qj_dtype w_type;
    int64_t m;
    std::vector<size_t> extra_kib;  // limits above the present address space
  };
  for (const Case& k : {Case{QJ_S8, 24, {0, 4 << 10, 16 << 10}}, Case{QJ_F16, 28, {0, 1 << 10, 2560}}}) {
    Problem p(k.w_type, k.m);
    int failures = 0;
    for (int32_t threads : {2, 3}) {
      for (size_t kib : k.extra_kib) {
        for (int trial = 0; trial < 4; ++trial) {
          const pid_t pid = fork();
          if (pid == 0) child(p, threads, kib << 10);
          int status = -1;
          ASSERT_EQ(waitpid(pid, &status, 0), pid);
          ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
          const int outcome = WEXITSTATUS(status);
          const std::string where = std::string(qj_dtype_name(k.w_type)) + " weights, " + std::to_string(threads) +
                                    " threads, " + std::to_string(kib) + " KiB: ";
          ASSERT_NE(outcome, kSetupFailed) << where;
          EXPECT_NE(outcome, kWrong) << where << "wrong output";
          EXPECT_NE(outcome, kPartial) << where << "failed after writing part of C";
          failures += outcome == kCleanFailure;
        }
      }
    }
    // The limits must bite, or the test shows nothing.
    EXPECT_GT(failures, 0) << qj_dtype_name(k.w_type) << " weights: no run ran out of memory; lower the limits";
  }
}

}  // namespace
