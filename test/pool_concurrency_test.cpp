// The built-in thread pool behind the *_run_parallel calls (src/core/threading.cpp), also run
// under ThreadSanitizer in CI's sanitizer job. Its workers and its caller poll for up to 100 us
// before they sleep on a condition variable, so both hand-offs are exercised: calls back to back
// (found by polling), calls after a pause longer than the poll (workers asleep), slices longer than
// the caller's poll (the caller sleeps), thread counts above the CPUs (no polling), and several
// callers at once (serialized). Every slice writes plain (non-atomic) data that the caller reads
// after the call returns: the pool must order those writes before the return. Slices are claimed
// by whichever thread is free: each must run exactly once, and never after its call returned.
// Calls with a small work estimate run on the caller alone, as one slice, while the workers sleep
// (QJ_POOL_INLINE_US; ctest runs this file with it at 0, every call through the pool, and again
// with polling off and the default).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "src/core/threading.h"

namespace {

struct Work {
  std::vector<int64_t> out;  // slice t writes out[t]
  int64_t round = 0;
  std::chrono::microseconds slice_time{0};
};

void slice(void* ctx, int32_t t, int32_t n) {
  auto* w = static_cast<Work*>(ctx);
  if (w->slice_time.count() > 0 && t == n - 1) std::this_thread::sleep_for(w->slice_time);
  w->out[static_cast<size_t>(t)] = w->round * 1000 + t;
}

// One call of n slices; every slice ran once, with this round's value, visible here.
void call_and_check(Work& w, int32_t n) {
  w.out.assign(static_cast<size_t>(n), -1);
  ASSERT_EQ(qj::parallel_for(slice, &w, n), QJ_OK);
  for (int32_t t = 0; t < n; ++t) ASSERT_EQ(w.out[static_cast<size_t>(t)], w.round * 1000 + t) << "slice " << t;
  ++w.round;
}

TEST(Pool, BackToBackCallsOfEverySize) {
  Work w;
  for (int i = 0; i < 3000; ++i) ASSERT_NO_FATAL_FAILURE(call_and_check(w, 2));
  for (int32_t n : {3, 1, 2, 8, 2, 4, 2, 16, 2}) {
    for (int i = 0; i < 200; ++i) ASSERT_NO_FATAL_FAILURE(call_and_check(w, n));
  }
}

TEST(Pool, CallsAfterThePollingWindow) {
  Work w;
  for (int i = 0; i < 20; ++i) {
    ASSERT_NO_FATAL_FAILURE(call_and_check(w, 2));
    std::this_thread::sleep_for(std::chrono::microseconds(400));  // workers go to sleep
  }
}

TEST(Pool, SlicesLongerThanTheCallersPoll) {
  Work w;
  w.slice_time = std::chrono::microseconds(300);
  for (int i = 0; i < 20; ++i) ASSERT_NO_FATAL_FAILURE(call_and_check(w, 2));
  w.slice_time = std::chrono::microseconds(0);
  for (int i = 0; i < 200; ++i) ASSERT_NO_FATAL_FAILURE(call_and_check(w, 2));
}

TEST(Pool, SeveralCallersAtOnce) {
  constexpr int kCallers = 3;
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&failures, c] {
      Work w;
      w.round = c * 100000;
      for (int i = 0; i < 300; ++i) {
        const int32_t n = 2 + (i % 3 == 0 ? c : 0);
        w.out.assign(static_cast<size_t>(n), -1);
        if (qj::parallel_for(slice, &w, n) != QJ_OK) ++failures;
        for (int32_t t = 0; t < n; ++t)
          if (w.out[static_cast<size_t>(t)] != w.round * 1000 + t) ++failures;
        ++w.round;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// Counts the runs of each slice (and in total), with a short pause in some slices so that
// callers and workers interleave their claims.
struct Counted {
  std::vector<std::atomic<int>> runs;
  std::atomic<int64_t>* total;
  std::vector<std::thread::id> ran_on;
  int64_t round = 0;
};

void counted_slice(void* ctx, int32_t t, int32_t n) {
  auto* c = static_cast<Counted*>(ctx);
  if ((c->round + t) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  c->runs[static_cast<size_t>(t)].fetch_add(1, std::memory_order_relaxed);
  c->ran_on[static_cast<size_t>(t)] = std::this_thread::get_id();
  c->total->fetch_add(1, std::memory_order_relaxed);
  (void)n;
}

TEST(Pool, EverySliceRunsExactlyOnce) {
  std::atomic<int64_t> total{0};
  int64_t expected = 0;
  for (int64_t round = 0; round < 600; ++round) {
    const int32_t n = static_cast<int32_t>(2 + round % 5);
    Counted c{std::vector<std::atomic<int>>(static_cast<size_t>(n)), &total,
              std::vector<std::thread::id>(static_cast<size_t>(n)), round};
    ASSERT_EQ(qj::parallel_for(counted_slice, &c, n), QJ_OK);
    for (int32_t t = 0; t < n; ++t) ASSERT_EQ(c.runs[static_cast<size_t>(t)].load(), 1) << "round " << round << " slice " << t;
    expected += n;
    if (round % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // workers asleep
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // no late run of a finished call's slice
  EXPECT_EQ(total.load(), expected);
}

TEST(Pool, ShortCallsWhileTheWorkersSleepRunOnTheCaller) {
  const char* e = std::getenv("QJ_POOL_INLINE_US");
  const bool inline_on = !(e && std::strcmp(e, "0") == 0);
  std::atomic<int64_t> total{0};
  auto call = [&](int64_t work_ns, bool expect_inline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // far past any poll: workers asleep
    Counted c{std::vector<std::atomic<int>>(2), &total, std::vector<std::thread::id>(2), 1};
    const uint64_t before = qj::pool_inline_calls();
    ASSERT_EQ(qj::parallel_for(counted_slice, &c, 2, work_ns), QJ_OK);
    EXPECT_EQ(qj::pool_inline_calls() - before, expect_inline ? 1u : 0u) << "work_ns " << work_ns;
    EXPECT_EQ(c.runs[0].load(), 1);
    if (expect_inline) {  // the whole as one slice, fn(ctx, 0, 1), on this thread
      EXPECT_EQ(c.runs[1].load(), 0);
      EXPECT_EQ(c.ran_on[0], std::this_thread::get_id());
    } else {
      EXPECT_EQ(c.runs[1].load(), 1);
    }
  };
  Counted warm{std::vector<std::atomic<int>>(2), &total, std::vector<std::thread::id>(2), 0};
  ASSERT_EQ(qj::parallel_for(counted_slice, &warm, 2), QJ_OK);  // the worker exists
  call(1000, inline_on);
  call(-1, false);          // no estimate: always the pool
  call(1000000000, false);  // a long call: worth the wake-up
  call(0, inline_on);
}

}  // namespace
