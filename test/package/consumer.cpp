// A user's C++ program against the installed headers and library (quantjit.hpp over the C API):
// a small u8 x s8 GEMM with raw s32 output checked against a plain loop, and an error reported
// as qjpp::error with the library's message. Exit status 0 when all is well.
#include <quantjit/quantjit.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  const int64_t m = 3, n = 5, k = 7;
  std::vector<int8_t> b(k * n);  // K x N, row-major
  std::vector<uint8_t> a(m * k);
  for (int64_t i = 0; i < k * n; ++i) b[i] = static_cast<int8_t>(i * 37 % 256 - 128);
  for (int64_t i = 0; i < m * k; ++i) a[i] = static_cast<uint8_t>(i * 91 % 256);
  const int32_t a_zp = 3;

  qj_weights_desc wd;
  std::memset(&wd, 0, sizeof wd);
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.layout = QJ_LAYOUT_KN;
  wd.granularity = QJ_GRAN_TENSOR;
  const float one = 1.0f;
  wd.scales = &one;
  qjpp::weights w = qjpp::weights::pack(wd, b.data(), n);

  qj_gemm_desc d;
  std::memset(&d, 0, sizeof d);
  d.a_type = QJ_U8;
  d.a_scale = 1.0f;
  d.a_zero_point = a_zp;
  d.c_type = QJ_S32;
  qjpp::gemm_plan plan(d, w);
  std::vector<int32_t> c(m * n, 0);
  plan.run(m, a.data(), k, c.data(), n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int32_t want = 0;
      for (int64_t p = 0; p < k; ++p) want += (a[i * k + p] - a_zp) * b[p * n + j];
      if (c[i * n + j] != want) {
        std::fprintf(stderr, "C[%lld][%lld] = %d, expected %d\n", static_cast<long long>(i),
                     static_cast<long long>(j), c[i * n + j], want);
        return 1;
      }
    }

  try {
    plan.run(m, a.data(), k - 1, c.data(), n);  // lda < k
    std::fprintf(stderr, "lda < k was accepted\n");
    return 2;
  } catch (const qjpp::error& e) {
    if (std::strstr(e.what(), "lda") == nullptr) {
      std::fprintf(stderr, "unexpected message: %s\n", e.what());
      return 3;
    }
  }
  std::printf("consumer_cpp: %s, %lld x %lld x %lld GEMM ok\n", qj_version(), static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k));
  return 0;
}
