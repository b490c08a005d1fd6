// The scalar references themselves, on examples small enough to work out by hand. Every kernel
// test compares against these references, so they must be right on their own.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "src/formats/half.h"
#include "src/ref/embedding_bag_ref.h"
#include "src/ref/rowwise_adagrad_ref.h"

namespace {

qj_embedding_bag_desc desc(qj_dtype rt, int64_t dim) {
  qj_embedding_bag_desc d;
  std::memset(&d, 0, sizeof d);
  d.row_type = rt;
  d.dim = dim;
  d.index_bits = 32;
  d.offset_bits = 32;
  d.pooling = QJ_POOL_SUM;
  d.out_type = QJ_F32;
  return d;
}

TEST(EmbeddingRef, FloatRowsSumMeanWeightedGather) {
  // 4 rows of dim 2: row r = (r + 1, 10 * (r + 1)).
  const float table[8] = {1, 10, 2, 20, 3, 30, 4, 40};
  const int32_t idx[5] = {0, 2, 2, 3, 1};
  const int32_t off[4] = {0, 3, 3, 5};  // bags {0,2,2}, {}, {3,1}
  const float w[5] = {1, 0.5f, 2, -1, 4};
  qj::ref::EmbTable t{QJ_F32, 2, false, 0, table, 4};
  float out[6];
  auto d = desc(QJ_F32, 2);
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 3, idx, 5, off, nullptr, out, 0, 3));
  EXPECT_EQ(std::vector<float>(out, out + 6), (std::vector<float>{7, 70, 0, 0, 6, 60}));
  d.pooling = QJ_POOL_MEAN;
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 3, idx, 5, off, nullptr, out, 0, 3));
  EXPECT_FLOAT_EQ(out[0], 7.0f / 3);
  EXPECT_EQ(out[2], 0.0f);  // an empty bag's mean is 0, not NaN
  EXPECT_EQ(out[4], 3.0f);
  d.pooling = QJ_POOL_SUM;
  d.weighted = 1;
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 3, idx, 5, off, w, out, 0, 3));
  EXPECT_EQ(std::vector<float>(out, out + 6), (std::vector<float>{1 + 1.5f + 6, 10 + 15 + 60, 0, 0, -4 + 8, -40 + 80}));
  d.positional = 1;  // weights by position in the bag: bag 0 uses w[0..2], bag 2 uses w[0..1]
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 3, idx, 5, off, w, out, 0, 3));
  EXPECT_EQ(out[4], 4 * 1 + 2 * 0.5f);
  d.positional = 0;
  d.pooling = QJ_POOL_NONE;
  float g[10];
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 0, idx, 5, nullptr, w, g, 0, 5));
  EXPECT_EQ(std::vector<float>(g, g + 4), (std::vector<float>{1, 10, 1.5f, 15}));
  // Lengths instead of offsets, and a slice that starts at bag 2.
  d = desc(QJ_F32, 2);
  d.use_lengths = 1;
  const int32_t len[3] = {3, 0, 2};
  float o2[6] = {-1, -1, -1, -1, -1, -1};
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 3, idx, 5, len, nullptr, o2, 2, 3));
  EXPECT_EQ(std::vector<float>(o2, o2 + 6), (std::vector<float>{-1, -1, -1, -1, 6, 60}));
  // Out of range index.
  const int32_t bad[1] = {4};
  const int32_t off1[2] = {0, 1};
  d.use_lengths = 0;
  EXPECT_FALSE(qj::ref::embedding_bag(d, t, 1, bad, 1, off1, nullptr, out, 0, 1));
}

TEST(EmbeddingRef, Fused8BitRowsAndRemap) {
  // One 8-bit row of dim 3: codes 0, 1, 255, scale 0.5, bias -1 -> values -1, -0.5, 126.5.
  uint8_t row[11] = {0, 1, 255};
  const float sb[2] = {0.5f, -1.0f};
  std::memcpy(row + 3, sb, 8);
  qj::ref::EmbTable t{QJ_FUSED_8BIT, 3, false, 0, row, 1};
  auto d = desc(QJ_FUSED_8BIT, 3);
  const int64_t idx[3] = {0, 0, 1};
  const int64_t off[2] = {0, 2};
  d.index_bits = d.offset_bits = 64;
  float out[3];
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 1, idx, 2, off, nullptr, out, 0, 1));
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{-2, -1, 253}));
  d.out_type = QJ_BF16;
  uint16_t ob[3];
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 1, idx, 2, off, nullptr, ob, 0, 1));
  EXPECT_EQ(qj::bf16_to_f32(ob[2]), 253.0f);
  // Remap: index 1 -> row 0, index 0 -> pruned.
  const int32_t remap[2] = {-1, 0};
  d.out_type = QJ_F32;
  d.remap = remap;
  d.remap_size = 2;
  const int64_t off3[2] = {0, 3};
  d.pooling = QJ_POOL_MEAN;  // the pruned occurrences still count in the length
  ASSERT_TRUE(qj::ref::embedding_bag(d, t, 1, idx, 3, off3, nullptr, out, 0, 1));
  EXPECT_FLOAT_EQ(out[2], 126.5f / 3);
}

TEST(RowwiseAdagradRef, CoalescesDuplicatesAndUpdatesOncePerRow) {
  // Table of 3 rows, dim 2, fp32; bags {1, 1} and {1, 2}; grads g0 = (1, 2), g1 = (3, 4).
  qj_rowwise_adagrad_desc d;
  std::memset(&d, 0, sizeof d);
  d.table_type = QJ_F32;
  d.dim = 2;
  d.index_bits = d.offset_bits = 32;
  d.pooling = QJ_POOL_SUM;
  d.optimizer = QJ_OPT_ROWWISE_ADAGRAD;
  d.learning_rate = 0.5f;
  d.epsilon = 0;
  float w[6] = {0, 0, 0, 0, 0, 0};
  float h[3] = {0, 0, 0};
  const int32_t idx[4] = {1, 1, 1, 2};
  const int32_t off[3] = {0, 2, 4};
  const float g[4] = {1, 2, 3, 4};
  ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(d, w, h, 3, 2, idx, 4, off, nullptr, g, 0));
  // Row 1: G = g0 + g0 + g1 = (5, 8); h = (25 + 64) / 2 = 44.5; w = -0.5 * G / sqrt(44.5).
  EXPECT_FLOAT_EQ(h[1], 44.5f);
  EXPECT_FLOAT_EQ(w[2], -0.5f * 5 / std::sqrt(44.5f));
  EXPECT_FLOAT_EQ(w[3], -0.5f * 8 / std::sqrt(44.5f));
  // Row 2: G = g1 = (3, 4); h = 12.5.
  EXPECT_FLOAT_EQ(h[2], 12.5f);
  EXPECT_EQ(h[0], 0.0f);
  EXPECT_EQ(w[0], 0.0f);
  // Per-occurrence: row 1 is stepped three times, h grows each time.
  float w2[6] = {0, 0, 0, 0, 0, 0}, h2[3] = {0, 0, 0};
  d.mode = QJ_UPDATE_PER_OCCURRENCE_RACY;
  ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(d, w2, h2, 3, 2, idx, 4, off, nullptr, g, 0));
  EXPECT_FLOAT_EQ(h2[1], 2.5f + 2.5f + 12.5f);
  // SGD, mean pooling: G = (g0 + g0) / 2 + g1 / 2 = (2.5, 4).
  float w3[6] = {0, 0, 0, 0, 0, 0};
  d.mode = QJ_UPDATE_COALESCED;
  d.optimizer = QJ_OPT_SGD;
  d.pooling = QJ_POOL_MEAN;
  ASSERT_TRUE(qj::ref::rowwise_adagrad_fused(d, w3, nullptr, 3, 2, idx, 4, off, nullptr, g, 0));
  EXPECT_FLOAT_EQ(w3[2], -0.5f * 2.5f);
  EXPECT_FLOAT_EQ(w3[3], -0.5f * 4.0f);
}

}  // namespace
