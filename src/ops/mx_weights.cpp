// Packing of MX GEMM weights (see mx_weights.h and the kMx* layouts in int_weights.h).
//
// MXFP8 E4M3 NaN codes (S.1111.111): the kernels decode E4M3 through fp16 (sign << 15 |
// (code & 0x7F) << 7 is the value * 2^-8 exactly), which maps the NaN codes to +-1.875 * 2^-8.
// So the packer stores the scale of a (block, column) that holds a NaN code as 0xFF (NaN) instead.
// Equivalent for the GEMM: one NaN weight makes every product a * w with it NaN (0 * NaN and
// Inf * NaN included), so the column's K-sum is NaN in every row of A whatever the other weights
// are; a NaN scale makes the whole block NaN, so the same sums are NaN, and no other column is
// touched. The element codes are kept as given (read back by mx_code).
#include "src/ops/mx_weights.h"

// GCC 12's AVX512-VBMI intrinsic headers trip -Wmaybe-uninitialized on their own "undefined"
// vector temporaries ('__Y') once inlined into fp6_vectors_vbmi; the values are never used.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "codegen/weight_decode.h"
#include "src/core/status.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/ops/mx16_weights.h"
#include "src/ops/mx_convert.h"

namespace qj {

bool mx_weights_type(qj_dtype t) {
  return t == QJ_MXFP4_E2M1 || t == QJ_MXFP6_E2M3 || t == QJ_MXINT8 || mx16_weights_type(t) ||
         mx_fp8_weights_type(t);
}

bool mx_fp8_weights_type(qj_dtype t) { return t == QJ_MXFP8_E4M3 || t == QJ_MXFP8_E5M2; }

int32_t mx_int_value(qj_dtype t, uint8_t code) {
  switch (t) {
    case QJ_MXFP4_E2M1: return mx::fp4_int_table()[code & 15];
    case QJ_MXFP6_E2M3: return mx::e2m3_int_table()[code & 63];
    default: return static_cast<int8_t>(code);
  }
}

int mx_int_shift(qj_dtype t) { return mx16_weights_type(t) ? mx16_int_shift(t) : mx::format(t)->int_shift; }

qj_status check_mx_weights_desc(const qj_weights_desc* d, bool quantized) {
  // OCP types: blocks of 32 with E8M0 scales; the int16-pair types (E3M2, BDR) have their own
  // block (16 for BDR, whose exponents are inside the blocks).
  const qj_dtype t = d->dtype;
  const int blk = mx16_weights_type(t) ? mx16_block(t) : mx::kBlock;
  if (d->k <= 0 || d->k > (int64_t(1) << 31))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->k=%lld must be in [1, 2^31]", (long long)d->k);
  if (d->n <= 0 || d->n > (int64_t(1) << 31))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->n=%lld must be in [1, 2^31]", (long long)d->n);
  if (d->k * d->n > (int64_t(1) << 40))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->k*desc->n=%lld is too large", (long long)(d->k * d->n));
  const int32_t layout = raw_enum(d->layout);
  if (layout != QJ_LAYOUT_KN && layout != QJ_LAYOUT_NK)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->layout=%d is not a qj_layout", layout);
  if (d->k % blk != 0)
    return fail(QJ_ERR_UNSUPPORTED, "desc->k=%lld: %s weights need k to be a multiple of %d (whole blocks)",
                (long long)d->k, qj_dtype_name(t), blk);
  if (d->scales || d->zero_points)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->scales and desc->zero_points must be NULL for %s weights "
                "(the block scales come with the data)", qj_dtype_name(t));
  if (quantized && layout != QJ_LAYOUT_NK)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->layout=QJ_LAYOUT_KN: packed %s weights are given per column "
                "along K (QJ_LAYOUT_NK)", qj_dtype_name(t));
  return QJ_OK;
}

namespace {

// Packs codes code(kk, col) and E8M0 bytes scale(g, col) into w (type and shape set) for isa.
template <class Code, class Scale>
qj_status pack_mx(PackedWeights* w, qj_isa isa, const Code& code, const Scale& scale) {
  w->gran = QJ_GRAN_GROUP;
  w->group_size = mx::kBlock;
  set_weights_geometry(w, isa);
  const size_t bytes = static_cast<size_t>(w->n_panels) * w->panel_bytes();
  if (!allocate_packed(w, bytes, true))  // zeroed; huge pages asked for large weights
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of packed weights", bytes);
  uint8_t* base = w->packed.data<uint8_t>();
  const int64_t n = w->n, k = w->k, nr = w->nr, groups = w->groups();
  const int64_t lanes = isa >= QJ_ISA_AVX512 ? 16 : 8;
  const bool nib = w->layout == PackLayout::kMxNibble;
  const bool fp8 = w->layout == PackLayout::kMxFp8, e4m3 = w->dtype == QJ_MXFP8_E4M3;
  const bool dense = w->fp6_dense();
  for (int64_t p = 0; p < w->n_panels; ++p) {
    uint8_t* panel = base + p * w->panel_bytes();
    const int64_t c0 = p * nr, live = std::min<int64_t>(nr, n - c0);
    for (int64_t c = 0; c < live; ++c) {
      const int64_t pos = fp8 ? fp8_byte_pos(w->nr, static_cast<int32_t>(lanes), static_cast<int32_t>(c)) : 0;
      for (int64_t g = 0; g < groups; ++g) panel[w->mx_scale_offset(g) + c] = scale(g, c0 + c);
      for (int64_t kk = 0; kk < k; ++kk) {
        const uint8_t v = code(kk, c0 + c);
        const int64_t r = kk % 8;
        uint8_t* step = panel + w->mx_k_offset(kk);
        if (fp8) {
          step[pos] = v;
          if (e4m3 && (v & 0x7F) == 0x7F) panel[w->mx_scale_offset(kk / mx::kBlock) + c] = mx::kScaleNaN;
        } else if (nib)
          step[c * 4 + (r % 4)] |= static_cast<uint8_t>((v & 15) << (r < 4 ? 0 : 4));
        else if (dense)
          fp6_put(step, w->mx_byte_index(r, c), v);
        else
          step[w->mx_byte_index(r, c)] = v;
      }
    }
    // Padding columns: code 0 (+0) and scale 2^-127 (finite, so no NaN leaks into padding lanes).
  }
  if (fp8) return QJ_OK;  // float kernels: no integer column sums
  // Column sums of the integer forms per block, column by column (code(kk, c) callers keep a
  // column's codes together) through a table of the 256 code values.
  int32_t ival[256];
  for (int v = 0; v < 256; ++v) ival[v] = mx_int_value(w->dtype, static_cast<uint8_t>(v));
  w->colsum.assign(groups * n, 0);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t g = 0; g < groups; ++g) {
      int32_t sum = 0;
      for (int64_t kk = g * mx::kBlock; kk < (g + 1) * mx::kBlock; ++kk) sum += ival[code(kk, c)];
      w->colsum[g * n + c] = sum;
    }
  return QJ_OK;
}

}  // namespace

qj_status check_mx_split_data(const qj_weights_desc& d, const qj_mx_weights_data& md, int64_t ld,
                              int64_t block_bytes) {
  const int64_t blocks = d.k / mx::kBlock;
  if (!md.scales) return fail(QJ_ERR_INVALID_ARGUMENT, "data->scales is NULL");
  if (ld < blocks * block_bytes)
    return fail(QJ_ERR_INVALID_ARGUMENT, "ld=%lld is smaller than the %lld element bytes of a column",
                (long long)ld, (long long)(blocks * block_bytes));
  if (md.scales_ld < blocks)
    return fail(QJ_ERR_INVALID_ARGUMENT, "data->scales_ld=%lld is smaller than k/32=%lld",
                (long long)md.scales_ld, (long long)blocks);
  const int64_t limit = int64_t(1) << 53;  // the columns' scale rows: n * scales_ld bytes
  if (md.scales_ld > limit / std::max<int64_t>(d.n, 1))
    return fail(QJ_ERR_INVALID_ARGUMENT, "data->scales_ld=%lld with n=%lld exceeds the address space",
                (long long)md.scales_ld, (long long)d.n);
  return QJ_OK;
}

qj_status pack_mx_weights(const qj_weights_desc& d, const void* data, int64_t ld, qj_isa isa,
                          std::shared_ptr<PackedWeights>* out) {
  if (mx16_weights_type(d.dtype)) return pack_mx16_weights(d, data, ld, isa, out);
  const auto* md = static_cast<const qj_mx_weights_data*>(data);
  const mx::ElemFormat& f = *mx::format(d.dtype);
  if (!md->elems) return fail(QJ_ERR_INVALID_ARGUMENT, "data->elems is NULL");
  QJ_TRY(check_mx_split_data(d, *md, ld, f.block_bytes));
  auto w = std::make_shared<PackedWeights>();
  w->dtype = d.dtype;
  w->k = d.k;
  w->n = d.n;
  const uint8_t* el = static_cast<const uint8_t*>(md->elems);
  QJ_TRY(pack_mx(
      w.get(), isa, [&](int64_t kk, int64_t c) { return mx::get_code(f, el + c * ld, kk); },
      [&](int64_t g, int64_t c) { return md->scales[c * md->scales_ld + g]; }));
  *out = std::move(w);
  return QJ_OK;
}

qj_status quantize_mx_weights(const qj_weights_desc& d, const float* src, int64_t ld, qj_isa isa,
                              std::shared_ptr<PackedWeights>* out) {
  if (mx16_weights_type(d.dtype)) return quantize_mx16_weights(d, src, ld, isa, out);
  const mx::ElemFormat& f = *mx::format(d.dtype);
  const int64_t k = d.k, n = d.n, blocks = k / mx::kBlock;
  // Codes one per byte (n x k) and scales (n x blocks): the transient form of the packer's input.
  // Each column through the vectorized row quantizer (mx_quantize, FLOOR: the same bytes as
  // mx::quantize_block), its SPLIT codes then spread to one byte each.
  std::vector<uint8_t> codes(static_cast<size_t>(n) * k), scales(static_cast<size_t>(n) * blocks);
  std::vector<uint8_t> el(static_cast<size_t>(mx::split_elem_bytes(f, k)));
  for_weight_columns(d, src, ld, [&](int64_t c, const float* v) {
    mx_quantize(d.dtype, QJ_ROUND_FLOOR, QJ_F32, v, k, el.data(), &scales[c * blocks]);
    uint8_t* out = &codes[c * k];
    if (f.bits == 8)
      std::memcpy(out, el.data(), static_cast<size_t>(k));
    else if (f.bits == 4)
      for (int64_t i = 0; i < k; ++i) out[i] = (el[i / 2] >> (4 * (i & 1))) & 15;
    else
      for (int64_t i = 0; i < k; ++i) out[i] = mx::get_code(f, el.data(), i);
  });
  auto w = std::make_shared<PackedWeights>();
  w->dtype = d.dtype;
  w->k = k;
  w->n = n;
  QJ_TRY(pack_mx(
      w.get(), isa, [&](int64_t kk, int64_t c) { return codes[c * k + kk]; },
      [&](int64_t g, int64_t c) { return scales[c * blocks + g]; }));
  *out = std::move(w);
  return QJ_OK;
}

namespace {

// One vector: 48 bytes of 64 LSB-first 6-bit codes at src -> 64 code bytes at dst.
void fp6_vector_scalar(const uint8_t* src, uint8_t* dst) {
  for (int i = 0; i < 64; ++i) dst[i] = fp6_get(src, i);
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void fp6_vectors_vbmi(const uint8_t* src, uint8_t* dst,
                                                                              int64_t n) {
  alignas(64) uint8_t idx[64], ctl[64];
  cg::fp6_unpack_tables(true, idx, ctl);  // the kernels' vpermb + vpmultishiftqb form
  const __m512i vi = _mm512_load_si512(idx), vc = _mm512_load_si512(ctl), m = _mm512_set1_epi8(63);
  for (int64_t v = 0; v < n; ++v) {
    const __m512i x = _mm512_maskz_loadu_epi8(0x0000FFFFFFFFFFFFull, src + 48 * v);
    const __m512i y = _mm512_multishift_epi64_epi8(vc, _mm512_permutexvar_epi8(vi, x));
    _mm512_storeu_si512(dst + 64 * v, _mm512_and_si512(y, m));
  }
}

}  // namespace

void fp6_panels_to_bytes(const PackedWeights& w, int64_t p0, int64_t p1, uint8_t* dst, bool vbmi) {
  const int64_t groups = w.groups(), lg = w.mx_line_groups();
  const size_t gb6 = w.mx_group_bytes(), gb8 = w.mx_group_bytes(8), pb8 = w.mx_panel_bytes(8);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* src = w.packed.data<uint8_t>() + p * w.panel_bytes();
    uint8_t* out = dst + (p - p0) * pb8;
    size_t used = 0;
    for (int64_t g0 = 0; g0 < groups; g0 += lg) {  // scale lines: the line, then its groups' steps
      const int64_t ng = std::min(lg, groups - g0), line = g0 / lg;
      const uint8_t* s = src + line * (64 + lg * gb6);
      uint8_t* d = out + line * (64 + lg * gb8);
      std::memcpy(d, s, 64);
      const int64_t vectors = ng * static_cast<int64_t>(gb6) / 48;
      if (vbmi) {
        fp6_vectors_vbmi(s + 64, d + 64, vectors);
      } else {
        for (int64_t v = 0; v < vectors; ++v) fp6_vector_scalar(s + 64 + 48 * v, d + 64 + 64 * v);
      }
      used = static_cast<size_t>(d + 64 + ng * gb8 - out);
    }
    std::memset(out + used, 0, pb8 - used);  // the panel's padding, as packed
  }
}

qj_status repack_mx_weights(const PackedWeights& src, qj_isa isa, std::shared_ptr<PackedWeights>* out) {
  if (src.is_mx16()) return repack_mx16_weights(src, isa, out);
  auto w = std::make_shared<PackedWeights>();
  w->dtype = src.dtype;
  w->k = src.k;
  w->n = src.n;
  QJ_TRY(pack_mx(
      w.get(), isa, [&](int64_t kk, int64_t c) { return src.mx_code(kk, c); },
      [&](int64_t g, int64_t c) { return src.mx_scale_byte(g, c); }));
  *out = std::move(w);
  return QJ_OK;
}

}  // namespace qj
