// MX / BDR conversion driver (see mx_convert.h): picks the best kernel under the ISA cap, runs it
// over the whole blocks and pads the tail block through a small stack buffer, so every path sees
// only whole blocks. The scalar path is the src/formats codec itself.
#include "src/ops/mx_convert.h"

#include <cstring>

#include "src/core/fp_env.h"
#include "src/core/isa.h"
#include "src/core/log.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ops/mx_convert_kernels.h"

namespace qj {
namespace {

float load_value(const void* src, bool bf16, int64_t i) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(src)[i]) : static_cast<const float*>(src)[i];
}
void store_value(void* dst, bool bf16, int64_t i, float v) {
  if (bf16) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
  else static_cast<float*>(dst)[i] = v;
}

// ---- scalar kernels (same signatures as the vector ones) ----

template <qj_dtype T, bool kBf16>
void quantize_scalar(qj_rounding r, const void* src, int64_t nb, uint8_t* elems, uint8_t* scales) {
  const mx::ElemFormat& f = *mx::format(T);
  for (int64_t b = 0; b < nb; ++b) {
    float v[mx::kBlock];
    uint8_t codes[mx::kBlock];
    for (int i = 0; i < mx::kBlock; ++i) v[i] = load_value(src, kBf16, b * mx::kBlock + i);
    scales[b] = mx::quantize_block(f, r, v, mx::kBlock, codes);
    mx::pack_block(f, codes, elems + b * f.block_bytes);
  }
}

template <qj_dtype T, bool kBf16>
void dequantize_scalar(const uint8_t* elems, const uint8_t* scales, int64_t nb, void* dst) {
  const mx::ElemFormat& f = *mx::format(T);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t codes[mx::kBlock];
    float v[mx::kBlock];
    mx::unpack_block(f, elems + b * f.block_bytes, codes);
    mx::dequantize_block(f, codes, scales[b], v);
    for (int i = 0; i < mx::kBlock; ++i) store_value(dst, kBf16, b * mx::kBlock + i, v[i]);
  }
}

template <qj_dtype T, bool kBf16>
void bdr_quantize_scalar(const void* src, int64_t nb, uint8_t* blocks) {
  const bdr::BdrFormat& f = *bdr::format(T);
  for (int64_t b = 0; b < nb; ++b) {
    float v[bdr::kBlock];
    for (int i = 0; i < bdr::kBlock; ++i) v[i] = load_value(src, kBf16, b * bdr::kBlock + i);
    bdr::quantize_block(f, v, bdr::kBlock, blocks + b * f.block_bytes);
  }
}

template <qj_dtype T, bool kBf16>
void bdr_dequantize_scalar(const uint8_t* blocks, int64_t nb, void* dst) {
  const bdr::BdrFormat& f = *bdr::format(T);
  for (int64_t b = 0; b < nb; ++b) {
    float v[bdr::kBlock];
    bdr::dequantize_block(f, blocks + b * f.block_bytes, v);
    for (int i = 0; i < bdr::kBlock; ++i) store_value(dst, kBf16, b * bdr::kBlock + i, v[i]);
  }
}

#define QJ_MX_SCALAR_TABLE(NAME, FN_T, ...)                              \
  FN_T NAME(qj_dtype t, bool bf16) {                                    \
    switch (t) {                                                         \
      __VA_ARGS__                                                        \
      default: return nullptr;                                           \
    }                                                                    \
  }
#define QJ_CASE(FN, T) \
  case T: return bf16 ? &FN<T, true> : &FN<T, false>;

QJ_MX_SCALAR_TABLE(quantize_scalar_fn, mxk::QuantizeFn,
                   QJ_CASE(quantize_scalar, QJ_MXFP8_E4M3) QJ_CASE(quantize_scalar, QJ_MXFP8_E5M2)
                   QJ_CASE(quantize_scalar, QJ_MXFP6_E3M2) QJ_CASE(quantize_scalar, QJ_MXFP6_E2M3)
                   QJ_CASE(quantize_scalar, QJ_MXFP4_E2M1) QJ_CASE(quantize_scalar, QJ_MXINT8))
QJ_MX_SCALAR_TABLE(dequantize_scalar_fn, mxk::DequantizeFn,
                   QJ_CASE(dequantize_scalar, QJ_MXFP8_E4M3) QJ_CASE(dequantize_scalar, QJ_MXFP8_E5M2)
                   QJ_CASE(dequantize_scalar, QJ_MXFP6_E3M2) QJ_CASE(dequantize_scalar, QJ_MXFP6_E2M3)
                   QJ_CASE(dequantize_scalar, QJ_MXFP4_E2M1) QJ_CASE(dequantize_scalar, QJ_MXINT8))
QJ_MX_SCALAR_TABLE(bdr_quantize_scalar_fn, mxk::BdrQuantizeFn,
                   QJ_CASE(bdr_quantize_scalar, QJ_BDR_MX9) QJ_CASE(bdr_quantize_scalar, QJ_BDR_MX6)
                   QJ_CASE(bdr_quantize_scalar, QJ_BDR_MX4))
QJ_MX_SCALAR_TABLE(bdr_dequantize_scalar_fn, mxk::BdrDequantizeFn,
                   QJ_CASE(bdr_dequantize_scalar, QJ_BDR_MX9) QJ_CASE(bdr_dequantize_scalar, QJ_BDR_MX6)
                   QJ_CASE(bdr_dequantize_scalar, QJ_BDR_MX4))
#undef QJ_CASE
#undef QJ_MX_SCALAR_TABLE

// Ordered candidates, best ISA first, scalar last (STYLE.md "dispatch as an ordered list").
template <class Fn>
Fn pick(qj_dtype t, bool bf16, Fn (*avx512)(qj_dtype, bool), Fn (*avx2)(qj_dtype, bool),
        Fn (*scalar)(qj_dtype, bool), const char* what, qj_isa* chosen = nullptr) {
  const qj_isa isa = max_isa();
  if (isa >= QJ_ISA_AVX512 && avx512) {
    if (Fn fn = avx512(t, bf16)) {
      if (chosen) *chosen = QJ_ISA_AVX512;
      return fn;
    }
    QJ_LOG(2, "%s %s: no avx512 kernel, trying the next tier", what, qj_dtype_name(t));
  }
  if (isa >= QJ_ISA_AVX2 && avx2) {
    if (Fn fn = avx2(t, bf16)) {
      if (chosen) *chosen = QJ_ISA_AVX2;
      return fn;
    }
    QJ_LOG(2, "%s %s: no avx2 kernel, using the scalar codec", what, qj_dtype_name(t));
  }
  if (chosen) *chosen = QJ_ISA_SCALAR;
  return scalar(t, bf16);
}

}  // namespace

void mx_quantize(qj_dtype t, qj_rounding r, qj_dtype src_type, const void* src, int64_t n,
                 uint8_t* elems, uint8_t* scales) {
  const mx::ElemFormat& f = *mx::format(t);
  const bool bf16 = src_type == QJ_BF16;
  const size_t esz = bf16 ? 2 : 4;
  const mxk::QuantizeFn fn = pick(t, bf16, &mxk::quantize_avx512, &mxk::quantize_avx2,
                                  &quantize_scalar_fn, "mx_quantize");
  DefaultFpEnv fp_env;  // the kernels rely on RNE conversions and fp32 subnormals
  const int64_t full = n / mx::kBlock;
  if (full) fn(r, src, full, elems, scales);
  const int64_t rest = n - full * mx::kBlock;
  if (rest) {
    alignas(64) unsigned char pad[mx::kBlock * 4] = {};  // +0.0 in fp32 and bf16
    std::memcpy(pad, static_cast<const unsigned char*>(src) + full * mx::kBlock * esz, rest * esz);
    fn(r, pad, 1, elems + full * f.block_bytes, scales + full);
  }
}

void mx_dequantize(qj_dtype t, const uint8_t* elems, const uint8_t* scales, int64_t n,
                   qj_dtype dst_type, void* dst) {
  const mx::ElemFormat& f = *mx::format(t);
  const bool bf16 = dst_type == QJ_BF16;
  const size_t esz = bf16 ? 2 : 4;
  const mxk::DequantizeFn fn = pick(t, bf16, &mxk::dequantize_avx512, &mxk::dequantize_avx2,
                                    &dequantize_scalar_fn, "mx_dequantize");
  DefaultFpEnv fp_env;  // the kernels rely on RNE conversions and fp32 subnormals
  const int64_t full = n / mx::kBlock;
  if (full) fn(elems, scales, full, dst);
  const int64_t rest = n - full * mx::kBlock;
  if (rest) {
    alignas(64) unsigned char out[mx::kBlock * 4];
    fn(elems + full * f.block_bytes, scales + full, 1, out);
    std::memcpy(static_cast<unsigned char*>(dst) + full * mx::kBlock * esz, out, rest * esz);
  }
}

void bdr_quantize(qj_dtype t, qj_dtype src_type, const void* src, int64_t n, uint8_t* blocks) {
  const bdr::BdrFormat& f = *bdr::format(t);
  const bool bf16 = src_type == QJ_BF16;
  const size_t esz = bf16 ? 2 : 4;
  const mxk::BdrQuantizeFn fn = pick<mxk::BdrQuantizeFn>(t, bf16, &mxk::bdr_quantize_avx512, &mxk::bdr_quantize_avx2,
                                                         &bdr_quantize_scalar_fn, "bdr_quantize");
  DefaultFpEnv fp_env;  // the kernels rely on RNE conversions and fp32 subnormals
  const int64_t full = n / bdr::kBlock;
  if (full) fn(src, full, blocks);
  const int64_t rest = n - full * bdr::kBlock;
  if (rest) {
    alignas(64) unsigned char pad[bdr::kBlock * 4] = {};
    std::memcpy(pad, static_cast<const unsigned char*>(src) + full * bdr::kBlock * esz, rest * esz);
    fn(pad, 1, blocks + full * f.block_bytes);
  }
}

void bdr_dequantize(qj_dtype t, const uint8_t* blocks, int64_t n, qj_dtype dst_type, void* dst) {
  const bdr::BdrFormat& f = *bdr::format(t);
  const bool bf16 = dst_type == QJ_BF16;
  const size_t esz = bf16 ? 2 : 4;
  const mxk::BdrDequantizeFn fn = pick<mxk::BdrDequantizeFn>(
      t, bf16, &mxk::bdr_dequantize_avx512, &mxk::bdr_dequantize_avx2, &bdr_dequantize_scalar_fn, "bdr_dequantize");
  DefaultFpEnv fp_env;  // the kernels rely on RNE conversions and fp32 subnormals
  const int64_t full = n / bdr::kBlock;
  if (full) fn(blocks, full, dst);
  const int64_t rest = n - full * bdr::kBlock;
  if (rest) {
    alignas(64) unsigned char out[bdr::kBlock * 4];
    fn(blocks + full * f.block_bytes, 1, out);
    std::memcpy(static_cast<unsigned char*>(dst) + full * bdr::kBlock * esz, out, rest * esz);
  }
}

void mx_export(qj_mx_layout layout, const uint8_t* elems, const uint8_t* scales, int64_t n,
               uint8_t* dst) {
  for (int64_t b = 0; b < mx::num_blocks(n); ++b) {
    if (layout == QJ_MX_LAYOUT_GGML_MXFP4)
      mx::ggml_block_from_split(elems + 16 * b, scales[b], dst + mx::kGgmlBlockBytes * b);
    else
      mx::fbgemm_group_from_split(elems + 16 * b, scales[b], dst + mx::kFbgemmGroupBytes * b);
  }
}

void mx_import(qj_mx_layout layout, const uint8_t* src, int64_t n, uint8_t* elems, uint8_t* scales) {
  const int64_t nb = mx::num_blocks(n);
  for (int64_t b = 0; b < nb; ++b) {
    if (layout == QJ_MX_LAYOUT_GGML_MXFP4)
      mx::split_from_ggml_block(src + mx::kGgmlBlockBytes * b, elems + 16 * b, scales + b);
    else
      mx::split_from_fbgemm_group(src + mx::kFbgemmGroupBytes * b, elems + 16 * b, scales + b);
  }
  const int64_t rest = n % mx::kBlock;
  if (rest) {  // zero the padding codes of the last block (nibbles rest..31)
    uint8_t* last = elems + 16 * (nb - 1);
    for (int64_t i = rest; i < mx::kBlock; ++i) last[i / 2] &= (i & 1) ? 0x0f : 0xf0;
  }
}

qj_isa mx_convert_isa(qj_dtype t, bool dequantize, bool bf16) {
  qj_isa chosen = QJ_ISA_SCALAR;
  if (mx::is_ocp_type(t)) {
    if (dequantize)
      pick(t, bf16, &mxk::dequantize_avx512, &mxk::dequantize_avx2, &dequantize_scalar_fn, "mx", &chosen);
    else
      pick(t, bf16, &mxk::quantize_avx512, &mxk::quantize_avx2, &quantize_scalar_fn, "mx", &chosen);
  } else if (bdr::is_bdr_type(t)) {
    if (dequantize)
      pick<mxk::BdrDequantizeFn>(t, bf16, &mxk::bdr_dequantize_avx512, &mxk::bdr_dequantize_avx2,
                                 &bdr_dequantize_scalar_fn, "bdr", &chosen);
    else
      pick<mxk::BdrQuantizeFn>(t, bf16, &mxk::bdr_quantize_avx512, &mxk::bdr_quantize_avx2,
                               &bdr_quantize_scalar_fn, "bdr", &chosen);
  }
  return chosen;
}

}  // namespace qj
