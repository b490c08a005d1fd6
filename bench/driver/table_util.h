// Table helpers shared by `quantjit-bench embedding` (bench/driver/embedding.cpp) and the
// FBGEMM peer (bench/peers/fbgemm_direct.cpp), so that both tools draw the same random numbers,
// settle fresh tables the same way, flush and time the same way, and report the same huge-page
// share.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <string>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "driver/timing.h"

namespace qjb {

inline uint64_t xorshift(uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

// Share of [p, p + bytes) backed by transparent huge pages (AnonHugePages of its mappings).
inline double thp_share(const void* p, size_t bytes) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return 0;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  char line[512];
  bool in = false;
  double kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long a, b;
    if (std::sscanf(line, "%lx-%lx ", &a, &b) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
      in = a < hi && b > lo;
      continue;
    }
    double v;
    if (in && std::sscanf(line, "AnonHugePages: %lf kB", &v) == 1) kb += v;
  }
  std::fclose(f);
  return std::min(1.0, kb * 1024.0 / static_cast<double>(bytes));
}

// A freshly filled table runs its first ~50,000 random row reads 2-3x slower than all later ones
// (measured on this KVM guest: 4-bit dim 32 rows, fresh indices, 14 ns per row for the first
// 40-90 calls of ~950 rows, then 5 ns, abruptly; not a function of time since the fill, and
// neither executing the kernel on cached rows nor a sequential read of every page removes it;
// no page faults occur). Whatever warms up (below the guest kernel), a long-lived table is past
// it, and without this the first configuration timed on each table measured the transient:
// so every table gets this many untimed random row reads (prefetched, ~3 ms) before any timing.
//
// Then a pause (QJ_BENCH_SETTLE_MS, default 3000; 0 for none): on this guest something below it
// also settles within ~2 s after these reads (2026-12-01: fused AdaGrad,
// fp32 dim 32, 1M rows, rows flushed before each call, us per call, two runs per pause: 0 s 19.5 /
// 20.4, 1 s 14.3 / 19.7, 2 s 11.4 / 11.3, 3 s 11.4 / 11.3, 5 s 11.4 / 10.9; the fp16 table of the
// same process, cold / fresh, 25.0 / 22-32 -> 11.0 / 17.7-18.0 with 3 s).
inline void settle_table(const uint8_t* t, int64_t rb, int64_t rows) {
  uint64_t x = 0x2545f4914f6cdd1dull;
  const int64_t n = 250000, pf = 32;
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (auto& v : r) v = static_cast<int64_t>(xorshift(x) % static_cast<uint64_t>(rows));
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i + pf < n) _mm_prefetch(reinterpret_cast<const char*>(t + r[i + pf] * rb), _MM_HINT_T2);
    acc += *reinterpret_cast<const volatile uint8_t*>(t + r[i] * rb);
  }
  __asm__ volatile("" : : "r"(acc));
  const char* e = std::getenv("QJ_BENCH_SETTLE_MS");
  const long ms = e && *e ? std::strtol(e, nullptr, 10) : 3000;
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// clflushopt over [p, p + n), then a fence.
__attribute__((target("clflushopt"))) inline void flush_bytes(const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (size_t o = 0; o < n; o += 64) _mm_clflushopt(const_cast<uint8_t*>(b + o));
  if (n) _mm_clflushopt(const_cast<uint8_t*>(b + n - 1));
  _mm_mfence();
}

// Every line of the rows idx of a table of rb-byte rows out of the caches (cold mode).
__attribute__((target("clflushopt"))) inline void flush_rows(uint8_t* table, int64_t rb, const std::vector<int64_t>& idx) {
  for (int64_t r : idx) {
    uint8_t* p = table + r * rb;
    for (int64_t o = 0; o < rb; o += 64) _mm_clflushopt(p + o);
    _mm_clflushopt(p + rb - 1);
  }
  _mm_mfence();
}

// Untimed calls, prepare(-1 - r) before each, for 50 ms and at least 3 calls: the 41 timed calls of
// a cold / fresh case take about a millisecond, and the first case after settle_table's pause ran
// them slow (2026-12-01, Zen 5, 8-bit dim 256 fresh, the same kernel first / second in its
// process: 23.7 / 17.1 ns per row; MXFP4 dim 1024 51.3 / 41.1), as if the core came out of the
// pause at a lower clock.
inline void warm_up_untimed(const std::function<void()>& run, const std::function<void(int)>& prepare) {
  const double until = bench::now_seconds() + 0.05;
  for (int r = 0; r < 3 || bench::now_seconds() < until; ++r) {
    prepare(-1 - r);
    run();
  }
}

// One participant of a timed series: prepare(r) runs untimed before its timed call r (cold: the
// flush; fresh: new indices; nothing for warm), then run() is timed.
struct Participant {
  std::function<void()> run;
  std::function<void(int)> prepare;
};

// Rounds of timed calls over several participants, their calls interleaved: round r runs every
// participant's prepare(r) and timed run() in turn, so a burst of noise from other processes on this
// shared machine hits all of them alike (between processes the same kernel's median moves by 10-40%
// here; interleaved, two kernels' medians separate 3-5% effects). Odd rounds take the participants
// in reverse order: in a fixed order, an A/A test (one AdaGrad update against itself, fresh
// indices) put the second call 3-7% ahead. Each participant is warmed up first
// (warm_up_untimed). Returns each participant's samples in seconds, sorted; by_round, if given,
// receives them in round order (for paired_ratio).
inline std::vector<std::vector<double>> time_rounds(const std::vector<Participant>& ps, int rounds,
                                                    std::vector<std::vector<double>>* by_round = nullptr) {
  for (const Participant& p : ps) warm_up_untimed(p.run, p.prepare);
  std::vector<std::vector<double>> s(ps.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < ps.size(); ++k) {
      const size_t i = r % 2 ? ps.size() - 1 - k : k;
      ps[i].prepare(r);
      const double t0 = bench::now_seconds();
      ps[i].run();
      s[i].push_back(bench::now_seconds() - t0);
    }
  }
  if (by_round) *by_round = s;
  for (std::vector<double>& v : s) std::sort(v.begin(), v.end());
  return s;
}

// The median over rounds of a[r] / b[r] (two participants' samples in round order, time_rounds'
// by_round). This machine's speed drifts between states for seconds at a time (the same AdaGrad
// call at 6 or 10 ns per row); the ratio within a round follows both calls through a drift, where
// the ratio of the two medians can land 30% off in an A/A test.
inline double paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> q(a.size());
  for (size_t r = 0; r < a.size(); ++r) q[r] = a[r] / b[r];
  std::sort(q.begin(), q.end());
  return q[q.size() / 2];
}

// The q-quantile (0..1) of sorted samples, by the nearest lower rank (q = 0.5: the median).
inline double quantile(const std::vector<double>& sorted, double q) {
  return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5)];
}

// Median seconds per call in `mode`: "warm" through timing.h (batched short calls); otherwise one
// participant's time_rounds (reps samples, 41 by default).
inline double time_mode(const std::string& mode, const std::function<void()>& run,
                        const std::function<void(int)>& prepare, int reps) {
  if (mode == "warm") {
    bench::TimingOptions t;
    t.reps = reps;
    return bench::time_median(run, t).median;
  }
  const std::vector<double> s = time_rounds({{run, prepare}}, reps > 0 ? reps : 41)[0];
  return s[s.size() / 2];
}

}  // namespace qjb
