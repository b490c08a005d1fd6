// Micro-benchmarks of the kernel cache (Google Benchmark): the cost of a hit (a plan asking for a
// kernel that is already generated) and of generating a fresh kernel, using a trivial family that
// emits a single `ret` so that only the cache's own work (lookup, single-flight, JIT memory,
// bookkeeping) is measured. PERF.md targets: hit < 50 ns, first generation < 100 us.
#include <asmjit/x86.h>
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "src/core/kernel_cache.h"
#include "src/core/kernel_key.h"

namespace {

bool emit_ret(const qj::KernelKey&, asmjit::x86::Assembler& a, std::string*) {
  a.ret();
  return true;
}

std::string name_ret(const qj::KernelKey& k) {
  return "bench_trivial_" + std::to_string(k.param[0]);
}

const qj::KernelFamily kTrivial{emit_ret, name_ret};

// A key no real family uses (op kNone, a marker in param[5]); param[0] varies per kernel.
qj::KernelKey trivial_key(uint32_t i) {
  qj::KernelKey k = qj::KernelKey::zeroed();
  k.op = qj::KernelOp::kNone;
  k.param[0] = i;
  k.param[5] = 0xB3C4u;
  return k;
}

void BM_CacheHit(benchmark::State& state) {
  const qj::KernelKey key = trivial_key(0xFFFFFFFFu - static_cast<uint32_t>(state.thread_index()));
  qj::KernelRef keep;
  if (qj::acquire_kernel(key, kTrivial, &keep) != QJ_OK) {
    state.SkipWithError("acquire_kernel failed");
    return;
  }
  for (auto _ : state) {
    qj::KernelRef r;
    qj::acquire_kernel(key, kTrivial, &r);
    benchmark::DoNotOptimize(r.entry());
  }
}
BENCHMARK(BM_CacheHit);
BENCHMARK(BM_CacheHit)->Threads(2);

void BM_GenerateTrivial(benchmark::State& state) {
  static uint32_t next = 0;
  qj_cache_stats_t s0, s1;
  qj::cache_stats(&s0);
  int64_t made = 0;
  for (auto _ : state) {
    qj::KernelRef r;
    if (qj::acquire_kernel(trivial_key(next++), kTrivial, &r) != QJ_OK) {
      state.SkipWithError("acquire_kernel failed");
      break;
    }
    benchmark::DoNotOptimize(r.entry());
    ++made;
    if ((made & 1023) == 0) {  // keep the cache small; not timed
      state.PauseTiming();
      qj::cache_clear();
      state.ResumeTiming();
    }
  }
  qj::cache_stats(&s1);
  // The cache's own generation clock (emit + copy into JIT memory), apart from lookup overhead.
  state.counters["gen_us"] =
      made ? (s1.generation_ns - s0.generation_ns) * 1e-3 / static_cast<double>(made) : 0;
  qj::cache_clear();
}
BENCHMARK(BM_GenerateTrivial);

}  // namespace
