// Scalar encode/decode of fused-rowwise rows (layouts and formulas in fused_rowwise.h).
#include "src/formats/fused_rowwise.h"

#include <cstring>

#include "src/formats/half.h"

namespace qj::fused {

int bits_of(qj_dtype t) {
  switch (t) {
    case QJ_FUSED_8BIT: return 8;
    case QJ_FUSED_4BIT: return 4;
    case QJ_FUSED_2BIT: return 2;
    default: return 0;
  }
}

namespace {

bool fp32_scale_bias(const RowLayout& L) { return L.bits == 8 && !L.sb_first; }

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

void row_min_max(const float* x, int64_t dim, float* mn, float* mx) {
  if (dim <= 0) {
    *mn = *mx = 0;
    return;
  }
  float lo = x[0], hi = x[0];
  for (int64_t j = 1; j < dim; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *mn = lo;
  *mx = hi;
}

RowIssue row_params(const RowLayout& L, float mn, float mx, QuantParams* p) {
  if (fp32_scale_bias(L)) {
    const float range = mx - mn;
    if (!std::isfinite(range)) return RowIssue::kRangeOverflow;
    const float scale = range / 255.0f;
    p->minimum = mn;
    p->inv = 255.0f / (range + 1e-8f);
    p->qmax = 255;
    p->clamp = false;
    std::memcpy(p->sb, &scale, 4);
    std::memcpy(p->sb + 4, &mn, 4);
    return RowIssue::kOk;
  }
  const uint16_t min16 = f32_to_f16(mn);
  const float minimum = f16_to_f32(min16);
  if (!std::isfinite(minimum)) return RowIssue::kFp16Overflow;
  const float range = mx - minimum;
  float scale = range == 0 ? 1.0f : range / static_cast<float>((1 << L.bits) - 1);
  scale = f16_to_f32(f32_to_f16(scale));
  if (!std::isfinite(scale)) return RowIssue::kFp16Overflow;
  if (scale == 0) scale = 1.0f;
  float inv = 1.0f / scale;
  if (std::isinf(inv)) {
    scale = 1.0f;
    inv = 1.0f;
  }
  const uint16_t scale16 = f32_to_f16(scale);
  p->minimum = minimum;
  p->inv = inv;
  p->qmax = (1 << L.bits) - 1;
  p->clamp = true;
  std::memcpy(p->sb, &scale16, 2);
  std::memcpy(p->sb + 2, &min16, 2);
  return RowIssue::kOk;
}

float row_scale(const RowLayout& L, const uint8_t* row) {
  const uint8_t* sb = row + sb_offset(L.bits, L.dim, L.sb_first);
  return fp32_scale_bias(L) ? load_f32(sb) : f16_to_f32(load_u16(sb));
}

float row_bias(const RowLayout& L, const uint8_t* row) {
  const uint8_t* sb = row + sb_offset(L.bits, L.dim, L.sb_first);
  return fp32_scale_bias(L) ? load_f32(sb + 4) : f16_to_f32(load_u16(sb + 2));
}

RowIssue check_row(const RowLayout& L, const float* x, int64_t* col) {
  *col = -1;
  for (int64_t j = 0; j < L.dim; ++j) {
    if (!std::isfinite(x[j])) {
      *col = j;
      return RowIssue::kNonFinite;
    }
  }
  float mn, mx;
  row_min_max(x, L.dim, &mn, &mx);
  QuantParams p;
  return row_params(L, mn, mx, &p);
}

void begin_row(const RowLayout& L, const QuantParams& p, uint8_t* row) {
  std::memcpy(row + sb_offset(L.bits, L.dim, L.sb_first), p.sb,
              static_cast<size_t>(sb_bytes(L.bits, L.sb_first)));
  std::memset(row + data_offset(L.bits, L.sb_first), 0,
              static_cast<size_t>(data_bytes(L.bits, L.dim)));
}

void quantize_range(const RowLayout& L, const QuantParams& p, const float* x, int64_t j0,
                    int64_t j1, uint8_t* row) {
  uint8_t* data = row + data_offset(L.bits, L.sb_first);
  const int per_byte = 8 / L.bits;
  for (int64_t j = j0; j < j1; ++j)
    data[j / per_byte] |= static_cast<uint8_t>(quantize_value(p, x[j]) << ((j % per_byte) * L.bits));
}

void quantize_row(const RowLayout& L, const float* x, uint8_t* row) {
  float mn, mx;
  row_min_max(x, L.dim, &mn, &mx);
  QuantParams p;
  row_params(L, mn, mx, &p);
  begin_row(L, p, row);
  quantize_range(L, p, x, 0, L.dim, row);
}

void dequantize_row(const RowLayout& L, const uint8_t* row, float* out) {
  const float scale = row_scale(L, row);
  const float bias = row_bias(L, row);
  for (int64_t j = 0; j < L.dim; ++j) out[j] = dequantize_value(scale, bias, code(L, row, j));
}

}  // namespace qj::fused
