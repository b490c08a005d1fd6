#include "test/test_util.h"

#include "src/core/isa.h"
#include "src/core/jit_isa_check.h"
#include "src/ops/gemm.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace qjt {

namespace {
// Every test binary (ctest runs them with QJ_JIT_CHECK_ISA=1) fails at its end if a kernel was
// refused by the emit-time ISA check: the dispatcher's fallback would otherwise give the right
// answer and hide that the kernel would not run on the CPUs of its tier.
class JitIsaCheckEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    std::string first;
    const uint64_t n = qj::jit_isa_violations(&first);
    if (n != 0) ADD_FAILURE() << n << " kernel(s) used instructions outside their ISA tier; the first: " << first;
  }
};
const bool kJitIsaCheckRegistered = (::testing::AddGlobalTestEnvironment(new JitIsaCheckEnvironment), true);

// QJ_TEST_AMD_FAMILY=F (decimal or 0x..): the binary's tests tune as if on AMD family F
// (qj::set_amd_family_override; 0 for another vendor), so that every CPU runs each family's
// kernels and rules (test/CMakeLists.txt registers the tests whose choices depend on it under
// Zen 5's family and another; the one whose rules are the CPU's own skips). A value that is not
// a family fails the run.
class AmdFamilyEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* e = std::getenv("QJ_TEST_AMD_FAMILY");
    if (!e) return;
    char* end = nullptr;
    const long f = std::strtol(e, &end, 0);
    if (end == e || *end != '\0' || f < 0 || f > 0xff)
      FAIL() << "QJ_TEST_AMD_FAMILY=" << e << " is not a CPU family (0 to 255)";  // (no test runs)
    // Every rule tells Zen 5 (0x1A) and later from the rest: a family on the CPU's side of that
    // line repeats what the binary's own run covers.
    const int cpu = qj::amd_family();
    if ((f >= 0x1a) == (cpu >= 0x1a)) {
      std::printf("AMD family 0x%lx takes the rules of this CPU (family 0x%x): covered by the default run\n", f, cpu);
      GTEST_SKIP();
    }
    qj::set_amd_family_override(static_cast<int>(f));
    std::printf("tuning as on AMD family 0x%lx (QJ_TEST_AMD_FAMILY)\n", f);
  }
};
const bool kAmdFamilyRegistered = (::testing::AddGlobalTestEnvironment(new AmdFamilyEnvironment), true);
}  // namespace

std::vector<qj_isa> supported_isas() {
  std::vector<qj_isa> v;
  for (int i = qj_cpu_isa(); i >= QJ_ISA_SCALAR; --i) v.push_back(static_cast<qj_isa>(i));
  return v;
}

std::string isa_param_name(qj_isa isa) { return qj_isa_name(isa); }

IsaCap::IsaCap(qj_isa isa) : prev_(qj_max_isa()) {
  if (qj_set_max_isa(isa) != QJ_OK) std::abort();
}
IsaCap::~IsaCap() { qj_set_max_isa(prev_); }

int random_iterations(int ci_default) {
  const char* e = std::getenv("QJ_TEST_ITERATIONS");
  const long f = e ? std::strtol(e, nullptr, 10) : 1;
  return f > 1 ? static_cast<int>(ci_default * f) : ci_default;
}
uint32_t random_seed(uint32_t base) {
  const char* e = std::getenv("QJ_TEST_SEED");
  return base + (e ? static_cast<uint32_t>(std::strtoul(e, nullptr, 10)) * 7919u : 0u);
}

HideVbmi::HideVbmi() { qj::gemm_hide_vbmi_for_tests(true); }
HideVbmi::~HideVbmi() { qj::gemm_hide_vbmi_for_tests(false); }

std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

std::vector<uint8_t> to_nibbles(const std::vector<int32_t>& q, int64_t k, int64_t n, qj_layout layout, int64_t ld) {
  std::vector<uint8_t> b(layout == QJ_LAYOUT_KN ? ((k + 1) / 2) * ld : n * ld, 0xA5);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) {
      const size_t idx = layout == QJ_LAYOUT_KN ? (kk / 2) * ld + c : c * ld + kk / 2;
      const uint8_t v = static_cast<uint8_t>(q[kk * n + c] & 15);
      b[idx] = kk % 2 == 0 ? static_cast<uint8_t>((b[idx] & 0xF0) | v) : static_cast<uint8_t>((b[idx] & 0x0F) | (v << 4));
    }
  return b;
}

std::vector<Shape> large_and_fbgemm_shapes(int64_t k_multiple) {
  std::vector<Shape> v = {{97, 257, 513},    {256, 257, 513},  {1, 128, 512},    {1, 2048, 513},  {6, 512, 512},
                          {6, 2048, 257},    {102, 2323, 256}, {102, 512, 257},  {120, 4, 288}};
  for (Shape& s : v) s.k = (s.k + k_multiple - 1) / k_multiple * k_multiple;
  return v;
}

std::string create_jit_plan(const qj_gemm_desc& d, qj_weights w, qj_gemm_plan* out) {
  *out = nullptr;
  qj_cache_stats_t before{}, after{};
  qj_cache_stats(&before);
  if (qj_gemm_plan_create(&d, w, out) != QJ_OK) return std::string("plan: ") + qj_last_error();
  qj_cache_stats(&after);
  if (qj_max_isa() >= QJ_ISA_AVX2 && after.fallbacks != before.fallbacks) {
    qj_gemm_plan_destroy(*out);
    *out = nullptr;
    return std::string("plan fell back to the scalar reference at ") + qj_isa_name(qj_max_isa());
  }
  return "";
}

}  // namespace qjt
