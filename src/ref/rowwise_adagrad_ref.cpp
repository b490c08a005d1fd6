// Scalar reference of the fused row-wise AdaGrad / SGD (arithmetic in rowwise_adagrad_ref.h).
#include "src/ref/rowwise_adagrad_ref.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "src/formats/fp16_stochastic.h"
#include "src/formats/half.h"

namespace qj::ref {
namespace {

int64_t load_int(const void* p, int bits, int64_t i) {
  if (bits == 32) return static_cast<const int32_t*>(p)[i];
  return static_cast<const int64_t*>(p)[i];
}

}  // namespace

void rowwise_update_row(const qj_rowwise_adagrad_desc& d, void* table, float* momentum, int64_t row,
                        const float* G, uint64_t seed) {
  float step;
  if (d.optimizer == QJ_OPT_ROWWISE_ADAGRAD) {
    float P[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < d.dim; ++j) P[j % 8] = std::fma(G[j], G[j], P[j % 8]);
    float m = (((P[0] + P[1]) + (P[2] + P[3])) + ((P[4] + P[5]) + (P[6] + P[7]))) /
              static_cast<float>(d.dim);
    float h = momentum[row] + m;
    momentum[row] = h;
    step = d.learning_rate / (std::sqrt(h) + d.epsilon);
  } else {
    step = d.learning_rate;
  }
  if (d.table_type == QJ_F32) {
    float* w = static_cast<float*>(table) + row * d.dim;
    for (int64_t j = 0; j < d.dim; ++j) w[j] = std::fma(-step, G[j], w[j]);
    return;
  }
  uint16_t* w = static_cast<uint16_t*>(table) + row * d.dim;
  const uint32_t key = sr_row_key(seed, static_cast<uint64_t>(row));
  for (int64_t j = 0; j < d.dim; ++j) {
    float v = std::fma(-step, G[j], f16_to_f32(w[j]));
    w[j] = d.stochastic_rounding ? f32_to_f16_stochastic(v, sr_bits(key, static_cast<uint32_t>(j)))
                                 : f32_to_f16(v);
  }
}

bool rowwise_adagrad_fused(const qj_rowwise_adagrad_desc& d, void* table, float* momentum,
                           int64_t num_rows, int64_t num_bags, const void* indices,
                           int64_t num_indices, const void* offsets_or_lengths,
                           const float* weights, const float* grad, uint64_t seed) {
  const int64_t gstride = d.grad_stride ? d.grad_stride : d.dim;
  // Bag, position and factor e of every occurrence.
  std::vector<int64_t> bag_of(static_cast<size_t>(num_indices), -1), pos_of(bag_of.size());
  std::vector<float> e(bag_of.size());
  int64_t start = 0;
  for (int64_t b = 0; b < num_bags; ++b) {
    int64_t end;
    if (d.use_lengths) {
      end = start + load_int(offsets_or_lengths, d.offset_bits, b);
    } else {
      start = load_int(offsets_or_lengths, d.offset_bits, b);
      end = load_int(offsets_or_lengths, d.offset_bits, b + 1);
    }
    if (start < 0 || end < start || end > num_indices) return false;
    const int64_t len = end - start;
    for (int64_t i = start; i < end; ++i) {
      float f = d.weighted ? weights[d.positional ? i - start : i] : 1.0f;
      if (d.pooling == QJ_POOL_MEAN) f = f * (1.0f / static_cast<float>(len));
      bag_of[i] = b;
      pos_of[i] = i - start;
      e[i] = f;
    }
    start = end;
  }
  for (int64_t i = 0; i < num_indices; ++i) {
    int64_t idx = load_int(indices, d.index_bits, i);
    if (idx < 0 || idx >= num_rows) return false;
  }
  std::vector<float> G(static_cast<size_t>(d.dim));

  if (d.mode == QJ_UPDATE_PER_OCCURRENCE_RACY) {
    for (int64_t i = 0; i < num_indices; ++i) {
      if (bag_of[i] < 0) continue;  // not covered by any bag
      const float* g = grad + bag_of[i] * gstride;
      for (int64_t j = 0; j < d.dim; ++j) G[j] = std::fma(e[i], g[j], 0.0f);
      rowwise_update_row(d, table, momentum, load_int(indices, d.index_bits, i), G.data(), seed);
    }
    return true;
  }

  // Coalesced: positions sorted by (index, position).
  std::vector<int64_t> order(static_cast<size_t>(num_indices));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return load_int(indices, d.index_bits, a) < load_int(indices, d.index_bits, b);
  });
  for (size_t k = 0; k < order.size();) {
    const int64_t row = load_int(indices, d.index_bits, order[k]);
    std::fill(G.begin(), G.end(), 0.0f);
    size_t k2 = k;
    for (; k2 < order.size() && load_int(indices, d.index_bits, order[k2]) == row; ++k2) {
      const int64_t i = order[k2];
      if (bag_of[i] < 0) continue;
      const float* g = grad + bag_of[i] * gstride;
      for (int64_t j = 0; j < d.dim; ++j) G[j] = std::fma(e[i], g[j], G[j]);
    }
    rowwise_update_row(d, table, momentum, row, G.data(), seed);
    k = k2;
  }
  return true;
}

}  // namespace qj::ref
