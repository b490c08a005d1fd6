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
//   auto both = bench::time_median_multi({ours, peer}, opt);  // interleaved, for ratios
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
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
  int max_reps = 1000;        // ... and at most max_reps (200 samples of ~20 us sat inside
                              // single multi-ms slow windows of this VM: medians off by 1.5x)
  double warmup_seconds = 0.1;   // warm mode: untimed calls first, for about this long
  // Cold mode: the flushes (~20 ms each for 512 MiB) count toward this budget per function,
  // so a sweep of short calls takes ~25 samples per shape instead of max_reps flushes.
  double cold_budget_seconds = 0.5;
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

// Times several functions side by side: each round takes one sample of every function in turn
// (flushing before each in cold mode), so that a burst of noise from other processes on this
// shared machine hits all of them alike and their ratio stays meaningful. Each function gets its
// own batch size in warm mode, and in warm mode an untimed call before each of its samples (so
// that one function's data does not evict another's from the cache it is measured in). Returns
// one Timing per function, in order.
inline std::vector<Timing> time_median_multi(const std::vector<std::function<void()>>& fns,
                                             const TimingOptions& opt = {}) {
  const size_t nf = fns.size();
  std::vector<Timing> out(nf);
  std::vector<std::vector<double>> samples(nf);
  std::vector<int> batch(nf, 1);
  for (size_t f = 0; f < nf; ++f) {
    // Warm-up (first-touch of outputs, lazy initialization), then the warm batch size: one
    // sample should last at least ~20 us so the clock's cost does not count.
    if (opt.cold) flush_caches(opt.flush_bytes);
    double t0 = now_seconds();
    fns[f]();
    double one = now_seconds() - t0;
    if (!opt.cold) {
      // Warm means the steady state: keep calling, untimed, for opt.warmup_seconds. On this VM
      // the first tens of milliseconds of calls on freshly written memory can run ~1.6x slower
      // (measured: fused AdaGrad fp32 dim 128, 16.3 vs 10.1 us per call in about half of the
      // processes after a 20 ms warm-up, 10.2-10.5 in six of six after 100 ms), which a median
      // over a short run would report.
      const double w0 = now_seconds();
      one = 1e30;
      do {
        t0 = now_seconds();
        fns[f]();
        one = std::min(one, now_seconds() - t0);
      } while (now_seconds() - w0 < opt.warmup_seconds);
      if (one < 20e-6)
        batch[f] = static_cast<int>(std::min(1000.0, 20e-6 / std::max(one, 1e-9))) + 1;
    }
  }
  double spent = 0;
  const double budget =
      (opt.cold ? opt.cold_budget_seconds : opt.min_seconds) * static_cast<double>(nf);
  for (int r = 0;; ++r) {
    if (opt.reps > 0 ? r >= opt.reps
                     : (r >= opt.max_reps || (r >= opt.min_reps && spent >= budget)))
      break;
    for (size_t f = 0; f < nf; ++f) {
      if (opt.cold) {
        double tf = now_seconds();
        flush_caches(opt.flush_bytes);
        spent += now_seconds() - tf;
      }
      // Warm, several functions: one untimed call first, so each sample finds the function's
      // own operands where they rest between its calls, not where the previous function's call
      // left them (1 x 800 x 8000 s8: 6.4 MB of weights fit the 8 MiB L3, but not beside
      // oneDNN's own 6.4 MB copy; timed right after oneDNN's call, ours read part of them from
      // DRAM, 0.76-0.84 of the L3 roof against 0.84-0.99 alone).
      if (!opt.cold && nf > 1) fns[f]();
      double t0 = now_seconds();
      for (int b = 0; b < batch[f]; ++b) fns[f]();
      double dt = now_seconds() - t0;
      samples[f].push_back(dt / batch[f]);
      spent += dt;
    }
  }
  for (size_t f = 0; f < nf; ++f) {
    std::vector<double>& v = samples[f];
    std::sort(v.begin(), v.end());
    Timing& t = out[f];
    t.batch = batch[f];
    t.reps = static_cast<int>(v.size());
    if (v.empty()) continue;
    size_t n = v.size();
    t.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    t.min = v.front();
    t.max = v.back();
  }
  return out;
}

// The median of repeated calls of one function (see the file comment for warm and cold).
template <class Fn>
Timing time_median(Fn&& fn, const TimingOptions& opt = {}) {
  return time_median_multi({std::function<void()>(std::forward<Fn>(fn))}, opt)[0];
}

}  // namespace bench
