// Scalar reference of embedding-bag (the arithmetic is defined in embedding_bag_ref.h).
#include "src/ref/embedding_bag_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "src/formats/fused_rowwise.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"

namespace qj::ref {
namespace {

int64_t load_int(const void* p, int bits, int64_t i) {
  if (bits == 32) return static_cast<const int32_t*>(p)[i];
  return static_cast<const int64_t*>(p)[i];
}

// Decodes element j of a float row to fp32 exactly.
float float_elem(qj_dtype t, const uint8_t* row, int64_t j) {
  if (t == QJ_F32) {
    float v;
    std::memcpy(&v, row + 4 * j, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, row + 2 * j, 2);
  return t == QJ_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

void store_out(qj_dtype t, void* out, int64_t pos, float v) {
  switch (t) {
    case QJ_F32: static_cast<float*>(out)[pos] = v; break;
    case QJ_F16: static_cast<uint16_t*>(out)[pos] = f32_to_f16(v); break;
    default: static_cast<uint16_t*>(out)[pos] = f32_to_bf16(v); break;
  }
}

struct Rows {
  const qj_embedding_bag_desc& d;
  const EmbTable& t;
  int bits;
  int64_t stride;
  fused::RowLayout L;

  // The table row an index selects: -1 for a pruned row, -2 for out of range.
  int64_t resolve(int64_t idx) const {
    if (d.remap) {
      if (idx < 0 || idx >= d.remap_size) return -2;
      int64_t r = d.remap[idx];
      if (r == -1) return -1;
      return (r < 0 || r >= t.num_rows) ? -2 : r;
    }
    return (idx < 0 || idx >= t.num_rows) ? -2 : idx;
  }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(t.data) + r * stride; }

  // Element j of an MX row, decoded and scaled: value(code) * X.
  float mx_elem(int64_t r, int64_t j) const {
    const uint8_t* p = row(r);
    const int64_t g = j / 32;
    uint8_t code, scale;
    if (d.row_type == QJ_MXFP4_E2M1) {
      const uint8_t b = p[g * 17 + (j % 32) / 2];
      code = (j % 2) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xf);
      scale = p[g * 17 + 16];
    } else {
      code = p[g * 32 + j % 32];
      scale = t.scales[r * ((d.dim + 31) / 32) + g];
    }
    return mx::value_table(d.row_type)[code] * mx::e8m0_to_f32(scale);
  }

  // acc[j] += the row's contribution with weight w (bag pooling; fused rows add their bias to
  // *bsum instead), or acc[j] = it (gather).
  void add(int64_t r, bool weighted, float w, bool gather, float* acc, float* bsum) const {
    const uint8_t* p = row(r);
    if (mx::is_ocp_type(d.row_type)) {
      for (int64_t j = 0; j < d.dim; ++j) {
        float v = mx_elem(r, j);
        if (gather)
          acc[j] = weighted ? w * v : v;
        else
          acc[j] = std::fma(w, v, acc[j]);
      }
      return;
    }
    if (bits == 0) {
      for (int64_t j = 0; j < d.dim; ++j) {
        float x = float_elem(d.row_type, p, j);
        if (gather)
          acc[j] = weighted ? w * x : x;
        else
          acc[j] = std::fma(w, x, acc[j]);
      }
      return;
    }
    float s = fused::row_scale(L, p), b = fused::row_bias(L, p);
    if (weighted) {
      s = w * s;
      b = w * b;
    }
    if (gather) {
      for (int64_t j = 0; j < d.dim; ++j) acc[j] = std::fma(static_cast<float>(fused::code(L, p, j)), s, b);
      return;
    }
    for (int64_t j = 0; j < d.dim; ++j) acc[j] = std::fma(static_cast<float>(fused::code(L, p, j)), s, acc[j]);
    *bsum = *bsum + b;
  }
};

}  // namespace

int64_t emb_row_bytes(qj_dtype row_type, int64_t dim, bool sb_first) {
  switch (row_type) {
    case QJ_F32: return 4 * dim;
    case QJ_F16:
    case QJ_BF16: return 2 * dim;
    case QJ_MXFP4_E2M1: return (dim + 31) / 32 * 17;
    case QJ_MXINT8:
    case QJ_MXFP8_E4M3:
    case QJ_MXFP8_E5M2: return (dim + 31) / 32 * 32;
    default: break;
  }
  int bits = fused::bits_of(row_type);
  return bits ? fused::row_bytes(bits, dim, sb_first) : -1;
}

bool embedding_bag(const qj_embedding_bag_desc& d, const EmbTable& t, int64_t num_bags,
                   const void* indices, int64_t num_indices, const void* offsets_or_lengths,
                   const float* weights, void* out, int64_t bag_begin, int64_t bag_end) {
  const int bits = fused::bits_of(d.row_type);
  const int64_t natural = emb_row_bytes(d.row_type, d.dim, t.sb_first);
  if (natural < 0) return false;
  Rows rows{d, t, bits, t.row_stride ? t.row_stride : natural,
            fused::RowLayout{bits ? bits : 8, d.dim, t.sb_first}};
  const int64_t out_stride = d.out_stride ? d.out_stride : d.dim;
  const bool weighted = d.weighted != 0;
  std::vector<float> acc(static_cast<size_t>(d.dim));

  if (d.pooling == QJ_POOL_NONE) {
    for (int64_t i = bag_begin; i < bag_end; ++i) {
      if (i < 0 || i >= num_indices) return false;
      int64_t r = rows.resolve(load_int(indices, d.index_bits, i));
      if (r == -2) return false;
      std::fill(acc.begin(), acc.end(), 0.0f);
      float unused = 0;
      if (r >= 0) rows.add(r, weighted, weighted ? weights[i] : 1.0f, true, acc.data(), &unused);
      for (int64_t j = 0; j < d.dim; ++j) store_out(d.out_type, out, i * out_stride + j, acc[j]);
    }
    return true;
  }

  // Start of bag_begin: offsets give it directly; lengths are summed from bag 0.
  int64_t start = 0;
  if (d.use_lengths)
    for (int64_t b = 0; b < bag_begin; ++b) start += load_int(offsets_or_lengths, d.offset_bits, b);
  for (int64_t b = bag_begin; b < bag_end; ++b) {
    if (b < 0 || b >= num_bags) return false;
    int64_t end;
    if (d.use_lengths) {
      end = start + load_int(offsets_or_lengths, d.offset_bits, b);
    } else {
      start = load_int(offsets_or_lengths, d.offset_bits, b);
      end = load_int(offsets_or_lengths, d.offset_bits, b + 1);
    }
    if (start < 0 || end < start || end > num_indices) return false;
    std::fill(acc.begin(), acc.end(), 0.0f);
    float bsum = 0.0f;
    for (int64_t i = start; i < end; ++i) {
      int64_t r = rows.resolve(load_int(indices, d.index_bits, i));
      if (r == -2) return false;
      if (r == -1) continue;
      float w = weighted ? weights[d.positional ? i - start : i] : 1.0f;
      rows.add(r, weighted, w, false, acc.data(), &bsum);
    }
    if (bits)
      for (auto& v : acc) v = v + bsum;
    const int64_t len = end - start;
    if (d.pooling == QJ_POOL_MEAN && len > 0) {
      const float inv = 1.0f / static_cast<float>(len);
      for (auto& v : acc) v *= inv;
    }
    for (int64_t j = 0; j < d.dim; ++j) store_out(d.out_type, out, b * out_stride + j, acc[j]);
    start = end;
  }
  return true;
}

}  // namespace qj::ref
