// C API: embedding-bag plans and runs, fused-rowwise table conversion, row-wise AdaGrad.
// Argument checks and error text only (DESIGN.md layering); the work is in src/ops.
#include <quantjit/quantjit.h>

#include <cstdint>

#include "src/core/status.h"
#include "src/formats/fused_rowwise.h"
#include "src/ops/rowwise_quantize.h"

namespace {

using qj::fail;

bool is_fused(qj_dtype t) { return qj::fused::bits_of(t) != 0; }

// Natural row bytes, or -1 (unknown type, dim < 1, overflow).
int64_t row_bytes(qj_dtype t, int64_t dim, uint32_t flags) {
  if (dim < 1 || dim > (INT64_C(1) << 40)) return -1;
  switch (t) {
    case QJ_F32: return dim * 4;
    case QJ_F16:
    case QJ_BF16: return dim * 2;
    default: break;
  }
  int bits = qj::fused::bits_of(t);
  if (!bits) return -1;
  return qj::fused::row_bytes(bits, dim, (flags & QJ_ROWWISE_SCALE_BIAS_FIRST) != 0);
}

// `quantize` says which side is the source (only for naming pointers in messages).
qj_status check_rowwise(const char* fn, bool quantize, qj_dtype fused_type, uint32_t flags,
                        qj_dtype plain_type, const void* fused, int64_t fused_stride,
                        const void* plain, int64_t rows, int64_t dim, qj::RowwiseConvert* c) {
  if (!is_fused(fused_type))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: type=%d (%s) is not QJ_FUSED_8BIT, QJ_FUSED_4BIT or QJ_FUSED_2BIT",
                fn, static_cast<int>(fused_type), qj_dtype_name(fused_type));
  if (plain_type != QJ_F32 && plain_type != QJ_F16)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: plain type=%d (%s) is not QJ_F32 or QJ_F16", fn,
                static_cast<int>(plain_type), qj_dtype_name(plain_type));
  if (flags & ~QJ_ROWWISE_SCALE_BIAS_FIRST)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: flags=0x%x has unknown bits", fn, flags);
  if (rows < 0) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: rows=%lld is negative", fn, static_cast<long long>(rows));
  if (dim < 1 || dim > (INT64_C(1) << 40))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: dim=%lld is not in [1, 2^40]", fn, static_cast<long long>(dim));
  const int64_t natural = row_bytes(fused_type, dim, flags);
  if (fused_stride != 0 && fused_stride < natural)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: row stride=%lld is smaller than the row (%lld bytes)", fn,
                static_cast<long long>(fused_stride), static_cast<long long>(natural));
  const int64_t stride = fused_stride ? fused_stride : natural;
  if (rows > 0 && (stride > INT64_MAX / rows || dim * 4 > INT64_MAX / rows))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: rows=%lld x dim=%lld overflows", fn,
                static_cast<long long>(rows), static_cast<long long>(dim));
  if (rows > 0 && (!fused || !plain))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                (fused == nullptr) == quantize ? "dst" : "src");
  c->fused_type = fused_type;
  c->sb_first = (flags & QJ_ROWWISE_SCALE_BIAS_FIRST) != 0;
  c->plain_type = plain_type;
  c->rows = rows;
  c->dim = dim;
  c->fused_stride = stride;
  return QJ_OK;
}

}  // namespace

extern "C" {

int64_t qj_rowwise_row_bytes(qj_dtype type, int64_t dim, uint32_t flags) {
  if (flags & ~QJ_ROWWISE_SCALE_BIAS_FIRST) return -1;
  return row_bytes(type, dim, flags);
}

qj_status qj_quantize_rowwise_ex(qj_dtype dst_type, uint32_t flags, qj_dtype src_type, const void* src,
                                 int64_t rows, int64_t dim, void* dst, int64_t dst_stride) {
  qj::RowwiseConvert c;
  QJ_TRY(check_rowwise("qj_quantize_rowwise", true, dst_type, flags, src_type, dst, dst_stride, src, rows, dim, &c));
  if (rows == 0) return QJ_OK;
  return qj::quantize_rowwise(c, src, dst);
}

qj_status qj_dequantize_rowwise_ex(qj_dtype src_type, uint32_t flags, const void* src, int64_t src_stride,
                                   int64_t rows, int64_t dim, qj_dtype dst_type, void* dst) {
  qj::RowwiseConvert c;
  QJ_TRY(check_rowwise("qj_dequantize_rowwise", false, src_type, flags, dst_type, src, src_stride, dst, rows, dim, &c));
  if (rows == 0) return QJ_OK;
  return qj::dequantize_rowwise(c, src, dst);
}

qj_status qj_quantize_rowwise(qj_dtype dst_type, const float* src, int64_t rows, int64_t dim, void* dst) {
  return qj_quantize_rowwise_ex(dst_type, 0, QJ_F32, src, rows, dim, dst, 0);
}

qj_status qj_quantize_rowwise_f16(qj_dtype dst_type, const uint16_t* src, int64_t rows, int64_t dim,
                                  void* dst) {
  return qj_quantize_rowwise_ex(dst_type, 0, QJ_F16, src, rows, dim, dst, 0);
}

qj_status qj_dequantize_rowwise(qj_dtype src_type, const void* src, int64_t rows, int64_t dim, float* dst) {
  return qj_dequantize_rowwise_ex(src_type, 0, src, 0, rows, dim, QJ_F32, dst);
}

qj_status qj_dequantize_rowwise_f16(qj_dtype src_type, const void* src, int64_t rows, int64_t dim,
                                    uint16_t* dst) {
  return qj_dequantize_rowwise_ex(src_type, 0, src, 0, rows, dim, QJ_F16, dst);
}

}  // extern "C"
