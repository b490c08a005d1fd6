// qj_quantize_rowwise / qj_dequantize_rowwise: bytes identical to FBGEMM's conversion functions.
//
// The expected bytes are derived here from FBGEMM's documented reference formulas
// (FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef, FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef
// and the *ToFloatOrHalfRef inverses), written out independently of src/formats, plus a few rows
// whose bytes were worked out by hand. Every ISA tier must produce exactly these bytes.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "src/formats/half.h"
#include "test/test_util.h"

namespace {

// ---- FBGEMM's formulas, transcribed (the oracle) ----------------------------------------------

std::vector<uint8_t> fbgemm_8bit_row(const std::vector<float>& x) {
  const float mn = *std::min_element(x.begin(), x.end());
  const float mx = *std::max_element(x.begin(), x.end());
  const float range = mx - mn;
  std::vector<uint8_t> row(x.size() + 8);
  const float scale = range / 255.0f;
  std::memcpy(&row[x.size()], &scale, 4);
  std::memcpy(&row[x.size() + 4], &mn, 4);
  const float inv = 255.0f / (range + 1e-8f);
  for (size_t j = 0; j < x.size(); ++j) row[j] = static_cast<uint8_t>(std::lrintf((x[j] - mn) * inv));
  return row;
}

std::vector<uint8_t> fbgemm_nbit_row(int bits, const std::vector<float>& x, bool sb_first) {
  const int per_byte = 8 / bits;
  const size_t data = (x.size() + per_byte - 1) / per_byte;
  std::vector<uint8_t> row(data + 4, 0);
  uint8_t* d = sb_first ? &row[4] : &row[0];
  uint8_t* sb = sb_first ? &row[0] : &row[data];
  float mn = *std::min_element(x.begin(), x.end());
  const float mx = *std::max_element(x.begin(), x.end());
  const uint16_t mn16 = qj::f32_to_f16(mn);
  mn = qj::f16_to_f32(mn16);
  const float range = mx - mn;
  float scale = range == 0 ? 1.0f : range / ((1 << bits) - 1);
  scale = qj::f16_to_f32(qj::f32_to_f16(scale));
  if (scale == 0) scale = 1.0f;
  float inv = 1.0f / scale;
  if (std::isinf(inv)) scale = inv = 1.0f;
  const uint16_t s16 = qj::f32_to_f16(scale);
  std::memcpy(sb, &s16, 2);
  std::memcpy(sb + 2, &mn16, 2);
  for (size_t j = 0; j < x.size(); ++j) {
    long q = std::lrintf((x[j] - mn) * inv);
    q = std::max(0L, std::min<long>(q, (1 << bits) - 1));
    d[j / per_byte] |= static_cast<uint8_t>(q << ((j % per_byte) * bits));
  }
  return row;
}

std::vector<uint8_t> expected_row(qj_dtype t, const std::vector<float>& x, bool sb_first) {
  if (t == QJ_FUSED_8BIT && !sb_first) return fbgemm_8bit_row(x);
  return fbgemm_nbit_row(t == QJ_FUSED_8BIT ? 8 : t == QJ_FUSED_4BIT ? 4 : 2, x, sb_first);
}

// FBGEMM's dequantization: scale * q + bias, product then sum.
std::vector<float> expected_dequant(qj_dtype t, const uint8_t* row, int64_t dim, bool sb_first) {
  const int bits = t == QJ_FUSED_8BIT ? 8 : t == QJ_FUSED_4BIT ? 4 : 2;
  const int per_byte = 8 / bits;
  const int64_t data = (dim + per_byte - 1) / per_byte;
  float scale, bias;
  const uint8_t* d = row;
  if (bits == 8 && !sb_first) {
    std::memcpy(&scale, row + dim, 4);
    std::memcpy(&bias, row + dim + 4, 4);
  } else {
    uint16_t s16, b16;
    const uint8_t* sb = sb_first ? row : row + data;
    std::memcpy(&s16, sb, 2);
    std::memcpy(&b16, sb + 2, 2);
    scale = qj::f16_to_f32(s16);
    bias = qj::f16_to_f32(b16);
    if (sb_first) d = row + 4;
  }
  std::vector<float> out(dim);
  for (int64_t j = 0; j < dim; ++j) {
    unsigned q = (d[j / per_byte] >> ((j % per_byte) * bits)) & ((1u << bits) - 1);
    float p = static_cast<float>(q) * scale;
    out[j] = p + bias;
  }
  return out;
}

std::string hex(const uint8_t* p, size_t n) {
  std::string s;
  char b[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x ", p[i]);
    s += b;
  }
  return s;
}

const qj_dtype kTypes[] = {QJ_FUSED_8BIT, QJ_FUSED_4BIT, QJ_FUSED_2BIT};
const int64_t kDims[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 128, 257};

// Rows with the interesting cases: spread values, a constant row, a row of zeros with a leading
// -0, a tiny range (scale rounding to zero in fp16), and values on rounding ties.
std::vector<float> make_row(int kind, int64_t dim, uint32_t seed) {
  std::vector<float> x = qjt::random_floats(static_cast<size_t>(dim), -3.0f, 5.0f, seed);
  switch (kind) {
    case 1: std::fill(x.begin(), x.end(), 0.375f); break;
    case 2:
      std::fill(x.begin(), x.end(), 0.0f);
      x[0] = -0.0f;
      break;
    case 3:
      for (int64_t j = 0; j < dim; ++j) x[j] = j % 2 ? std::nextafter(1.0f, 2.0f) : 1.0f;  // tiny range
      break;
    case 4:
      for (int64_t j = 0; j < dim; ++j) x[j] = static_cast<float>(j % 16) * 0.5f;  // ties
      break;
    case 5:
      for (auto& v : x) v *= 1000.0f;  // larger magnitudes, fp16 scale rounding matters
      break;
    default: break;
  }
  return x;
}

TEST(RowwiseQuantize, HandComputedRows) {
  // 8-bit: min 0, max 1: scale 1/255 = 0x3b808081, bias 0; 0.5 * 255 = 127.5 -> 128 (ties to even).
  {
    const float x[4] = {0.0f, 1.0f, 0.5f, 0.25f};
    uint8_t row[12];
    ASSERT_EQ(qj_quantize_rowwise(QJ_FUSED_8BIT, x, 1, 4, row), QJ_OK) << qj_last_error();
    const uint8_t want[12] = {0x00, 0xff, 0x80, 0x40, 0x81, 0x80, 0x80, 0x3b, 0, 0, 0, 0};
    EXPECT_EQ(hex(row, 12), hex(want, 12));
  }
  // 4-bit: scale fp16(3/15) = 0x3266 (0.19995117), inv 5.0012; codes 0 8 15 4 1.
  {
    const float x[5] = {0.0f, 1.5f, 3.0f, 0.75f, 0.1f};
    uint8_t row[7];
    ASSERT_EQ(qj_quantize_rowwise(QJ_FUSED_4BIT, x, 1, 5, row), QJ_OK) << qj_last_error();
    const uint8_t want[7] = {0x80, 0x4f, 0x01, 0x66, 0x32, 0x00, 0x00};
    EXPECT_EQ(hex(row, 7), hex(want, 7));
  }
  // 2-bit: bias fp16(-1) = 0xbc00, scale fp16(2/3) = 0x3955; codes 0 3 2 2 -> 0xac.
  {
    const float x[4] = {-1.0f, 1.0f, 0.0f, 0.34f};
    uint8_t row[5];
    ASSERT_EQ(qj_quantize_rowwise(QJ_FUSED_2BIT, x, 1, 4, row), QJ_OK) << qj_last_error();
    const uint8_t want[5] = {0xac, 0x55, 0x39, 0x00, 0xbc};
    EXPECT_EQ(hex(row, 5), hex(want, 5));
  }
}

TEST(RowwiseQuantize, RowBytes) {
  EXPECT_EQ(qj_rowwise_row_bytes(QJ_FUSED_8BIT, 64, 0), 72);
  EXPECT_EQ(qj_rowwise_row_bytes(QJ_FUSED_8BIT, 64, QJ_ROWWISE_SCALE_BIAS_FIRST), 68);
  EXPECT_EQ(qj_rowwise_row_bytes(QJ_FUSED_4BIT, 7, 0), 8);
  EXPECT_EQ(qj_rowwise_row_bytes(QJ_FUSED_2BIT, 7, 0), 6);
  EXPECT_EQ(qj_rowwise_row_bytes(QJ_F16, 7, 0), 14);
  EXPECT_EQ(qj_rowwise_row_bytes(QJ_FUSED_2BIT, 0, 0), -1);
  EXPECT_EQ(qj_rowwise_row_bytes(QJ_S8, 8, 0), -1);
}

// Every tier, type, layout, dim and source type gives FBGEMM's bytes; dequantization gives
// FBGEMM's values (fp32, and fp16 as the nearest-even rounding of them).
TEST(RowwiseQuantize, MatchesFbgemmFormulaEveryTier) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    SCOPED_TRACE(qj_isa_name(isa));
    for (qj_dtype t : kTypes) {
      for (int sbf = 0; sbf < 2; ++sbf) {
        const uint32_t flags = sbf ? QJ_ROWWISE_SCALE_BIAS_FIRST : 0;
        for (int64_t dim : kDims) {
          SCOPED_TRACE(std::string(qj_dtype_name(t)) + " dim " + std::to_string(dim) + (sbf ? " sb_first" : ""));
          const int kinds = 6;
          const int64_t rb = qj_rowwise_row_bytes(t, dim, flags);
          ASSERT_GT(rb, 0);
          std::vector<float> src;
          std::vector<uint8_t> want;
          for (int k = 0; k < kinds; ++k) {
            std::vector<float> x = make_row(k, dim, static_cast<uint32_t>(dim * 31 + k));
            src.insert(src.end(), x.begin(), x.end());
            std::vector<uint8_t> r = expected_row(t, x, sbf);
            ASSERT_EQ(static_cast<int64_t>(r.size()), rb);
            want.insert(want.end(), r.begin(), r.end());
          }
          std::vector<uint8_t> got(want.size(), 0xee);
          ASSERT_EQ(qj_quantize_rowwise_ex(t, flags, QJ_F32, src.data(), kinds, dim, got.data(), 0), QJ_OK)
              << qj_last_error();
          for (int k = 0; k < kinds; ++k)
            ASSERT_EQ(hex(&got[k * rb], rb), hex(&want[k * rb], rb)) << "row kind " << k;

          // fp16 source: the same formula applied to the widened values.
          std::vector<uint16_t> src16(src.size());
          std::vector<float> widened(src.size());
          for (size_t i = 0; i < src.size(); ++i) {
            src16[i] = qj::f32_to_f16(src[i]);
            widened[i] = qj::f16_to_f32(src16[i]);
          }
          std::vector<uint8_t> got16(want.size(), 0xee);
          ASSERT_EQ(qj_quantize_rowwise_ex(t, flags, QJ_F16, src16.data(), kinds, dim, got16.data(), 0), QJ_OK)
              << qj_last_error();
          for (int k = 0; k < kinds; ++k) {
            std::vector<float> x(widened.begin() + k * dim, widened.begin() + (k + 1) * dim);
            std::vector<uint8_t> r = expected_row(t, x, sbf);
            ASSERT_EQ(hex(&got16[k * rb], rb), hex(r.data(), rb)) << "fp16 source, row kind " << k;
          }

          // Dequantize, fp32 and fp16.
          std::vector<float> deq(src.size(), -7.0f);
          std::vector<uint16_t> deq16(src.size(), 0xeeee);
          ASSERT_EQ(qj_dequantize_rowwise_ex(t, flags, got.data(), 0, kinds, dim, QJ_F32, deq.data()), QJ_OK);
          ASSERT_EQ(qj_dequantize_rowwise_ex(t, flags, got.data(), 0, kinds, dim, QJ_F16, deq16.data()), QJ_OK);
          for (int k = 0; k < kinds; ++k) {
            std::vector<float> e = expected_dequant(t, &got[k * rb], dim, sbf);
            for (int64_t j = 0; j < dim; ++j) {
              ASSERT_EQ(qj::f32_bits(deq[k * dim + j]), qj::f32_bits(e[j])) << "row " << k << " col " << j;
              ASSERT_EQ(deq16[k * dim + j], qj::f32_to_f16(e[j])) << "fp16 row " << k << " col " << j;
            }
          }
        }
      }
    }
  }
}

TEST(RowwiseQuantize, PlainWrappersAndStrides) {
  const int64_t rows = 5, dim = 37;
  std::vector<float> x = qjt::random_floats(rows * dim, -1, 1, 7);
  const int64_t rb = qj_rowwise_row_bytes(QJ_FUSED_4BIT, dim, 0);
  std::vector<uint8_t> dense(rows * rb), strided(rows * (rb + 13), 0x5a);
  ASSERT_EQ(qj_quantize_rowwise(QJ_FUSED_4BIT, x.data(), rows, dim, dense.data()), QJ_OK);
  ASSERT_EQ(qj_quantize_rowwise_ex(QJ_FUSED_4BIT, 0, QJ_F32, x.data(), rows, dim, strided.data(), rb + 13), QJ_OK);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(hex(&dense[r * rb], rb), hex(&strided[r * (rb + 13)], rb));
    for (int64_t p = rb; p < rb + 13; ++p) EXPECT_EQ(strided[r * (rb + 13) + p], 0x5a) << "padding written";
  }
  std::vector<float> a(rows * dim), b(rows * dim);
  ASSERT_EQ(qj_dequantize_rowwise(QJ_FUSED_4BIT, dense.data(), rows, dim, a.data()), QJ_OK);
  ASSERT_EQ(qj_dequantize_rowwise_ex(QJ_FUSED_4BIT, 0, strided.data(), rb + 13, rows, dim, QJ_F32, b.data()), QJ_OK);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  // Accuracy: 4-bit rows reconstruct within half a step (scale/2) plus fp16 parameter rounding.
  for (int64_t r = 0; r < rows; ++r) {
    float mn = *std::min_element(x.begin() + r * dim, x.begin() + (r + 1) * dim);
    float mx = *std::max_element(x.begin() + r * dim, x.begin() + (r + 1) * dim);
    float step = (mx - mn) / 15;
    for (int64_t j = 0; j < dim; ++j) EXPECT_NEAR(a[r * dim + j], x[r * dim + j], step * 0.5f * 1.01f + 1e-3f);
  }
}

// fp16 rows are widened into one fp32 row buffer: a dim whose buffer cannot be allocated is
// QJ_ERR_OUT_OF_MEMORY with a message, not an escaped std::bad_alloc (the source is never read).
// Needs an allocator that fails a 4 TiB request: not ASan's (it aborts), not vm.overcommit_memory=1.
TEST(RowwiseQuantize, Fp16RowBufferAllocationFailure) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer allocators abort on a 4 TiB request";
#endif
  if (FILE* f = std::fopen("/proc/sys/vm/overcommit_memory", "r")) {
    int mode = 0;
    const bool read = std::fscanf(f, "%d", &mode) == 1;
    std::fclose(f);
    if (read && mode == 1) GTEST_SKIP() << "vm.overcommit_memory=1 grants any allocation";
  }
  const uint16_t src[8] = {};
  uint8_t dst[16] = {};
  const int64_t dim = int64_t(1) << 40;
  EXPECT_EQ(qj_quantize_rowwise_f16(QJ_FUSED_8BIT, src, 1, dim, dst), QJ_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(qj_last_error()).find("dim=1099511627776"), std::string::npos) << qj_last_error();
  for (uint8_t v : dst) EXPECT_EQ(v, 0);
}

TEST(RowwiseQuantize, BadInputLeavesOutputUntouched) {
  const int64_t dim = 20;
  std::vector<float> x = qjt::random_floats(3 * dim, -1, 1, 3);
  std::vector<uint8_t> dst(3 * (dim + 8), 0xab);
  auto untouched = [&] { return std::all_of(dst.begin(), dst.end(), [](uint8_t v) { return v == 0xab; }); };

  x[2 * dim + 5] = std::nanf("");
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_8BIT, x.data(), 3, dim, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("row 2 column 5"), std::string::npos) << qj_last_error();
  EXPECT_TRUE(untouched());
  x[2 * dim + 5] = INFINITY;
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_2BIT, x.data(), 3, dim, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(untouched());
  x[2 * dim + 5] = 0.5f;

  x[dim] = -3e38f;
  x[dim + 1] = 3e38f;
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_8BIT, x.data(), 3, dim, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("row 1"), std::string::npos) << qj_last_error();
  EXPECT_TRUE(untouched());
  x[dim] = -70000.0f;  // min outside fp16
  x[dim + 1] = 0.0f;
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_4BIT, x.data(), 3, dim, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("fp16"), std::string::npos) << qj_last_error();
  EXPECT_TRUE(untouched());
  x[dim] = 0.0f;
  x[dim + 1] = 2e6f;  // scale 2e6/15 outside fp16
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_4BIT, x.data(), 3, dim, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(untouched());
  x[dim + 1] = 0.0f;

  EXPECT_EQ(qj_quantize_rowwise(QJ_S8, x.data(), 3, dim, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("type="), std::string::npos);
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_8BIT, x.data(), -1, dim, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("rows=-1"), std::string::npos);
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_8BIT, x.data(), 3, 0, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("dim=0"), std::string::npos);
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_8BIT, nullptr, 3, dim, dst.data()), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("src is NULL"), std::string::npos) << qj_last_error();
  EXPECT_EQ(qj_dequantize_rowwise(QJ_FUSED_8BIT, dst.data(), 3, dim, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("dst is NULL"), std::string::npos) << qj_last_error();
  EXPECT_EQ(qj_quantize_rowwise_ex(QJ_FUSED_8BIT, 0, QJ_F32, x.data(), 3, dim, dst.data(), dim + 7),
            QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("stride=27"), std::string::npos) << qj_last_error();
  EXPECT_EQ(qj_quantize_rowwise_ex(QJ_FUSED_8BIT, 8, QJ_F32, x.data(), 3, dim, dst.data(), 0), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(qj_quantize_rowwise_ex(QJ_FUSED_8BIT, 0, QJ_BF16, x.data(), 3, dim, dst.data(), 0), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(untouched());
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_8BIT, nullptr, 0, dim, nullptr), QJ_OK);  // no-op
}

}  // namespace
