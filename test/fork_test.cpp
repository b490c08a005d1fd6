// fork() after the library started its thread pool and cached kernels: the child can use the
// library (parallel calls included) and exit normally, also when another thread of the parent
// was inside a parallel call at the fork (its locks held), and when the parent's pool is idle.
// Each child reports through its exit status; a hang is caught by alarm() in the child.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "test/test_util.h"

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

constexpr int64_t kM = 64, kN = 48, kK = 96;

struct Problem {
  qj_gemm_plan plan = nullptr;
  std::vector<uint8_t> a = qjt::random_ints<uint8_t>(kM * kK, 0, 255, 1);
  std::vector<uint8_t> want;
  Problem() {
    std::vector<int8_t> b = qjt::random_ints<int8_t>(kK * kN, -128, 127, 2);
    std::vector<float> scales(kN, 0.01f);
    qj_weights_desc wd = qjt::nk_desc(QJ_S8, kK, kN);
    wd.granularity = QJ_GRAN_CHANNEL;
    wd.scales = scales.data();
    qj_weights w = nullptr;
    EXPECT_EQ(qj_weights_pack(&wd, b.data(), kK, &w), QJ_OK) << qj_last_error();
    qj_gemm_desc gd{};
    gd.a_type = QJ_U8;
    gd.a_scale = 0.05f;
    gd.c_type = QJ_U8;
    gd.c_scale = 2.0f;
    gd.c_zero_point = 100;
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &plan), QJ_OK) << qj_last_error();
    qj_weights_destroy(w);
    want = run(1);
  }
  ~Problem() { qj_gemm_plan_destroy(plan); }
  std::vector<uint8_t> run(int32_t threads) const {
    std::vector<uint8_t> c(kM * kN, 0);
    if (qj_gemm_run_parallel(plan, kM, a.data(), kK, c.data(), kN, threads) != QJ_OK) c.clear();
    return c;
  }
};

// In the child: a parallel run of p, a new plan (the kernel cache), then exit() with 0 if both
// gave the right output (static destructors run, as for any normal exit).
[[noreturn]] void child(const Problem& p) {
  alarm(20);  // a hang ends the child with SIGALRM
  bool ok = p.run(2) == p.want;
  Problem fresh;  // creates a plan in the child
  ok = ok && fresh.run(3) == p.want;
  std::exit(ok ? 0 : 1);
}

// Forks, runs child() there, returns the child's wait status.
int fork_and_wait(const Problem& p) {
  const pid_t pid = fork();
  if (pid == 0) child(p);
  int status = -1;
  waitpid(pid, &status, 0);
  return status;
}

TEST(Fork, ChildUsesTheLibraryAfterThePoolStarted) {
  // (Not under ASan / TSan: a forked child of a process with threads, the pool's worker here,
  // can stop in the sanitizer's own locks; one CI run of five saw it.)
  if (kSanitized) GTEST_SKIP() << "sanitizers and fork() with running threads";
  Problem p;
  ASSERT_EQ(p.run(2), p.want);  // starts the built-in pool's worker
  for (int i = 0; i < 3; ++i) {
    const int st = fork_and_wait(p);
    ASSERT_TRUE(WIFEXITED(st)) << "child ended by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    EXPECT_EQ(WEXITSTATUS(st), 0) << "wrong output in the child";
  }
  EXPECT_EQ(p.run(2), p.want);  // the parent's pool still works
}

TEST(Fork, ChildForkedWhileAnotherThreadRunsParallelCalls) {
  // (Not under ASan / TSan: a child of a process whose threads are running reports their
  // thread-local buffers as leaks at exit and can stop in the sanitizer's own locks.)
  if (kSanitized) GTEST_SKIP() << "sanitizers and fork() with running threads";
  Problem p;
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0}, wrong{0};
  std::thread busy([&] {
    while (!stop.load()) {
      if (p.run(2) != p.want) wrong++;
      calls++;
    }
  });
  while (calls.load() < 5) std::this_thread::yield();
  for (int i = 0; i < 10; ++i) {
    const int st = fork_and_wait(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << "fork " << i << ": " << (WIFSIGNALED(st) ? "signal " : "status ")
        << (WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st)) << (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (hang)" : "");
  }
  stop = true;
  busy.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
