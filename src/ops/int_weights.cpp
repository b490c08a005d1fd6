// Packing of GEMM weights (S8, S4, U4, F16, BF16) into the panel layouts of int_weights.h, and
// the fp32 -> weight-type quantization / conversion of qj_weights_quantize_pack.
//
// Packers read the source through an accessor (k, n) -> value, so no dense int32 copy of a large
// matrix is ever made (LLM weights are hundreds of MiB).
#include "src/ops/int_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <sys/mman.h>

#include "codegen/gemm_int.h"
#include "src/core/isa.h"
#include "src/core/log.h"
#include "src/core/status.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/ops/mx16_weights.h"
#include "src/ops/mx_weights.h"

namespace qj {

PackLayout weights_layout(qj_isa isa, qj_dtype dtype) {
  switch (dtype) {
    case QJ_S4:
    case QJ_U4: return PackLayout::kNibble;
    case QJ_F16: return PackLayout::kHalf;
    case QJ_BF16: return PackLayout::kBf16Pair;
    case QJ_MXFP4_E2M1: return PackLayout::kMxNibble;
    case QJ_MXFP6_E2M3:
    case QJ_MXINT8: return PackLayout::kMxByte;
    case QJ_MXFP8_E4M3:
    case QJ_MXFP8_E5M2: return PackLayout::kMxFp8;
    case QJ_MXFP6_E3M2:
    case QJ_BDR_MX9:
    case QJ_BDR_MX6:
    case QJ_BDR_MX4: return PackLayout::kMx16;
    default:
      if (isa >= QJ_ISA_AVX512_VNNI) return PackLayout::kQuad8;
      return gemm_int_s8_bytes(isa) ? PackLayout::kPair8 : PackLayout::kPair16;
  }
}

int32_t weights_kg(qj_isa isa, qj_dtype dtype) {
  switch (weights_layout(isa, dtype)) {
    case PackLayout::kQuad8: return 4;
    case PackLayout::kNibble:
    case PackLayout::kMxNibble:
    case PackLayout::kMxByte:
    case PackLayout::kMx16: return 8;
    case PackLayout::kHalf:
    case PackLayout::kMxFp8: return 1;
    default: return 2;
  }
}

int32_t weights_nr(qj_isa isa, int64_t n, qj_dtype dtype) {
  const int lanes = isa >= QJ_ISA_AVX512 ? 16 : 8;
  if (dtype == QJ_S4 || dtype == QJ_U4 || dtype == QJ_MXFP4_E2M1 || dtype == QJ_MXFP6_E2M3 ||
      dtype == QJ_MXINT8) {
    // Two zmm columns leave room for mr = 6 rows of int32 + fp32 group accumulators (VNNI). AVX2
    // (16 registers) fits one ymm per row only.
    if (isa < QJ_ISA_AVX512) return 8;
    return n <= 16 ? 16 : 32;
  }
  if (dtype == QJ_MXFP6_E3M2 || dtype == QJ_BDR_MX9 || dtype == QJ_BDR_MX6 || dtype == QJ_BDR_MX4) {
    // int16 pairs: two zmm of columns (mr up to 6) where N allows: at M = 1 a step then streams
    // twice the bytes per loop iteration and fold (measured 1x4096x4096 E3M2 ~49-74 GOPS against
    // ~45-51 with one zmm on the shared machine; M = 64 the same, ~58, with 12 rows x 1 zmm).
    return isa >= QJ_ISA_AVX512 && n > 16 ? 32 : lanes;
  }
  if (dtype == QJ_F16 || dtype == QJ_BF16 || dtype == QJ_MXFP8_E4M3 || dtype == QJ_MXFP8_E5M2) {
    // Two vectors per row: 14 rows x 2 zmm (or 6 x 2 ymm) accumulators, FBGEMM's shape.
    return n <= lanes ? lanes : 2 * lanes;
  }
  // Wide panels amortize A broadcasts; narrow N (e.g. 156800x16x36) gets narrow panels so no
  // columns are wasted. AVX2 has 16 registers: at most 2 ymm per row of the tile.
  int max_v = isa >= QJ_ISA_AVX512 ? 3 : 2;
  int64_t v = (n + lanes - 1) / lanes;
  if (v > max_v) v = max_v;
  // Four zmm (6 x 64 tiles) where they pad N less than three: N = 128, 256, 512, 1024 fill whole
  // panels (measured 128^3 349 -> 385 GOPS, 16x128x1567 336 -> 368).
  if (isa >= QJ_ISA_AVX512 && n > 3 * lanes) {
    int64_t pad3 = (n + 3 * lanes - 1) / (3 * lanes) * (3 * lanes) - n;
    int64_t pad4 = (n + 4 * lanes - 1) / (4 * lanes) * (4 * lanes) - n;
    if (pad4 < pad3) v = 4;
  }
  return static_cast<int32_t>(v * lanes);
}

size_t PackedWeights::group_block_bytes() const {
  return static_cast<size_t>(group_steps()) * nr * 4 + (gran == QJ_GRAN_GROUP ? nr * 4 : 0) +
         (zp_vec ? nr * 4 : 0);
}

int32_t fp8_byte_pos(int32_t nr, int32_t lanes, int32_t c) {
  if (nr < 2 * lanes) return c;  // one vector: vpmovzxbw keeps the order
  // Pairs of vectors (j, j + 1) come from 2 * lanes bytes: vpunpck{l,h}bw take bytes 0..7 / 8..15
  // of each 128-bit lane, so vector jj of the pair holds bytes lane * 16 + jj * 8 + (0..7).
  const int32_t j = c / lanes, w = c % lanes;
  return (j / 2) * 2 * lanes + (w / 8) * 16 + (j % 2) * 8 + w % 8;
}

size_t PackedWeights::mx_group_bytes(int32_t col_step) const {
  // kMxFp8: 8 (32 k x nr per block)
  const size_t cs = static_cast<size_t>(col_step ? col_step : mx_col_step());
  return static_cast<size_t>(group_steps()) * nr * cs;
}

size_t PackedWeights::mx_panel_bytes(int32_t col_step) const {
  return (static_cast<size_t>((groups() + mx_line_groups() - 1) / mx_line_groups()) * 64 +
          static_cast<size_t>(groups()) * mx_group_bytes(col_step) + 63) / 64 * 64;
}

size_t PackedWeights::mx_group_offset(int64_t g) const {
  return static_cast<size_t>(g / mx_line_groups() + 1) * 64 + static_cast<size_t>(g) * mx_group_bytes();
}

size_t PackedWeights::mx_scale_offset(int64_t g) const {
  const int64_t lg = mx_line_groups(), line = g / lg;
  return static_cast<size_t>(line) * (64 + static_cast<size_t>(lg) * mx_group_bytes()) +
         static_cast<size_t>(g % lg) * nr;
}

size_t PackedWeights::mx_k_offset(int64_t kk) const {
  const int64_t gk = kp / groups(), within = kk % gk;
  const size_t in_group = layout == PackLayout::kMxFp8 ? static_cast<size_t>(within) * nr
                                                        : static_cast<size_t>(within / 8) * nr * mx_col_step();
  return mx_group_offset(kk / gk) + in_group;
}

int32_t PackedWeights::nibble_offset() const {
  switch (dtype) {
    case QJ_S4: return 8;
    case QJ_MXFP4_E2M1: return 12;
    case QJ_MXFP6_E2M3: return 60;
    case QJ_MXINT8: return 128;
    case QJ_BDR_MX4: return 8;  // nibbles q + 8, decoded as is (row sums remove the 8)
    default: return 0;
  }
}

uint8_t PackedWeights::mx_code(int64_t kk, int64_t col) const {
  const int64_t panel = col / nr, c = col % nr;
  const int64_t r = kk % 8;
  const uint8_t* step = packed.data<uint8_t>() + panel * panel_bytes() + mx_k_offset(kk);
  if (layout == PackLayout::kMxNibble) {
    const uint8_t b = step[c * 4 + (r % 4)];
    return r < 4 ? (b & 15) : (b >> 4);
  }
  const int64_t lanes = isa >= QJ_ISA_AVX512 ? 16 : 8;
  if (layout == PackLayout::kMxFp8) return step[fp8_byte_pos(nr, static_cast<int32_t>(lanes), c)];
  const int64_t i = mx_byte_index(r, c);
  return fp6_dense() ? fp6_get(step, i) : step[i];
}

uint8_t PackedWeights::mx_scale_byte(int64_t g, int64_t col) const {
  const int64_t panel = col / nr, c = col % nr;
  return packed.data<uint8_t>()[panel * panel_bytes() + mx_scale_offset(g) + c];
}

size_t PackedWeights::panel_bytes() const {
  switch (layout) {
    case PackLayout::kMxNibble:
    case PackLayout::kMxByte:
    case PackLayout::kMxFp8:
    case PackLayout::kMx16: return mx_panel_bytes();
    case PackLayout::kNibble: return static_cast<size_t>(groups()) * group_block_bytes();
    case PackLayout::kHalf: return static_cast<size_t>(kp) * nr * 2;
    default: return static_cast<size_t>(k_groups() * step_bytes());  // quads, pairs, bf16 pairs
  }
}

int32_t PackedWeights::q(int64_t kk, int64_t col) const {
  if (is_mx16()) return mx16_q(*this, kk, col);
  if (is_mx()) return mx_int_value(dtype, mx_code(kk, col));
  const int64_t panel = col / nr, c = col % nr;
  const uint8_t* base = packed.data<uint8_t>() + panel * panel_bytes();
  if (layout == PackLayout::kNibble) {
    const int64_t gk = kp / groups();
    const int64_t g = kk / gk, s = (kk % gk) / 8, r = kk % 8;
    uint8_t b = base[g * group_block_bytes() + s * nr * 4 + c * 4 + (r % 4)];
    return static_cast<int32_t>(r < 4 ? (b & 15) : (b >> 4)) - nibble_offset();
  }
  if (layout == PackLayout::kPair8) return static_cast<int8_t>(base[(kk / 2) * nr * 2 + c * 2 + kk % 2]);
  const uint8_t* p = base + (kk / kg) * nr * 4 + c * 4;
  if (kg == 4) return static_cast<int8_t>(p[kk % 4]);
  int16_t v;
  std::memcpy(&v, p + (kk % 2) * 2, 2);
  return v;
}

uint16_t PackedWeights::code(int64_t kk, int64_t col) const {
  const int64_t panel = col / nr, c = col % nr;
  const uint8_t* base = packed.data<uint8_t>() + panel * panel_bytes();
  uint16_t v;
  if (layout == PackLayout::kHalf)
    std::memcpy(&v, base + (kk * nr + c) * 2, 2);
  else
    std::memcpy(&v, base + (kk / 2) * nr * 4 + c * 4 + (kk % 2) * 2, 2);
  return v;
}

float PackedWeights::value(int64_t kk, int64_t col) const {
  uint16_t h = code(kk, col);
  return dtype == QJ_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

float PackedWeights::scale(int64_t g, int64_t col) const {
  if (is_mx() || is_mx_fp8()) return mx::e8m0_to_f32(mx_scale_byte(g, col));
  if (gran == QJ_GRAN_TENSOR) return scales[0];
  if (gran == QJ_GRAN_CHANNEL) return scales[col];
  return scales[g * n + col];
}

uint8_t PackedWeights::max_mx_scale_byte() const {
  uint8_t mx = 0;
  if (!is_mx() && !is_mx_fp8()) return 0;
  const size_t pb = panel_bytes();
  for (int64_t p = 0; p < n_panels; ++p) {
    const uint8_t* panel = packed.data<uint8_t>() + p * pb;
    const int64_t live = std::min<int64_t>(nr, n - p * nr);
    for (int64_t g = 0; g < groups(); ++g) {
      const uint8_t* sc = panel + mx_scale_offset(g);
      for (int64_t c = 0; c < live; ++c)
        if (sc[c] != 0xff && sc[c] > mx) mx = sc[c];
    }
  }
  return mx;
}

std::vector<float> PackedWeights::all_scales() const {
  const int64_t gs = groups();
  std::vector<float> out(static_cast<size_t>(gs * n));
  if (is_mx() || is_mx_fp8()) {
    const size_t pb = panel_bytes();
    for (int64_t p = 0; p < n_panels; ++p) {
      const uint8_t* panel = packed.data<uint8_t>() + p * pb;
      const int64_t c0 = p * nr, live = std::min<int64_t>(nr, n - c0);
      for (int64_t g = 0; g < gs; ++g) {
        const uint8_t* sc = panel + mx_scale_offset(g);
        for (int64_t c = 0; c < live; ++c) out[g * n + c0 + c] = mx::e8m0_to_f32(sc[c]);
      }
    }
    return out;
  }
  for (int64_t g = 0; g < gs; ++g)
    for (int64_t c = 0; c < n; ++c)
      out[g * n + c] = gran == QJ_GRAN_TENSOR ? scales[0] : gran == QJ_GRAN_CHANNEL ? scales[c] : scales[g * n + c];
  return out;
}

int32_t PackedWeights::zp(int64_t g, int64_t col) const {
  if (zero_points.empty()) return 0;
  if (gran == QJ_GRAN_TENSOR) return zero_points[0];
  if (gran == QJ_GRAN_CHANNEL) return zero_points[col];
  return zero_points[g * n + col];
}

bool weights_match_isa(const PackedWeights& w, qj_isa isa) {
  // (The 6-bit MX types, E2M3, E3M2 and BDR MX6: the VNNI tier's panels are dense, the AVX-512
  // tier's of the same geometry not.)
  const PackLayout layout = weights_layout(isa, w.dtype);
  return w.layout == layout && w.kg == weights_kg(isa, w.dtype) && w.nr == weights_nr(isa, w.n, w.dtype) &&
         w.fp6_dense() == PackedWeights::fp6_dense_for(isa, layout, w.dtype);
}

namespace {

bool is_float_type(qj_dtype t) { return t == QJ_F16 || t == QJ_BF16; }

void zp_range(qj_dtype t, int* lo, int* hi) {
  *lo = t == QJ_S8 ? -128 : (t == QJ_S4 ? -8 : 0);
  *hi = t == QJ_S8 ? 127 : (t == QJ_S4 ? 7 : 15);
}

}  // namespace

qj_status check_int_weights_desc(const qj_weights_desc* d, bool quantized) {
  if (!d) return fail(QJ_ERR_INVALID_ARGUMENT, "desc is NULL");
  const int32_t dt = raw_enum(d->dtype);
  if (dt >= QJ_MXFP8_E4M3 && dt <= QJ_BDR_MX4 && mx_weights_type(static_cast<qj_dtype>(dt)))
    return check_mx_weights_desc(d, quantized);
  if (dt != QJ_S8 && dt != QJ_S4 && dt != QJ_U4 && dt != QJ_F16 && dt != QJ_BF16) {
    if (dt >= QJ_MXFP8_E4M3 && dt <= QJ_BDR_MX4)
      return fail(QJ_ERR_UNSUPPORTED, "desc->dtype=%s weights are not implemented yet",
                  qj_dtype_name(static_cast<qj_dtype>(dt)));
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->dtype=%d is not a weight type", dt);
  }
  const int32_t layout = raw_enum(d->layout), gran = raw_enum(d->granularity);
  if (d->k <= 0 || d->k > (int64_t(1) << 31))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->k=%lld must be in [1, 2^31]", (long long)d->k);
  if (d->n <= 0 || d->n > (int64_t(1) << 31))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->n=%lld must be in [1, 2^31]", (long long)d->n);
  if (d->k * d->n > (int64_t(1) << 40))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->k*desc->n=%lld is too large", (long long)(d->k * d->n));
  if (layout != QJ_LAYOUT_KN && layout != QJ_LAYOUT_NK)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->layout=%d is not a qj_layout", layout);
  if (is_float_type(d->dtype)) {
    // Float weights carry no quantization parameters; granularity and group_size are ignored.
    if (d->scales || d->zero_points)
      return fail(QJ_ERR_INVALID_ARGUMENT, "desc->scales and desc->zero_points must be NULL for %s weights",
                  qj_dtype_name(d->dtype));
    return QJ_OK;
  }
  if (gran != QJ_GRAN_TENSOR && gran != QJ_GRAN_CHANNEL && gran != QJ_GRAN_GROUP)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->granularity=%d is not tensor, channel or group", gran);
  if (d->granularity == QJ_GRAN_GROUP) {
    if (d->group_size <= 0 || d->k % d->group_size != 0)
      return fail(QJ_ERR_INVALID_ARGUMENT, "desc->group_size=%lld does not divide k=%lld",
                  (long long)d->group_size, (long long)d->k);
    const int mult = d->dtype == QJ_S8 ? 4 : 8;  // a group is whole packed K steps
    if (d->group_size % mult != 0 && d->group_size != d->k)
      return fail(QJ_ERR_UNSUPPORTED, "desc->group_size=%lld: %s groups must be a multiple of %d",
                  (long long)d->group_size, qj_dtype_name(d->dtype), mult);
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
  if (d->zero_points) {
    int lo, hi;
    zp_range(d->dtype, &lo, &hi);
    for (int64_t i = 0; i < count; ++i)
      if (d->zero_points[i] < lo || d->zero_points[i] > hi)
        return fail(QJ_ERR_INVALID_ARGUMENT, "desc->zero_points[%lld]=%d is outside [%d, %d]",
                    (long long)i, d->zero_points[i], lo, hi);
  }
  return QJ_OK;
}

bool allocate_packed(PackedWeights* w, size_t bytes, bool zero) {
  if (!w->packed.allocate(bytes, false, 64)) return false;
  // Large weights are streamed from L3 / DRAM at M = 1: ask for transparent huge pages (before the
  // first touch) so the hardware prefetchers are not stopped at every 4 KiB page boundary
  // (measured, INT4 GEMV 1 x 11008 x 4096: 34-43 GB/s on 4 KiB pages, 48-57 GB/s with THP; the
  // system's THP policy decides, madvise is only a request).
  if (bytes >= (size_t(4) << 20)) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(w->packed.data());
    const uintptr_t lo = (p + (size_t(2) << 20) - 1) & ~((uintptr_t(2) << 20) - 1);
    const uintptr_t hi = (p + bytes) & ~((uintptr_t(2) << 20) - 1);
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
  }
  std::memset(w->packed.data<uint8_t>() + bytes, 0, 64);  // the over-read tail, never used
  if (zero) std::memset(w->packed.data(), 0, bytes);
  return true;
}

void set_weights_geometry(PackedWeights* w, qj_isa isa) {
  w->isa = isa;
  w->layout = weights_layout(isa, w->dtype);
  w->kg = weights_kg(isa, w->dtype);
  w->nr = weights_nr(isa, w->n, w->dtype);
  w->kp = (w->k + w->kg - 1) / w->kg * w->kg;
  w->n_panels = (w->n + w->nr - 1) / w->nr;
  w->zp_vec = w->is_int4() && !w->zero_points.empty() && w->gran != QJ_GRAN_TENSOR;
}

namespace {

qj_status allocate(PackedWeights* w) {
  const size_t bytes = static_cast<size_t>(w->n_panels) * w->panel_bytes();
  if (!allocate_packed(w, bytes, true))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of packed weights", bytes);
  return QJ_OK;
}

// Packs integer weights q(k, n) (get(kk, col) -> int32) into w's layout for `isa`; w holds the
// type, shape and quantization parameters already.
template <class Get>
qj_status pack_int(PackedWeights* w, qj_isa isa, const Get& get) {
  set_weights_geometry(w, isa);
  QJ_TRY(allocate(w));
  uint8_t* base = w->packed.data<uint8_t>();
  const int64_t n = w->n, k = w->k, nr = w->nr;
  const int64_t groups = w->groups(), gk = k / groups;
  if (w->layout == PackLayout::kNibble) {
    const int32_t off = w->nibble_offset();
    const int64_t gsteps = w->group_steps(), gkp = gsteps * 8;
    for (int64_t p = 0; p < w->n_panels; ++p) {
      const int64_t c0 = p * nr, live = std::min<int64_t>(nr, n - c0);
      for (int64_t g = 0; g < groups; ++g) {
        uint8_t* blk = base + p * w->panel_bytes() + g * w->group_block_bytes();
        for (int64_t s = 0; s < gsteps; ++s)
          for (int r = 0; r < 8; ++r) {
            const int64_t kk = g * gkp + s * 8 + r;
            if (kk >= k) continue;  // padding stays u = 0
            uint8_t* row = blk + s * nr * 4 + (r % 4);
            const int shift = r < 4 ? 0 : 4;
            for (int64_t c = 0; c < live; ++c)
              row[c * 4] |= static_cast<uint8_t>(((get(kk, c0 + c) + off) & 15) << shift);
          }
        uint8_t* params = blk + gsteps * nr * 4;
        if (w->gran == QJ_GRAN_GROUP) {
          float* sc = reinterpret_cast<float*>(params);
          for (int64_t c = 0; c < live; ++c) sc[c] = w->scale(g, c0 + c);
          params += nr * 4;
        }
        if (w->zp_vec) {
          int32_t* z = reinterpret_cast<int32_t*>(params);
          for (int64_t c = 0; c < live; ++c) z[c] = w->zp(g, c0 + c) + off;
        }
      }
    }
  } else {
    for (int64_t p = 0; p < w->n_panels; ++p) {
      uint8_t* panel = base + p * w->panel_bytes();
      for (int64_t kk = 0; kk < k; ++kk) {
        int64_t g = kk / w->kg, r = kk % w->kg;
        uint8_t* row = panel + g * w->step_bytes();
        for (int64_t c = 0; c < nr && p * nr + c < n; ++c) {
          int32_t v = get(kk, p * nr + c);
          if (w->layout == PackLayout::kPair8) {
            row[c * 2 + r] = static_cast<uint8_t>(static_cast<int8_t>(v));
          } else if (w->kg == 4) {
            row[c * 4 + r] = static_cast<uint8_t>(static_cast<int8_t>(v));
          } else {
            int16_t s = static_cast<int16_t>(v);
            std::memcpy(row + c * 4 + r * 2, &s, 2);
          }
        }
      }
    }
  }
  w->colsum.assign(groups * n, 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t c = 0; c < n; ++c) w->colsum[(kk / gk) * n + c] += get(kk, c);
  return QJ_OK;
}

// Packs fp16 / bf16 codes (get(kk, col) -> uint16).
template <class Get>
qj_status pack_half(PackedWeights* w, qj_isa isa, const Get& get) {
  set_weights_geometry(w, isa);
  QJ_TRY(allocate(w));
  uint8_t* base = w->packed.data<uint8_t>();
  const int64_t nr = w->nr;
  for (int64_t p = 0; p < w->n_panels; ++p) {
    uint8_t* panel = base + p * w->panel_bytes();
    const int64_t c0 = p * nr, live = std::min<int64_t>(nr, w->n - c0);
    for (int64_t kk = 0; kk < w->k; ++kk) {
      uint8_t* row = w->layout == PackLayout::kHalf ? panel + kk * nr * 2
                                                    : panel + (kk / 2) * nr * 4 + (kk % 2) * 2;
      const int64_t step = w->layout == PackLayout::kHalf ? 2 : 4;
      for (int64_t c = 0; c < live; ++c) {
        uint16_t h = get(kk, c0 + c);
        std::memcpy(row + c * step, &h, 2);
      }
    }
  }
  return QJ_OK;
}

void copy_params(const qj_weights_desc& d, PackedWeights* w) {
  w->dtype = d.dtype;
  w->k = d.k;
  w->n = d.n;
  if (is_float_type(d.dtype)) {
    w->gran = QJ_GRAN_TENSOR;
    w->group_size = 0;
    return;
  }
  w->gran = d.granularity;
  w->group_size = d.granularity == QJ_GRAN_GROUP ? d.group_size : 0;
  // A single group spanning K is per-channel quantization.
  if (w->gran == QJ_GRAN_GROUP && w->group_size == w->k) {
    w->gran = QJ_GRAN_CHANNEL;
    w->group_size = 0;
  }
}

int64_t param_count(const qj_weights_desc& d) {
  return d.granularity == QJ_GRAN_TENSOR ? 1
         : d.granularity == QJ_GRAN_CHANNEL ? d.n
                                            : (d.k / d.group_size) * d.n;
}

}  // namespace

qj_status pack_int_weights(const qj_weights_desc& d, const void* data, int64_t ld, qj_isa isa,
                           std::shared_ptr<PackedWeights>* out) {
  if (mx_weights_type(d.dtype)) return pack_mx_weights(d, data, ld, isa, out);
  auto w = std::make_shared<PackedWeights>();
  copy_params(d, w.get());
  const bool kn = d.layout == QJ_LAYOUT_KN;
  if (is_float_type(d.dtype)) {
    const uint16_t* src = static_cast<const uint16_t*>(data);
    QJ_TRY(pack_half(w.get(), isa, [&](int64_t kk, int64_t c) { return kn ? src[kk * ld + c] : src[c * ld + kk]; }));
    *out = std::move(w);
    return QJ_OK;
  }
  const int64_t count = param_count(d);
  w->scales.assign(d.scales, d.scales + count);
  if (d.zero_points) {
    bool any = false;
    for (int64_t i = 0; i < count; ++i) any |= d.zero_points[i] != 0;
    if (any) w->zero_points.assign(d.zero_points, d.zero_points + count);
  }
  if (d.dtype == QJ_S8) {
    const int8_t* src = static_cast<const int8_t*>(data);
    QJ_TRY(pack_int(w.get(), isa, [&](int64_t kk, int64_t c) -> int32_t {
      return kn ? src[kk * ld + c] : src[c * ld + kk];
    }));
  } else {
    // Nibbles: element (k, n) is nibble k % 2 of byte (k/2)*ld + n (KN) or n*ld + k/2 (NK).
    const uint8_t* src = static_cast<const uint8_t*>(data);
    const bool s4 = d.dtype == QJ_S4;
    QJ_TRY(pack_int(w.get(), isa, [&](int64_t kk, int64_t c) -> int32_t {
      uint8_t b = kn ? src[(kk >> 1) * ld + c] : src[c * ld + (kk >> 1)];
      int32_t v = (kk & 1) ? (b >> 4) : (b & 15);
      return s4 ? (v ^ 8) - 8 : v;  // sign-extend the nibble
    }));
  }
  *out = std::move(w);
  return QJ_OK;
}

namespace {

// A computed scale (amax / qmax, range / 15) of nonzero weights, kept > 0: tiny subnormal weights
// make it underflow to 0, which would zero them and which no image may hold (deserialization
// rejects scales <= 0). The least positive float then maps every weight to |q| < qmax / 2.
float positive_scale(float s) { return s > 0.0f ? s : std::numeric_limits<float>::denorm_min(); }

// fp32 weights to integer codes, in the source's own memory order (so that the loops run along
// contiguous memory and vectorize; -O3 turns nearbyint into vroundps in the AVX2 copy):
//   stats:  per scale index (tensor: 0; channel / group: (kk / gk) * n + c) the amax (symmetric)
//           or the min / max with 0 (asymmetric), and whether any value is not finite;
//   codes:  q = clamp(nearbyint(x / scale) + zp, lo, hi) as int8, at q[kk * n + c] (KN) or
//           q[c * k + kk] (NK).
// The same operations as the per-element definition (finite values only: the comparisons below
// equal fmin / fmax there), compiled twice and chosen by the CPU (quantization is not a kernel
// tier: the result is the same either way).
struct QuantGeom {
  const float* src;
  int64_t ld, k, n, gk;
  bool nk, tensor;
};

inline __attribute__((always_inline)) bool not_finite(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b & 0x7f800000u) == 0x7f800000u;
}

// Folds x[0, len) into one scale index's statistics: *m0 the amax (sym) or the min, *m1 the max
// (asym). Returns true if a value is not finite.
inline __attribute__((always_inline)) bool fold_span(const float* x, int64_t len, bool sym, float* m0p, float* m1p) {
  bool bad = false;
  float m0 = *m0p, m1 = sym ? 0.0f : *m1p;
  for (int64_t j = 0; j < len; ++j) {
    bad |= not_finite(x[j]);
    if (sym) {
      const float a = std::fabs(x[j]);
      m0 = a > m0 ? a : m0;
    } else {
      m0 = x[j] < m0 ? x[j] : m0;
      m1 = x[j] > m1 ? x[j] : m1;
    }
  }
  *m0p = m0;
  if (!sym) *m1p = m1;
  return bad;
}

// amax (sym) or lo / hi (asym) per scale index; returns true if a value is not finite.
inline __attribute__((always_inline)) bool weight_stats_impl(const QuantGeom& q, bool sym, float* amax,
                                                            float* lo, float* hi) {
  bool bad = false;
  const int64_t k = q.k, n = q.n, gk = q.gk, ld = q.ld;
  if (!q.nk) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const float* r = q.src + kk * ld;
      const int64_t base = q.tensor ? 0 : (kk / gk) * n;
      if (q.tensor) {
        bad |= fold_span(r, n, sym, sym ? &amax[0] : &lo[0], sym ? nullptr : &hi[0]);
        continue;
      }
      for (int64_t c = 0; c < n; ++c) {
        const float x = r[c];
        bad |= not_finite(x);
        if (sym) {
          const float a = std::fabs(x);
          amax[base + c] = a > amax[base + c] ? a : amax[base + c];
        } else {
          lo[base + c] = x < lo[base + c] ? x : lo[base + c];
          hi[base + c] = x > hi[base + c] ? x : hi[base + c];
        }
      }
    }
    return bad;
  }
  for (int64_t c = 0; c < n; ++c) {
    const float* r = q.src + c * ld;
    for (int64_t g0 = 0; g0 < k; g0 += gk) {
      const int64_t i = q.tensor ? 0 : (g0 / gk) * n + c;
      bad |= fold_span(r + g0, gk, sym, sym ? &amax[i] : &lo[i], sym ? nullptr : &hi[i]);
    }
  }
  return bad;
}

inline __attribute__((always_inline)) float quant_code(float x, float scale, float zp, float lo, float hi) {
  float t = std::nearbyint(x / scale) + zp;
  t = t < lo ? lo : t;
  return t > hi ? hi : t;
}

inline __attribute__((always_inline)) void weight_codes_impl(const QuantGeom& q, const float* scales,
                                                            const int32_t* zps, float lo, float hi, int8_t* out) {
  const int64_t k = q.k, n = q.n, gk = q.gk, ld = q.ld;
  if (!q.nk) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const float* r = q.src + kk * ld;
      int8_t* o = out + kk * n;
      if (q.tensor) {
        const float sc = scales[0], z = zps ? static_cast<float>(zps[0]) : 0.0f;
        for (int64_t c = 0; c < n; ++c) o[c] = static_cast<int8_t>(static_cast<int32_t>(quant_code(r[c], sc, z, lo, hi)));
        continue;
      }
      const float* sc = scales + (kk / gk) * n;
      const int32_t* zz = zps ? zps + (kk / gk) * n : nullptr;
      if (zz)
        for (int64_t c = 0; c < n; ++c)
          o[c] = static_cast<int8_t>(static_cast<int32_t>(quant_code(r[c], sc[c], static_cast<float>(zz[c]), lo, hi)));
      else
        for (int64_t c = 0; c < n; ++c)
          o[c] = static_cast<int8_t>(static_cast<int32_t>(quant_code(r[c], sc[c], 0.0f, lo, hi)));
    }
    return;
  }
  for (int64_t c = 0; c < n; ++c) {
    const float* r = q.src + c * ld;
    int8_t* o = out + c * k;
    for (int64_t g0 = 0; g0 < k; g0 += gk) {
      const int64_t i = q.tensor ? 0 : (g0 / gk) * n + c;
      const float sc = scales[i], z = zps ? static_cast<float>(zps[i]) : 0.0f;
      for (int64_t kk = g0; kk < g0 + gk; ++kk)
        o[kk] = static_cast<int8_t>(static_cast<int32_t>(quant_code(r[kk], sc, z, lo, hi)));
    }
  }
}

bool weight_stats_base(const QuantGeom& q, bool sym, float* amax, float* lo, float* hi) {
  return weight_stats_impl(q, sym, amax, lo, hi);
}
__attribute__((target("avx2"))) bool weight_stats_avx2(const QuantGeom& q, bool sym, float* amax, float* lo,
                                                       float* hi) {
  return weight_stats_impl(q, sym, amax, lo, hi);
}
void weight_codes_base(const QuantGeom& q, const float* scales, const int32_t* zps, float lo, float hi, int8_t* out) {
  weight_codes_impl(q, scales, zps, lo, hi, out);
}
__attribute__((target("avx2"))) void weight_codes_avx2(const QuantGeom& q, const float* scales, const int32_t* zps,
                                                       float lo, float hi, int8_t* out) {
  weight_codes_impl(q, scales, zps, lo, hi, out);
}

bool weight_stats(const QuantGeom& q, bool sym, float* amax, float* lo, float* hi) {
  return cpu_isa() >= QJ_ISA_AVX2 ? weight_stats_avx2(q, sym, amax, lo, hi) : weight_stats_base(q, sym, amax, lo, hi);
}
void weight_codes(const QuantGeom& q, const float* scales, const int32_t* zps, float lo, float hi, int8_t* out) {
  if (cpu_isa() >= QJ_ISA_AVX2)
    weight_codes_avx2(q, scales, zps, lo, hi, out);
  else
    weight_codes_base(q, scales, zps, lo, hi, out);
}

}  // namespace

qj_status quantize_int_weights(const qj_weights_desc& d, const float* src, int64_t ld, qj_isa isa,
                               std::shared_ptr<PackedWeights>* out) {
  if (mx_weights_type(d.dtype)) return quantize_mx_weights(d, src, ld, isa, out);
  auto w = std::make_shared<PackedWeights>();
  copy_params(d, w.get());
  const int64_t k = d.k, n = d.n;
  auto at = [&](int64_t kk, int64_t c) { return d.layout == QJ_LAYOUT_KN ? src[kk * ld + c] : src[c * ld + kk]; };

  if (is_float_type(d.dtype)) {
    // Round to nearest even; a finite value whose rounding would overflow to +-inf is clamped to
    // the largest finite value and counted. inf and nan are kept (both formats have them).
    const bool f16 = d.dtype == QJ_F16;
    int64_t clamped = 0;
    QJ_TRY(pack_half(w.get(), isa, [&](int64_t kk, int64_t c) -> uint16_t {
      const float x = at(kk, c);
      uint16_t h = f16 ? f32_to_f16(x) : f32_to_bf16(x);
      const uint16_t mag = h & 0x7fff, inf = f16 ? 0x7c00 : 0x7f80;
      if (mag == inf && std::isfinite(x)) {
        ++clamped;
        h = static_cast<uint16_t>((h & 0x8000) | (f16 ? 0x7bff : 0x7f7f));
      }
      return h;
    }));
    w->clamped = clamped;
    if (clamped)
      QJ_LOG(1, "weights: %lld of %lld fp32 values exceed the %s range and were clamped to +-%g",
             (long long)clamped, (long long)(k * n), qj_dtype_name(d.dtype),
             f16 ? 65504.0 : 3.3895313892515355e38);
    *out = std::move(w);
    return QJ_OK;
  }

  const int64_t groups = w->gran == QJ_GRAN_GROUP ? k / w->group_size : 1;
  const int64_t gk = k / groups;
  const int64_t count = w->gran == QJ_GRAN_TENSOR ? 1 : groups * n;
  const QuantGeom geom{src, ld, k, n, gk, d.layout != QJ_LAYOUT_KN, w->gran == QJ_GRAN_TENSOR};
  const bool sym = d.dtype != QJ_U4;
  std::vector<float> amax(sym ? count : 0, 0.0f), lo(sym ? 0 : count, 0.0f), hi(sym ? 0 : count, 0.0f);
  if (weight_stats(geom, sym, amax.data(), lo.data(), hi.data())) {
    for (int64_t kk = 0; kk < k; ++kk)  // the first one, as the message names it
      for (int64_t c = 0; c < n; ++c)
        if (!std::isfinite(at(kk, c)))
          return fail(QJ_ERR_INVALID_ARGUMENT, "w[k=%lld][n=%lld]=%g is not finite", (long long)kk,
                      (long long)c, (double)at(kk, c));
  }
  w->scales.resize(count);
  std::vector<int8_t> q(static_cast<size_t>(k) * static_cast<size_t>(n));
  // pack_int reads the codes K-row by K-row: N x K codes are transposed first, in 64 x 64 tiles
  // (read column-strided, the nibble packer ran 4x slower than from K x N codes).
  auto pack_codes = [&]() -> qj_status {
    if (geom.nk) {
      std::vector<int8_t> t(q.size());
      for (int64_t c0 = 0; c0 < n; c0 += 64)
        for (int64_t k0 = 0; k0 < k; k0 += 64)
          for (int64_t c = c0; c < std::min(n, c0 + 64); ++c)
            for (int64_t kk = k0; kk < std::min(k, k0 + 64); ++kk) t[kk * n + c] = q[c * k + kk];
      q.swap(t);
    }
    const int8_t* const qd = q.data();
    return pack_int(w.get(), isa, [qd, n](int64_t kk, int64_t c) -> int32_t { return qd[kk * n + c]; });
  };
  if (!sym) {
    // Asymmetric: the range [min(0, lo), max(0, hi)] mapped onto 0..15.
    std::vector<int32_t> zp(count);
    bool any = false;
    for (int64_t i = 0; i < count; ++i) {
      float range = hi[i] - lo[i];
      if (std::isinf(range)) {  // 15 steps cannot span it (finite values up to +-3.4e38)
        char where[64] = "the tensor";
        if (w->gran == QJ_GRAN_CHANNEL)
          std::snprintf(where, sizeof where, "column %lld", (long long)i);
        else if (w->gran == QJ_GRAN_GROUP)
          std::snprintf(where, sizeof where, "column %lld, group %lld", (long long)(i % n), (long long)(i / n));
        return fail(QJ_ERR_INVALID_ARGUMENT, "U4 weights of %s: max - min = %g - (%g) overflows fp32; "
                    "quantize them as S4 or S8", where, (double)hi[i], (double)lo[i]);
      }
      w->scales[i] = range > 0.0f ? positive_scale(range / 15.0f) : 1.0f;
      float z = std::nearbyint(-lo[i] / w->scales[i]);
      zp[i] = static_cast<int32_t>(std::fmin(std::fmax(z, 0.0f), 15.0f));
      any |= zp[i] != 0;
    }
    weight_codes(geom, w->scales.data(), zp.data(), 0.0f, 15.0f, q.data());
    if (any) w->zero_points = zp;
    QJ_TRY(pack_codes());
    *out = std::move(w);
    return QJ_OK;
  }
  // Symmetric: scale = amax / qmax over each channel (tensor: everything; group: the group).
  const float qmax = d.dtype == QJ_S8 ? 127.0f : 7.0f;
  for (int64_t i = 0; i < count; ++i) w->scales[i] = amax[i] > 0.0f ? positive_scale(amax[i] / qmax) : 1.0f;
  weight_codes(geom, w->scales.data(), nullptr, -qmax, qmax, q.data());
  QJ_TRY(pack_codes());
  *out = std::move(w);
  return QJ_OK;
}

qj_status repack_int_weights(const PackedWeights& src, qj_isa isa, std::shared_ptr<PackedWeights>* out) {
  if (src.is_mx() || src.is_mx_fp8()) return repack_mx_weights(src, isa, out);
  auto w = std::make_shared<PackedWeights>();
  w->dtype = src.dtype;
  w->k = src.k;
  w->n = src.n;
  w->gran = src.gran;
  w->group_size = src.group_size;
  w->scales = src.scales;
  w->zero_points = src.zero_points;
  w->clamped = src.clamped;
  if (src.is_float())
    QJ_TRY(pack_half(w.get(), isa, [&](int64_t kk, int64_t c) { return src.code(kk, c); }));
  else
    QJ_TRY(pack_int(w.get(), isa, [&](int64_t kk, int64_t c) { return src.q(kk, c); }));
  *out = std::move(w);
  return QJ_OK;
}

}  // namespace qj
