#include "src/ops/int_weights.h"

#include <cmath>
#include <cstring>

#include "src/core/status.h"

namespace qj {

int32_t weights_kg(qj_isa isa) { return isa >= QJ_ISA_AVX512_VNNI ? 4 : 2; }

int32_t weights_nr(qj_isa isa, int64_t n) {
  // Wide panels amortize A broadcasts; narrow N (e.g. 156800x16x36) gets narrow panels so no
  // columns are wasted. AVX2 has 16 registers: at most 2 ymm per row of the tile.
  int lanes = isa >= QJ_ISA_AVX512 ? 16 : 8;
  int max_v = isa >= QJ_ISA_AVX512 ? 3 : 2;
  int64_t v = (n + lanes - 1) / lanes;
  if (v > max_v) v = max_v;
  return static_cast<int32_t>(v * lanes);
}

int32_t PackedWeights::q(int64_t kk, int64_t col) const {
  int64_t panel = col / nr, c = col % nr;
  size_t off = panel * panel_bytes() + (kk / kg) * nr * 4 + c * 4;
  const uint8_t* p = packed.data<uint8_t>() + off;
  if (kg == 4) return static_cast<int8_t>(p[kk % 4]);
  int16_t v;
  std::memcpy(&v, p + (kk % 2) * 2, 2);
  return v;
}

float PackedWeights::scale(int64_t g, int64_t col) const {
  if (gran == QJ_GRAN_TENSOR) return scales[0];
  if (gran == QJ_GRAN_CHANNEL) return scales[col];
  return scales[g * n + col];
}

int32_t PackedWeights::zp(int64_t g, int64_t col) const {
  if (zero_points.empty()) return 0;
  if (gran == QJ_GRAN_TENSOR) return zero_points[0];
  if (gran == QJ_GRAN_CHANNEL) return zero_points[col];
  return zero_points[g * n + col];
}

qj_status check_int_weights_desc(const qj_weights_desc* d, bool quantized) {
  if (!d) return fail(QJ_ERR_INVALID_ARGUMENT, "desc is NULL");
  if (d->dtype != QJ_S8) {
    if (d->dtype == QJ_S4 || d->dtype == QJ_U4 || d->dtype == QJ_F16 || d->dtype == QJ_BF16 ||
        (d->dtype >= QJ_MXFP8_E4M3 && d->dtype <= QJ_BDR_MX4))
      return fail(QJ_ERR_UNSUPPORTED, "desc->dtype=%s weights are not implemented yet",
                  qj_dtype_name(d->dtype));
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->dtype=%d is not a weight type",
                static_cast<int>(d->dtype));
  }
  if (d->k <= 0 || d->k > (int64_t(1) << 31))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->k=%lld must be in [1, 2^31]", (long long)d->k);
  if (d->n <= 0 || d->n > (int64_t(1) << 31))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->n=%lld must be in [1, 2^31]", (long long)d->n);
  if (d->k * d->n > (int64_t(1) << 40))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->k*desc->n=%lld is too large", (long long)(d->k * d->n));
  if (d->layout != QJ_LAYOUT_KN && d->layout != QJ_LAYOUT_NK)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->layout=%d is not a qj_layout", (int)d->layout);
  if (d->granularity != QJ_GRAN_TENSOR && d->granularity != QJ_GRAN_CHANNEL &&
      d->granularity != QJ_GRAN_GROUP)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->granularity=%d is not tensor, channel or group",
                (int)d->granularity);
  if (d->granularity == QJ_GRAN_GROUP) {
    if (d->group_size <= 0 || d->k % d->group_size != 0)
      return fail(QJ_ERR_INVALID_ARGUMENT, "desc->group_size=%lld does not divide k=%lld",
                  (long long)d->group_size, (long long)d->k);
    if (d->group_size % 4 != 0 && d->group_size != d->k)
      return fail(QJ_ERR_UNSUPPORTED, "desc->group_size=%lld: groups must be a multiple of 4",
                  (long long)d->group_size);
  }
  if (!quantized) {
    if (d->scales || d->zero_points)
      return fail(QJ_ERR_INVALID_ARGUMENT,
                  "desc->scales and desc->zero_points must be NULL for quantize_pack (they are computed)");
    return QJ_OK;
  }
  if (!d->scales) return fail(QJ_ERR_INVALID_ARGUMENT, "desc->scales is NULL");
  int64_t count = d->granularity == QJ_GRAN_TENSOR ? 1
                  : d->granularity == QJ_GRAN_CHANNEL ? d->n
                                                      : (d->k / d->group_size) * d->n;
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(d->scales[i]) || !(d->scales[i] > 0.0f))
      return fail(QJ_ERR_INVALID_ARGUMENT, "desc->scales[%lld]=%g must be finite and > 0",
                  (long long)i, (double)d->scales[i]);
  if (d->zero_points)
    for (int64_t i = 0; i < count; ++i)
      if (d->zero_points[i] < -128 || d->zero_points[i] > 127)
        return fail(QJ_ERR_INVALID_ARGUMENT, "desc->zero_points[%lld]=%d is outside [-128, 127]",
                    (long long)i, d->zero_points[i]);
  return QJ_OK;
}

namespace {

// Fills geometry and packs q(k, n) given by a callback-free dense K x N int32 matrix.
qj_status pack_dense(PackedWeights* w, const std::vector<int32_t>& q, qj_isa isa) {
  w->isa = isa;
  w->kg = weights_kg(isa);
  w->nr = weights_nr(isa, w->n);
  w->kp = (w->k + w->kg - 1) / w->kg * w->kg;
  w->n_panels = (w->n + w->nr - 1) / w->nr;
  if (!w->packed.allocate(w->n_panels * w->panel_bytes()))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of packed weights",
                static_cast<size_t>(w->n_panels * w->panel_bytes()));
  uint8_t* base = w->packed.data<uint8_t>();
  const int64_t n = w->n, k = w->k;
  for (int64_t p = 0; p < w->n_panels; ++p) {
    uint8_t* panel = base + p * w->panel_bytes();
    for (int64_t kk = 0; kk < k; ++kk) {
      int64_t g = kk / w->kg, r = kk % w->kg;
      uint8_t* row = panel + g * w->nr * 4;
      for (int64_t c = 0; c < w->nr && p * w->nr + c < n; ++c) {
        int32_t v = q[kk * n + p * w->nr + c];
        if (w->kg == 4) {
          row[c * 4 + r] = static_cast<uint8_t>(static_cast<int8_t>(v));
        } else {
          int16_t s = static_cast<int16_t>(v);
          std::memcpy(row + c * 4 + r * 2, &s, 2);
        }
      }
    }
  }
  int64_t groups = w->groups(), gk = k / groups;
  w->colsum.assign(groups * n, 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) w->colsum[(kk / gk) * n + c] += q[kk * n + c];
  return QJ_OK;
}

void copy_params(const qj_weights_desc& d, PackedWeights* w) {
  w->dtype = d.dtype;
  w->k = d.k;
  w->n = d.n;
  w->gran = d.granularity;
  w->group_size = d.granularity == QJ_GRAN_GROUP ? d.group_size : 0;
  // A single group spanning K is per-channel quantization.
  if (w->gran == QJ_GRAN_GROUP && w->group_size == w->k) {
    w->gran = QJ_GRAN_CHANNEL;
    w->group_size = 0;
  }
}

}  // namespace

qj_status pack_int_weights(const qj_weights_desc& d, const void* data, int64_t ld, qj_isa isa,
                           std::shared_ptr<PackedWeights>* out) {
  auto w = std::make_shared<PackedWeights>();
  copy_params(d, w.get());
  int64_t count = d.granularity == QJ_GRAN_TENSOR ? 1
                  : d.granularity == QJ_GRAN_CHANNEL ? d.n
                                                     : (d.k / d.group_size) * d.n;
  w->scales.assign(d.scales, d.scales + count);
  if (d.zero_points) {
    bool any = false;
    for (int64_t i = 0; i < count; ++i) any |= d.zero_points[i] != 0;
    if (any) w->zero_points.assign(d.zero_points, d.zero_points + count);
  }
  std::vector<int32_t> q(d.k * d.n);
  const int8_t* src = static_cast<const int8_t*>(data);
  for (int64_t kk = 0; kk < d.k; ++kk)
    for (int64_t c = 0; c < d.n; ++c)
      q[kk * d.n + c] = d.layout == QJ_LAYOUT_KN ? src[kk * ld + c] : src[c * ld + kk];
  QJ_TRY(pack_dense(w.get(), q, isa));
  *out = std::move(w);
  return QJ_OK;
}

qj_status quantize_int_weights(const qj_weights_desc& d, const float* src, int64_t ld, qj_isa isa,
                               std::shared_ptr<PackedWeights>* out) {
  auto w = std::make_shared<PackedWeights>();
  copy_params(d, w.get());
  const int64_t k = d.k, n = d.n;
  auto at = [&](int64_t kk, int64_t c) { return d.layout == QJ_LAYOUT_KN ? src[kk * ld + c] : src[c * ld + kk]; };
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c)
      if (!std::isfinite(at(kk, c)))
        return fail(QJ_ERR_INVALID_ARGUMENT, "w[k=%lld][n=%lld]=%g is not finite", (long long)kk,
                    (long long)c, (double)at(kk, c));
  // Symmetric: scale = amax / 127 over each channel (tensor: everything; group: the group).
  int64_t groups = w->gran == QJ_GRAN_GROUP ? k / w->group_size : 1;
  int64_t gk = k / groups;
  int64_t count = w->gran == QJ_GRAN_TENSOR ? 1 : groups * n;
  std::vector<float> amax(count, 0.0f);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) {
      int64_t idx = w->gran == QJ_GRAN_TENSOR ? 0 : (kk / gk) * n + c;
      amax[idx] = std::fmax(amax[idx], std::fabs(at(kk, c)));
    }
  w->scales.resize(count);
  for (int64_t i = 0; i < count; ++i) w->scales[i] = amax[i] > 0.0f ? amax[i] / 127.0f : 1.0f;
  std::vector<int32_t> q(k * n);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) {
      int64_t idx = w->gran == QJ_GRAN_TENSOR ? 0 : (kk / gk) * n + c;
      float t = std::nearbyint(at(kk, c) / w->scales[idx]);
      q[kk * n + c] = static_cast<int32_t>(std::fmin(std::fmax(t, -127.0f), 127.0f));
    }
  QJ_TRY(pack_dense(w.get(), q, isa));
  *out = std::move(w);
  return QJ_OK;
}

qj_status repack_int_weights(const PackedWeights& src, qj_isa isa, std::shared_ptr<PackedWeights>* out) {
  auto w = std::make_shared<PackedWeights>();
  w->dtype = src.dtype;
  w->k = src.k;
  w->n = src.n;
  w->gran = src.gran;
  w->group_size = src.group_size;
  w->scales = src.scales;
  w->zero_points = src.zero_points;
  std::vector<int32_t> q(src.k * src.n);
  for (int64_t kk = 0; kk < src.k; ++kk)
    for (int64_t c = 0; c < src.n; ++c) q[kk * src.n + c] = src.q(kk, c);
  QJ_TRY(pack_dense(w.get(), q, isa));
  *out = std::move(w);
  return QJ_OK;
}

}  // namespace qj
