// C API of the MX conversions: sizes, equivalence of the plain and _ex calls, and misuse (every
// bad argument gives its code and a message naming the argument and its value, and leaves every
// output buffer untouched).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test/mx_test_util.h"
#include "test/test_util.h"

namespace {

constexpr uint8_t kSentinel = 0xab;

struct Buffers {
  std::vector<float> src = qjt::random_floats(100, -2, 2, 1);
  std::vector<uint8_t> elems = std::vector<uint8_t>(1024, kSentinel);
  std::vector<uint8_t> scales = std::vector<uint8_t>(64, kSentinel);
  std::vector<float> dst = std::vector<float>(128, 42.0f);
  bool untouched() const {
    for (uint8_t b : elems)
      if (b != kSentinel) return false;
    for (uint8_t b : scales)
      if (b != kSentinel) return false;
    for (float f : dst)
      if (f != 42.0f) return false;
    return true;
  }
};

void expect_error(qj_status got, qj_status want, std::initializer_list<const char*> words, const Buffers& b) {
  EXPECT_EQ(got, want) << qj_status_name(got);
  const std::string msg = qj_last_error();
  for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << "message '" << msg << "' lacks '" << w << "'";
  EXPECT_TRUE(b.untouched()) << "an output was written on failure: " << msg;
}

TEST(MxApi, StorageSizes) {
  struct Want {
    qj_dtype t;
    int64_t n;
    size_t elems, scales;
  };
  const Want wants[] = {
      {QJ_MXFP8_E4M3, 33, 64, 2}, {QJ_MXFP8_E5M2, 32, 32, 1}, {QJ_MXFP6_E3M2, 1, 24, 1},
      {QJ_MXFP6_E2M3, 65, 72, 3}, {QJ_MXFP4_E2M1, 100, 64, 4}, {QJ_MXINT8, 0, 0, 0},
      {QJ_BDR_MX9, 17, 36, 0},    {QJ_BDR_MX6, 16, 12, 0},     {QJ_BDR_MX4, 33, 24, 0},
  };
  for (const Want& w : wants) {
    size_t e = 99, s = 99;
    ASSERT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, w.t, w.n, &e, &s), QJ_OK) << qj_last_error();
    EXPECT_EQ(e, w.elems) << qj_dtype_name(w.t);
    EXPECT_EQ(s, w.scales) << qj_dtype_name(w.t);
    EXPECT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, w.t, w.n, nullptr, nullptr), QJ_OK);
  }
  size_t e = 0;
  ASSERT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP4_E2M1, 33, &e, nullptr), QJ_OK);
  EXPECT_EQ(e, 34u);
  ASSERT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_FBGEMM_MX4, QJ_MXFP4_E2M1, 32, &e, nullptr), QJ_OK);
  EXPECT_EQ(e, 17u);
}

TEST(MxApi, PlainAndExCallsAgree) {
  const std::vector<float> v = qjt::random_floats(77, -5, 5, 2);
  for (qj_dtype t : mxt::ocp_types()) {
    mxt::Mx a = mxt::quantize(t, QJ_ROUND_RCEIL, v), b = a;
    std::fill(b.elems.begin(), b.elems.end(), 0);
    ASSERT_EQ(qj_mx_quantize_ex(t, QJ_ROUND_RCEIL, QJ_F32, v.data(), 77, b.elems.data(), b.scales.data()), QJ_OK);
    EXPECT_EQ(a.elems, b.elems);
    EXPECT_EQ(a.scales, b.scales);
    std::vector<float> x(77), y(77);
    ASSERT_EQ(qj_mx_dequantize(t, a.elems.data(), a.scales.data(), 77, x.data()), QJ_OK);
    ASSERT_EQ(qj_mx_dequantize_ex(t, a.elems.data(), a.scales.data(), 77, QJ_F32, y.data()), QJ_OK);
    EXPECT_EQ(mxt::first_diff(x, y), -1);
  }
}

TEST(MxApi, ZeroLengthIsANoOp) {
  Buffers b;
  for (qj_dtype t : mxt::ocp_types()) {
    EXPECT_EQ(qj_mx_quantize(t, QJ_ROUND_FLOOR, nullptr, 0, nullptr, nullptr), QJ_OK);
    EXPECT_EQ(qj_mx_quantize(t, QJ_ROUND_FLOOR, b.src.data(), 0, b.elems.data(), b.scales.data()), QJ_OK);
    EXPECT_EQ(qj_mx_dequantize(t, nullptr, nullptr, 0, nullptr), QJ_OK);
  }
  EXPECT_EQ(qj_mx_export(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP4_E2M1, nullptr, nullptr, 0, nullptr), QJ_OK);
  EXPECT_TRUE(b.untouched());
}

TEST(MxApi, QuantizeMisuse) {
  Buffers b;
  float* s = b.src.data();
  uint8_t* e = b.elems.data();
  uint8_t* sc = b.scales.data();
  expect_error(qj_mx_quantize(QJ_F32, QJ_ROUND_FLOOR, s, 32, e, sc), QJ_ERR_INVALID_ARGUMENT,
               {"qj_mx_quantize", "mx_type=4"}, b);
  expect_error(qj_mx_quantize(static_cast<qj_dtype>(99), QJ_ROUND_FLOOR, s, 32, e, sc), QJ_ERR_INVALID_ARGUMENT,
               {"mx_type=99"}, b);
  expect_error(qj_mx_quantize(QJ_MXFP4_E2M1, static_cast<qj_rounding>(7), s, 32, e, sc), QJ_ERR_INVALID_ARGUMENT,
               {"r=7"}, b);
  expect_error(qj_mx_quantize(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, nullptr, 32, e, sc), QJ_ERR_INVALID_ARGUMENT,
               {"src is NULL"}, b);
  expect_error(qj_mx_quantize(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, s, 32, nullptr, sc), QJ_ERR_INVALID_ARGUMENT,
               {"elems is NULL"}, b);
  expect_error(qj_mx_quantize(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, s, 32, e, nullptr), QJ_ERR_INVALID_ARGUMENT,
               {"scales is NULL"}, b);
  expect_error(qj_mx_quantize(QJ_MXINT8, QJ_ROUND_FLOOR, s, -1, e, sc), QJ_ERR_INVALID_ARGUMENT, {"n=-1"}, b);
  expect_error(qj_mx_quantize(QJ_MXINT8, QJ_ROUND_FLOOR, s, int64_t{1} << 60, e, sc), QJ_ERR_INVALID_ARGUMENT,
               {"n=1152921504606846976", "too large"}, b);
  expect_error(qj_mx_quantize_ex(QJ_MXINT8, QJ_ROUND_FLOOR, QJ_F16, s, 32, e, sc), QJ_ERR_INVALID_ARGUMENT,
               {"qj_mx_quantize_ex", "src_type=5"}, b);
  expect_error(qj_mx_quantize(QJ_BDR_MX9, QJ_ROUND_RCEIL, s, 32, e, nullptr), QJ_ERR_UNSUPPORTED,
               {"r=QJ_ROUND_RCEIL", "mx9"}, b);
  expect_error(qj_mx_quantize(QJ_BDR_MX6, QJ_ROUND_FLOOR, s, 32, e, sc), QJ_ERR_INVALID_ARGUMENT,
               {"scales must be NULL", "mx6"}, b);
  expect_error(qj_mx_quantize(QJ_BDR_MX4, QJ_ROUND_FLOOR, s, 32, nullptr, nullptr), QJ_ERR_INVALID_ARGUMENT,
               {"elems is NULL"}, b);
}

TEST(MxApi, DequantizeMisuse) {
  Buffers b;
  const std::vector<uint8_t> e(1024, 0x11), sc(64, 0x7f);
  float* d = b.dst.data();
  expect_error(qj_mx_dequantize(QJ_S8, e.data(), sc.data(), 32, d), QJ_ERR_INVALID_ARGUMENT,
               {"qj_mx_dequantize", "mx_type=2"}, b);
  expect_error(qj_mx_dequantize(QJ_MXFP6_E2M3, nullptr, sc.data(), 32, d), QJ_ERR_INVALID_ARGUMENT,
               {"elems is NULL"}, b);
  expect_error(qj_mx_dequantize(QJ_MXFP6_E2M3, e.data(), nullptr, 32, d), QJ_ERR_INVALID_ARGUMENT,
               {"scales is NULL"}, b);
  expect_error(qj_mx_dequantize(QJ_MXFP6_E2M3, e.data(), sc.data(), 32, nullptr), QJ_ERR_INVALID_ARGUMENT,
               {"dst is NULL"}, b);
  expect_error(qj_mx_dequantize(QJ_MXFP6_E2M3, e.data(), sc.data(), -5, d), QJ_ERR_INVALID_ARGUMENT,
               {"n=-5"}, b);
  expect_error(qj_mx_dequantize_ex(QJ_MXFP6_E2M3, e.data(), sc.data(), 32, QJ_S8, d), QJ_ERR_INVALID_ARGUMENT,
               {"qj_mx_dequantize_ex", "dst_type=2"}, b);
  expect_error(qj_mx_dequantize(QJ_BDR_MX9, e.data(), sc.data(), 32, d), QJ_ERR_INVALID_ARGUMENT,
               {"scales must be NULL"}, b);
}

TEST(MxApi, LayoutMisuse) {
  Buffers b;
  const std::vector<uint8_t> src(1024, 0x22), sc(64, 0x7f);
  uint8_t* e = b.elems.data();
  uint8_t* s = b.scales.data();
  expect_error(qj_mx_export(QJ_MX_LAYOUT_SPLIT, QJ_MXFP4_E2M1, src.data(), sc.data(), 32, e),
               QJ_ERR_INVALID_ARGUMENT, {"qj_mx_export", "layout=QJ_MX_LAYOUT_SPLIT"}, b);
  expect_error(qj_mx_export(static_cast<qj_mx_layout>(9), QJ_MXFP4_E2M1, src.data(), sc.data(), 32, e),
               QJ_ERR_INVALID_ARGUMENT, {"layout=9"}, b);
  expect_error(qj_mx_export(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP8_E4M3, src.data(), sc.data(), 32, e),
               QJ_ERR_INVALID_ARGUMENT, {"mx_type=mxfp8_e4m3", "QJ_MX_LAYOUT_GGML_MXFP4"}, b);
  expect_error(qj_mx_export(QJ_MX_LAYOUT_FBGEMM_MX4, QJ_MXFP4_E2M1, nullptr, sc.data(), 32, e),
               QJ_ERR_INVALID_ARGUMENT, {"elems is NULL"}, b);
  expect_error(qj_mx_export(QJ_MX_LAYOUT_FBGEMM_MX4, QJ_MXFP4_E2M1, src.data(), nullptr, 32, e),
               QJ_ERR_INVALID_ARGUMENT, {"scales is NULL"}, b);
  expect_error(qj_mx_export(QJ_MX_LAYOUT_FBGEMM_MX4, QJ_MXFP4_E2M1, src.data(), sc.data(), 32, nullptr),
               QJ_ERR_INVALID_ARGUMENT, {"dst is NULL"}, b);
  expect_error(qj_mx_export(QJ_MX_LAYOUT_FBGEMM_MX4, QJ_MXFP4_E2M1, src.data(), sc.data(), -32, e),
               QJ_ERR_INVALID_ARGUMENT, {"n=-32"}, b);
  expect_error(qj_mx_import(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP4_E2M1, nullptr, 32, e, s), QJ_ERR_INVALID_ARGUMENT,
               {"qj_mx_import", "src is NULL"}, b);
  expect_error(qj_mx_import(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP4_E2M1, src.data(), 32, nullptr, s),
               QJ_ERR_INVALID_ARGUMENT, {"elems is NULL"}, b);
  expect_error(qj_mx_import(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP4_E2M1, src.data(), 32, e, nullptr),
               QJ_ERR_INVALID_ARGUMENT, {"scales is NULL"}, b);
  expect_error(qj_mx_import(QJ_MX_LAYOUT_FBGEMM_MX4, QJ_MXINT8, src.data(), 32, e, s), QJ_ERR_INVALID_ARGUMENT,
               {"mx_type=mxint8"}, b);
  size_t bytes = 7;
  EXPECT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_GGML_MXFP4, QJ_MXFP6_E2M3, 32, &bytes, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 7u);
  EXPECT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, QJ_U8, 32, &bytes, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("mx_type=1"), std::string::npos);
  EXPECT_EQ(qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, QJ_MXINT8, -3, &bytes, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("n=-3"), std::string::npos);
  EXPECT_EQ(bytes, 7u);
}

}  // namespace
