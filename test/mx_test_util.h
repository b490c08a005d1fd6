// Helpers shared by the MX test files: run the C API conversions, unpack codes, compare floats
// bit for bit (any NaN equals any NaN; +0 and -0 differ unless asked), name types for messages.
#pragma once
#include <quantjit/quantjit.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"

namespace mxt {

inline const std::vector<qj_dtype>& ocp_types() {
  static const std::vector<qj_dtype> v = {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP6_E3M2,
                                          QJ_MXFP6_E2M3, QJ_MXFP4_E2M1, QJ_MXINT8};
  return v;
}
inline const std::vector<qj_dtype>& bdr_types() {
  static const std::vector<qj_dtype> v = {QJ_BDR_MX9, QJ_BDR_MX6, QJ_BDR_MX4};
  return v;
}

struct Mx {
  std::vector<uint8_t> elems, scales;
};

// Quantize fp32 values through the C API; the status goes to *st (callers assert on it).
inline Mx quantize(qj_dtype t, qj_rounding r, const std::vector<float>& v, qj_status* st = nullptr) {
  size_t eb = 0, sb = 0;
  qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, t, static_cast<int64_t>(v.size()), &eb, &sb);
  Mx m;
  m.elems.assign(eb, 0xcd);
  m.scales.assign(sb, 0xcd);
  qj_status s = qj_mx_quantize(t, r, v.data(), static_cast<int64_t>(v.size()), m.elems.data(),
                               sb ? m.scales.data() : nullptr);
  if (st) *st = s;
  return m;
}

inline std::vector<float> dequantize(qj_dtype t, const Mx& m, int64_t n, qj_status* st = nullptr) {
  std::vector<float> out(n);
  qj_status s = qj_mx_dequantize(t, m.elems.data(), m.scales.empty() ? nullptr : m.scales.data(), n,
                                 out.data());
  if (st) *st = s;
  return out;
}

// Codes of a SPLIT element array, one per byte.
inline std::vector<uint8_t> codes(qj_dtype t, const std::vector<uint8_t>& elems, int64_t n) {
  const qj::mx::ElemFormat& f = *qj::mx::format(t);
  std::vector<uint8_t> c(n);
  for (int64_t i = 0; i < n; ++i) c[i] = qj::mx::get_code(f, elems.data(), i);
  return c;
}

inline bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return qj::f32_bits(a) == qj::f32_bits(b);
}

// Index of the first differing value, or -1.
inline int64_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return static_cast<int64_t>(i);
  return -1;
}
inline int64_t first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

inline std::string hex(const std::vector<uint8_t>& v) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%02X", v[i]);
    if (i) s += ' ';
    s += buf;
  }
  return s;
}

inline std::vector<uint8_t> bytes(std::initializer_list<int> l) {
  std::vector<uint8_t> v;
  for (int x : l) v.push_back(static_cast<uint8_t>(x));
  return v;
}

// Pad to a whole 32-element block with +0.0.
inline std::vector<float> block32(std::vector<float> v) {
  v.resize(32, 0.0f);
  return v;
}

}  // namespace mxt
