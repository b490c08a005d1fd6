// The header-only C++ layer: RAII handles and exceptions carrying the C API's status and message.
#include <gtest/gtest.h>
#include <quantjit/quantjit.hpp>

#include <string>
#include <vector>

TEST(CppRaii, PackPlanRunAndErrors) {
  const int64_t k = 40, n = 20, m = 3;
  std::vector<int8_t> w(k * n, 3);
  std::vector<float> scales(n, 0.5f);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.granularity = QJ_GRAN_CHANNEL;
  wd.scales = scales.data();
  qjpp::weights b = qjpp::weights::pack(wd, w.data(), n);
  qj_gemm_desc d{};
  d.a_type = QJ_U8;
  d.a_scale = 1.0f;
  d.c_type = QJ_S32;
  qjpp::gemm_plan p(d, b);
  b.reset();  // the plan keeps its own reference to the weights
  std::vector<uint8_t> a(m * k, 2);
  std::vector<int32_t> c(m * n, 0);
  p.run(m, a.data(), k, c.data(), n);
  for (int32_t v : c) EXPECT_EQ(v, 2 * 3 * k);
  try {
    p.run(m, a.data(), k - 1, c.data(), n);
    FAIL() << "expected an exception";
  } catch (const qjpp::error& e) {
    EXPECT_EQ(e.status(), QJ_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("lda=39"), std::string::npos) << e.what();
  }
}
