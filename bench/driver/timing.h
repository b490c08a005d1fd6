// Timing for quantjit-bench subcommands: the median of repeated calls, warm or cold.
//
// - Warm: the same buffers on every call, so the data sits in whatever cache level it fits in
//   (after one untimed warm-up call). Very short calls are batched so that one sample spans at
//   least ~20 us and the clock's own cost does not count.
// - Cold: before every timed call, a large buffer (512 MiB by default) is read through the caches,
//   one load per 64-byte line, so the call starts with its operands in DRAM (the "cold" column of
//   PERF.md's side-by-side tables). The flush itself is never timed.
// The median (not the mean or min) is reported because the machine is shared and noisy.
//
// Usage:
//   bench::TimingOptions opt;  opt.cold = true;
//   bench::Timing t = bench::time_median([&] { run_once(); }, opt);
//   t.median  // seconds per call
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace bench {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

struct TimingOptions {
  bool cold = false;          // flush the caches before every timed call
  int reps = 0;               // timed samples; 0 picks them from min_seconds
  double min_seconds = 0.25;  // with reps == 0: stop after about this much timed work ...
  int min_reps = 5;           // ... but take at least min_reps samples
  int max_reps = 200;         // ... and at most max_reps
  size_t flush_bytes = size_t{512} << 20;  // cold mode: bytes streamed before each call
};

struct Timing {
  double median = 0;  // seconds per call
  double min = 0;
  double max = 0;
  int reps = 0;       // samples taken
  int batch = 1;      // calls per sample (warm mode batches calls shorter than ~20 us)
};

// The cold-mode flush buffer: allocated once per process (first-touched on allocation so that
// page faults are not part of the first flush) and reused by every cold measurement.
inline void flush_caches(size_t bytes = size_t{512} << 20) {
  static std::vector<uint8_t>* buf = nullptr;
  if (!buf || buf->size() < bytes) {
    delete buf;
    buf = new std::vector<uint8_t>(bytes, 1);
  }
  // One read per cache line evicts everything the caches held; reading (not writing) keeps the
  // lines clean so the timed call does not pay for write-backs of the flush buffer.
  const volatile uint8_t* p = buf->data();
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes; i += 64) sum += p[i];
  __asm__ volatile("" : : "r"(sum));  // keep the loads
}

template <class Fn>
Timing time_median(Fn&& fn, const TimingOptions& opt = {}) {
  Timing t;
  std::vector<double> samples;
  if (opt.cold) {
    flush_caches(opt.flush_bytes);
    fn();  // warm-up: first-touch of output pages, lazy initialization in the callee
    double spent = 0;
    for (int r = 0;; ++r) {
      if (opt.reps > 0 ? r >= opt.reps
                       : (r >= opt.max_reps || (r >= opt.min_reps && spent >= opt.min_seconds)))
        break;
      flush_caches(opt.flush_bytes);
      double t0 = now_seconds();
      fn();
      double dt = now_seconds() - t0;
      samples.push_back(dt);
      spent += dt;
    }
  } else {
    // Warm-up, then size the batch so that one sample lasts at least ~20 us.
    double t0 = now_seconds();
    fn();
    double one = now_seconds() - t0;
    t0 = now_seconds();
    fn();
    one = std::min(one, now_seconds() - t0);
    int batch = 1;
    if (one < 20e-6) batch = static_cast<int>(std::min(1000.0, 20e-6 / std::max(one, 1e-9))) + 1;
    t.batch = batch;
    double spent = 0;
    for (int r = 0;; ++r) {
      if (opt.reps > 0 ? r >= opt.reps
                       : (r >= opt.max_reps || (r >= opt.min_reps && spent >= opt.min_seconds)))
        break;
      t0 = now_seconds();
      for (int b = 0; b < batch; ++b) fn();
      double dt = now_seconds() - t0;
      samples.push_back(dt / batch);
      spent += dt;
    }
  }
  std::sort(samples.begin(), samples.end());
  size_t n = samples.size();
  t.reps = static_cast<int>(n);
  if (n == 0) return t;
  t.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  t.min = samples.front();
  t.max = samples.back();
  return t;
}

}  // namespace bench
