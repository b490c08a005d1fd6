// The built-in thread pool behind the *_run_parallel calls (src/core/threading.cpp), also run
// under ThreadSanitizer in CI's sanitizer job. Its workers and its caller poll for up to 100 us
// before they sleep on a condition variable, so both hand-offs are exercised: calls back to back
// (found by polling), calls after a pause longer than the poll (workers asleep), slices longer than
// the caller's poll (the caller sleeps), thread counts above the CPUs (no polling), and several
// callers at once (serialized). Every slice writes plain (non-atomic) data that the caller reads
// after the call returns: the pool must order those writes before the return.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
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

}  // namespace
