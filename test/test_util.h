// Shared test helpers: deterministic random data, ISA tiers to sweep, an ISA-cap guard.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace qjt {

// Every tier this CPU supports, best first, as test parameters.
std::vector<qj_isa> supported_isas();
std::string isa_param_name(qj_isa isa);

// Sets the ISA cap for the lifetime of the guard, restoring the previous cap after.
class IsaCap {
 public:
  explicit IsaCap(qj_isa isa);
  ~IsaCap();

 private:
  qj_isa prev_;
};

// For its lifetime, GEMM plans are created as on a CPU without AVX512-VBMI (the vpshufb decoders
// run instead of the vpermb ones; qj::gemm_hide_vbmi_for_tests).
class HideVbmi {
 public:
  HideVbmi();
  ~HideVbmi();
};

template <class T>
std::vector<T> random_ints(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(g));
  return v;
}

std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed);

// Seeded random-combination tests: how many cases to draw and the seed to start from. CI uses the
// defaults; QJ_TEST_ITERATIONS=N multiplies the count by N and QJ_TEST_SEED=S offsets the seed,
// so a long local run (a fuzzing session) draws new cases with the same checks.
int random_iterations(int ci_default);
uint32_t random_seed(uint32_t base);

}  // namespace qjt
