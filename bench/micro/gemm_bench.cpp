// Micro-benchmarks of the INT8 GEMM (Google Benchmark): the first-call cost of a plan (kernel
// generation after qj_cache_clear, i.e. what a new shape costs; PERF.md: oneDNN 130-750 us,
// libxsmm 40-80 us, target < 100 us) and the run time of a few shapes in the setting of
// quantjit-bench gemm (u8 A zero point 3, s8 B per-channel, fp32 bias, u8 C zero point 5).
#include <benchmark/benchmark.h>
#include <quantjit/quantjit.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

struct Problem {
  int64_t m, n, k;
  std::vector<uint8_t> a;
  std::vector<int8_t> b;
  std::vector<float> b_scale, bias;
  std::vector<uint8_t> c;
  qj_weights w = nullptr;
  qj_gemm_desc desc{};

  Problem(int64_t m_, int64_t n_, int64_t k_)
      : m(m_), n(n_), k(k_), a(m * k), b(k * n), b_scale(n), bias(n), c(m * n) {
    std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 7 + k));
    for (auto& x : a) x = static_cast<uint8_t>(rng() >> 24);
    for (auto& x : b) x = static_cast<int8_t>(rng() >> 24);
    for (auto& s : b_scale) s = 0.004f + 0.008f * (rng() >> 8) / 16777216.0f;
    for (auto& s : bias) s = 0.5f;
    qj_weights_desc wd{};
    wd.dtype = QJ_S8;
    wd.k = k;
    wd.n = n;
    wd.layout = QJ_LAYOUT_KN;
    wd.granularity = QJ_GRAN_CHANNEL;
    wd.scales = b_scale.data();
    if (qj_weights_pack(&wd, b.data(), n, &w) != QJ_OK) w = nullptr;
    desc.a_type = QJ_U8;
    desc.a_scale = 0.02f;
    desc.a_zero_point = 3;
    desc.a_granularity = QJ_GRAN_TENSOR;
    desc.c_type = QJ_U8;
    desc.c_scale = 0.5f;
    desc.c_zero_point = 5;
    desc.bias = bias.data();
  }
  ~Problem() { qj_weights_destroy(w); }
};

// Plan creation right after the cache is emptied: every kernel the plan needs is generated.
void BM_GemmPlanFirstCall(benchmark::State& state) {
  Problem p(state.range(0), state.range(1), state.range(2));
  if (!p.w) {
    state.SkipWithError(qj_last_error());
    return;
  }
  uint64_t gen_ns = 0, n = 0;
  for (auto _ : state) {
    state.PauseTiming();
    qj_cache_clear();
    qj_cache_stats_t s0, s1;
    qj_cache_stats(&s0);
    state.ResumeTiming();
    qj_gemm_plan plan = nullptr;
    if (qj_gemm_plan_create(&p.desc, p.w, &plan) != QJ_OK) {
      state.SkipWithError(qj_last_error());
      break;
    }
    state.PauseTiming();
    qj_cache_stats(&s1);
    gen_ns += s1.generation_ns - s0.generation_ns;
    ++n;
    qj_gemm_plan_destroy(plan);
    state.ResumeTiming();
  }
  state.counters["gen_us"] = n ? gen_ns * 1e-3 / static_cast<double>(n) : 0;
}
BENCHMARK(BM_GemmPlanFirstCall)->Args({64, 800, 320})->Args({1, 4096, 4096})->Unit(benchmark::kMicrosecond);

// Plan creation when the kernels are cached (a second plan for another weight matrix).
void BM_GemmPlanCached(benchmark::State& state) {
  Problem p(state.range(0), state.range(1), state.range(2));
  if (!p.w) {
    state.SkipWithError(qj_last_error());
    return;
  }
  qj_gemm_plan keep = nullptr;
  qj_gemm_plan_create(&p.desc, p.w, &keep);
  for (auto _ : state) {
    qj_gemm_plan plan = nullptr;
    if (qj_gemm_plan_create(&p.desc, p.w, &plan) != QJ_OK) {
      state.SkipWithError(qj_last_error());
      break;
    }
    qj_gemm_plan_destroy(plan);
  }
  qj_gemm_plan_destroy(keep);
}
BENCHMARK(BM_GemmPlanCached)->Args({64, 800, 320})->Unit(benchmark::kMicrosecond);

// "Gop" is a rate: Google Benchmark prints it as Gop/s, i.e. GOPS.
void BM_GemmRun(benchmark::State& state) {
  Problem p(state.range(0), state.range(1), state.range(2));
  qj_gemm_plan plan = nullptr;
  if (!p.w || qj_gemm_plan_create(&p.desc, p.w, &plan) != QJ_OK) {
    state.SkipWithError(qj_last_error());
    return;
  }
  for (auto _ : state) {
    qj_status s = qj_gemm_run(plan, p.m, p.a.data(), p.k, p.c.data(), p.n, nullptr);
    if (s != QJ_OK) {
      state.SkipWithError(qj_last_error());
      break;
    }
    benchmark::ClobberMemory();
  }
  qj_gemm_plan_destroy(plan);
  state.counters["Gop"] = benchmark::Counter(2e-9 * p.m * p.n * p.k,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
// 1 x 16 x 16: the cost of a call around a kernel of a few ns (31-32 ns in all on the Zen 4 of
// 2026-12-08, about half of it outside the kernel: the MXCSR check, the argument checks, the
// dispatch); 1 x 128 x 512 and 1 x 1024 x 256: the M = 1 shapes whose weights sit in L2.
BENCHMARK(BM_GemmRun)
    ->Args({1, 16, 16})
    ->Args({1, 128, 512})
    ->Args({1, 1024, 256})
    ->Args({64, 800, 320})
    ->Args({128, 128, 128})
    ->Args({1024, 1024, 1024})
    ->Args({1, 4096, 4096})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
