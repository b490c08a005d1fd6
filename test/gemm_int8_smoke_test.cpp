#include <gtest/gtest.h>
#include "test/gemm_case.h"
#include "test/test_util.h"
TEST(Smoke, Basic) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    qjt::GemmCase c; c.m = 5; c.n = 37; c.k = 70;
    for (qj_dtype ct : {QJ_U8, QJ_S8, QJ_S32, QJ_F32, QJ_BF16}) {
      c.c_type = ct; c.bias = ct != QJ_S32;
      EXPECT_EQ(qjt::run_gemm_case(c), "") << c.str();
    }
  }
}
