// C API: MX (OCP) and BDR conversions and layout import/export. Argument checks and error text
// only; the work is in src/ops/mx_convert. Every check runs before anything is written.
#include <quantjit/quantjit.h>

#include <cinttypes>

#include "src/core/status.h"
#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ops/mx_convert.h"

namespace {

// Far above any real buffer; keeps every byte count below 2^63.
constexpr int64_t kMaxN = int64_t{1} << 56;

const char* layout_name(qj_mx_layout l) {
  switch (l) {
    case QJ_MX_LAYOUT_SPLIT: return "QJ_MX_LAYOUT_SPLIT";
    case QJ_MX_LAYOUT_GGML_MXFP4: return "QJ_MX_LAYOUT_GGML_MXFP4";
    case QJ_MX_LAYOUT_FBGEMM_MX4: return "QJ_MX_LAYOUT_FBGEMM_MX4";
  }
  return "?";
}

bool is_foreign_layout(qj_mx_layout l) {
  return l == QJ_MX_LAYOUT_GGML_MXFP4 || l == QJ_MX_LAYOUT_FBGEMM_MX4;
}

qj_status check_type(const char* fn, qj_dtype t) {
  if (qj::mx::is_ocp_type(t) || qj::bdr::is_bdr_type(t)) return QJ_OK;
  return qj::fail(QJ_ERR_INVALID_ARGUMENT,
                  "%s: mx_type=%d (%s) is not an MX type (QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, "
                  "QJ_MXFP6_E3M2, QJ_MXFP6_E2M3, QJ_MXFP4_E2M1, QJ_MXINT8, QJ_BDR_MX9/MX6/MX4)",
                  fn, static_cast<int>(t), qj_dtype_name(t));
}

qj_status check_n(const char* fn, int64_t n) {
  if (n < 0) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "%s: n=%" PRId64 " is negative", fn, n);
  if (n > kMaxN)
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "%s: n=%" PRId64 " is too large (max 2^56)", fn, n);
  return QJ_OK;
}

qj_status check_ptr(const char* fn, const void* p, const char* name) {
  if (!p) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
  return QJ_OK;
}

qj_status check_float_type(const char* fn, const char* arg, qj_dtype t) {
  if (t == QJ_F32 || t == QJ_BF16) return QJ_OK;
  return qj::fail(QJ_ERR_INVALID_ARGUMENT, "%s: %s=%d (%s) is not QJ_F32 or QJ_BF16", fn, arg,
                  static_cast<int>(t), qj_dtype_name(t));
}

// scales: OCP types need it (for n > 0), BDR types must pass NULL.
qj_status check_scales(const char* fn, qj_dtype t, const void* scales, int64_t n) {
  if (qj::bdr::is_bdr_type(t)) {
    if (scales)
      return qj::fail(QJ_ERR_INVALID_ARGUMENT,
                      "%s: scales must be NULL for BDR type %s (each block holds its exponent)", fn,
                      qj_dtype_name(t));
    return QJ_OK;
  }
  return n ? check_ptr(fn, scales, "scales") : QJ_OK;
}

qj_status quantize_impl(const char* fn, qj_dtype t, qj_rounding r, qj_dtype src_type,
                        const void* src, int64_t n, void* elems, uint8_t* scales) {
  QJ_TRY(check_type(fn, t));
  if (r != QJ_ROUND_FLOOR && r != QJ_ROUND_RCEIL)
    return qj::fail(QJ_ERR_INVALID_ARGUMENT,
                    "%s: r=%d is not a qj_rounding value (QJ_ROUND_FLOOR, QJ_ROUND_RCEIL)", fn,
                    static_cast<int>(r));
  if (qj::bdr::is_bdr_type(t) && r != QJ_ROUND_FLOOR)
    return qj::fail(QJ_ERR_UNSUPPORTED,
                    "%s: r=QJ_ROUND_RCEIL is not defined for BDR type %s (its exponent is the "
                    "block's largest)", fn, qj_dtype_name(t));
  QJ_TRY(check_float_type(fn, "src_type", src_type));
  QJ_TRY(check_n(fn, n));
  QJ_TRY(check_scales(fn, t, scales, n));
  if (n == 0) return QJ_OK;
  QJ_TRY(check_ptr(fn, src, "src"));
  QJ_TRY(check_ptr(fn, elems, "elems"));
  if (qj::bdr::is_bdr_type(t))
    qj::bdr_quantize(t, src_type, src, n, static_cast<uint8_t*>(elems));
  else
    qj::mx_quantize(t, r, src_type, src, n, static_cast<uint8_t*>(elems), scales);
  return QJ_OK;
}

qj_status dequantize_impl(const char* fn, qj_dtype t, const void* elems, const uint8_t* scales,
                          int64_t n, qj_dtype dst_type, void* dst) {
  QJ_TRY(check_type(fn, t));
  QJ_TRY(check_float_type(fn, "dst_type", dst_type));
  QJ_TRY(check_n(fn, n));
  QJ_TRY(check_scales(fn, t, scales, n));
  if (n == 0) return QJ_OK;
  QJ_TRY(check_ptr(fn, elems, "elems"));
  QJ_TRY(check_ptr(fn, dst, "dst"));
  if (qj::bdr::is_bdr_type(t))
    qj::bdr_dequantize(t, static_cast<const uint8_t*>(elems), n, dst_type, dst);
  else
    qj::mx_dequantize(t, static_cast<const uint8_t*>(elems), scales, n, dst_type, dst);
  return QJ_OK;
}

// Layout and type of a foreign-layout call.
qj_status check_foreign(const char* fn, qj_mx_layout layout, qj_dtype t) {
  if (!is_foreign_layout(layout)) {
    if (layout == QJ_MX_LAYOUT_SPLIT)
      return qj::fail(QJ_ERR_INVALID_ARGUMENT,
                      "%s: layout=QJ_MX_LAYOUT_SPLIT: nothing to convert (use GGML_MXFP4 or "
                      "FBGEMM_MX4)", fn);
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "%s: layout=%d is not a qj_mx_layout value", fn,
                    static_cast<int>(layout));
  }
  QJ_TRY(check_type(fn, t));
  if (t != QJ_MXFP4_E2M1)
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "%s: mx_type=%s: layout %s holds QJ_MXFP4_E2M1 only",
                    fn, qj_dtype_name(t), layout_name(layout));
  return QJ_OK;
}

}  // namespace

extern "C" {

qj_status qj_mx_storage_size(qj_mx_layout layout, qj_dtype t, int64_t n, size_t* elem_bytes,
                             size_t* scale_bytes) {
  const char* fn = "qj_mx_storage_size";
  size_t eb, sb = 0;
  if (layout == QJ_MX_LAYOUT_SPLIT) {
    QJ_TRY(check_type(fn, t));
    QJ_TRY(check_n(fn, n));
    if (const qj::bdr::BdrFormat* bf = qj::bdr::format(t)) {
      eb = static_cast<size_t>(qj::bdr::storage_bytes(*bf, n));
    } else {
      eb = static_cast<size_t>(qj::mx::split_elem_bytes(*qj::mx::format(t), n));
      sb = static_cast<size_t>(qj::mx::num_blocks(n));
    }
  } else {
    QJ_TRY(check_foreign(fn, layout, t));
    QJ_TRY(check_n(fn, n));
    eb = static_cast<size_t>(qj::mx::num_blocks(n) * qj::mx::kGgmlBlockBytes);  // both 17 B
  }
  if (elem_bytes) *elem_bytes = eb;
  if (scale_bytes) *scale_bytes = sb;
  return QJ_OK;
}

qj_status qj_mx_quantize(qj_dtype mx_type, qj_rounding r, const float* src, int64_t n, void* elems,
                         uint8_t* scales) {
  return quantize_impl("qj_mx_quantize", mx_type, r, QJ_F32, src, n, elems, scales);
}

qj_status qj_mx_quantize_ex(qj_dtype mx_type, qj_rounding r, qj_dtype src_type, const void* src,
                            int64_t n, void* elems, uint8_t* scales) {
  return quantize_impl("qj_mx_quantize_ex", mx_type, r, src_type, src, n, elems, scales);
}

qj_status qj_mx_dequantize(qj_dtype mx_type, const void* elems, const uint8_t* scales, int64_t n,
                           float* dst) {
  return dequantize_impl("qj_mx_dequantize", mx_type, elems, scales, n, QJ_F32, dst);
}

qj_status qj_mx_dequantize_ex(qj_dtype mx_type, const void* elems, const uint8_t* scales,
                              int64_t n, qj_dtype dst_type, void* dst) {
  return dequantize_impl("qj_mx_dequantize_ex", mx_type, elems, scales, n, dst_type, dst);
}

qj_status qj_mx_export(qj_mx_layout layout, qj_dtype mx_type, const void* elems,
                       const uint8_t* scales, int64_t n, void* dst) {
  const char* fn = "qj_mx_export";
  QJ_TRY(check_foreign(fn, layout, mx_type));
  QJ_TRY(check_n(fn, n));
  if (n == 0) return QJ_OK;
  QJ_TRY(check_ptr(fn, elems, "elems"));
  QJ_TRY(check_ptr(fn, scales, "scales"));
  QJ_TRY(check_ptr(fn, dst, "dst"));
  qj::mx_export(layout, static_cast<const uint8_t*>(elems), scales, n, static_cast<uint8_t*>(dst));
  return QJ_OK;
}

qj_status qj_mx_import(qj_mx_layout layout, qj_dtype mx_type, const void* src, int64_t n,
                       void* elems, uint8_t* scales) {
  const char* fn = "qj_mx_import";
  QJ_TRY(check_foreign(fn, layout, mx_type));
  QJ_TRY(check_n(fn, n));
  if (n == 0) return QJ_OK;
  QJ_TRY(check_ptr(fn, src, "src"));
  QJ_TRY(check_ptr(fn, elems, "elems"));
  QJ_TRY(check_ptr(fn, scales, "scales"));
  qj::mx_import(layout, static_cast<const uint8_t*>(src), n, static_cast<uint8_t*>(elems), scales);
  return QJ_OK;
}

}  // extern "C"
