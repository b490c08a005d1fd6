// Shared test helpers: deterministic random data, ISA tiers to sweep, an ISA-cap guard, and the
// driver of the seeded random-combination tests.
#pragma once
#include <quantjit/quantjit.h>

#include <gtest/gtest.h>

#include <cmath>
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
// fn(m, note) for M = 1..8 and 13 (every tile height, then two tiles) at every tier from `lowest`
// this CPU supports, first as the CPU is, then with AVX512-VBMI hidden (note: "" or " (VBMI
// hidden)", for failure messages).
template <class Fn>
void each_tile_height_with_and_without_vbmi(qj_isa lowest, Fn&& fn) {
  auto tiers = [&](const char* note) {
    for (qj_isa isa : supported_isas()) {
      if (isa < lowest) continue;
      IsaCap cap(isa);
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 13}) fn(m, note);
    }
  };
  tiers("");
  HideVbmi hide;
  tiers(" (VBMI hidden)");
}

template <class T>
std::vector<T> random_ints(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(g));
  return v;
}

std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed);

// S4 / U4 weights as qj_weights_pack takes them: q (K x N, row-major) as nibbles, element (k, n)
// nibble k % 2 of byte (k/2)*ld + n (KN) or n*ld + k/2 (NK); other bytes 0xA5.
std::vector<uint8_t> to_nibbles(const std::vector<int32_t>& q, int64_t k, int64_t n, qj_layout layout, int64_t ld);

// The fixed shapes every GEMM weight family's tests run besides their tail sweeps: the INT8
// sweep's large sizes (M = 97 and 256, N = 257, K = 513) and FBGEMM's own GEMM test shapes.
// k_multiple rounds K up (MX weights take whole blocks of 32).
struct Shape {
  int64_t m, n, k;
};
std::vector<Shape> large_and_fbgemm_shapes(int64_t k_multiple = 1);
// fn(shape, seed) for each of them at every tier this CPU supports (the cap set meanwhile); the
// seed counts up from 4001 within each tier.
template <class Fn>
void each_large_shape_at_every_tier(int64_t k_multiple, Fn&& fn) {
  for (qj_isa isa : supported_isas()) {
    IsaCap cap(isa);
    uint32_t seed = 4000;
    for (const Shape& s : large_and_fbgemm_shapes(k_multiple)) fn(s, ++seed);
  }
}

// qj_gemm_plan_create for tests that compare with src/ref: at a JIT tier (avx2 and up) a plan
// that falls back to the scalar reference is an error (every GEMM family has JIT kernels at every
// JIT tier; a fallback would compare the reference with itself). Returns "" or the error; *out
// is NULL on error. (Callers at one tier only: another thread's plan at the scalar tier would be
// counted.)
std::string create_jit_plan(const qj_gemm_desc& d, qj_weights w, qj_gemm_plan* out);

// Weights K x N stored N x K (one column's K values contiguous), the other fields zero.
inline qj_weights_desc nk_desc(qj_dtype t, int64_t k, int64_t n) {
  qj_weights_desc d{};
  d.dtype = t;
  d.k = k;
  d.n = n;
  d.layout = QJ_LAYOUT_NK;
  return d;
}

// Seeded random-combination tests: how many cases to draw and the seed to start from. CI uses the
// defaults; QJ_TEST_ITERATIONS=N multiplies the count by N and QJ_TEST_SEED=S offsets the seed,
// so a long local run (a fuzzing session) draws new cases with the same checks.
int random_iterations(int ci_default);
uint32_t random_seed(uint32_t base);

// The rounding of a float result to bf16, for error bounds: half an ulp of |want| + bound (8
// significant bits), or below 2^-126 the half spacing 2^-134 of bf16's subnormals.
inline double bf16_rounding_slack(double want, double bound) {
  return std::ldexp(1.0, -8) * (std::fabs(want) + bound) + std::ldexp(1.0, -134);
}

// Uniform draws for the random-combination tests.
class Picker {
 public:
  explicit Picker(uint32_t seed) : g_(seed) {}
  int operator()(int n) { return std::uniform_int_distribution<int>(0, n - 1)(g_); }  // [0, n)
  // A row count: 1, up to 16, up to `mid`, or `big_lo` + up to `big_span` (a quarter each).
  int64_t rows(int mid, int big_lo, int big_span) {
    const int k = (*this)(4);
    return k == 0 ? 1 : k == 1 ? 1 + (*this)(16) : k == 2 ? 1 + (*this)(mid) : big_lo + (*this)(big_span);
  }

 private:
  std::mt19937 g_;
};

// Runs a seeded random-combination test: at every tier this CPU supports (under its ISA cap),
// random_iterations(ci_default) cases, each body(isa, pick, case_seed); stops at the first case
// that records a failure. The draws depend on random_seed(base) and the tier only; case seeds
// are distinct across tiers for up to 2^24 cases per tier.
template <class F>
void for_each_random_case(uint32_t base, int ci_default, F&& body) {
  const uint32_t seed0 = random_seed(base);
  const int iterations = random_iterations(ci_default);
  for (qj_isa isa : supported_isas()) {
    IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    Picker pick(seed0 + static_cast<uint32_t>(isa));
    for (int it = 0; it < iterations; ++it) {
      body(isa, pick, seed0 + (static_cast<uint32_t>(isa) << 24) + static_cast<uint32_t>(it));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace qjt
