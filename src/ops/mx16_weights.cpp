// Packing of the int16-path MX weights (E3M2, BDR MX9 / MX6 / MX4; see mx16_weights.h and the
// kMx16 layout in int_weights.h). The packer reads (integer form q, scale byte) through
// accessors, so packing from the caller's data, quantizing fp32 and repacking for another tier
// share one loop.
#include "src/ops/mx16_weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "src/core/status.h"
#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ops/mx_convert.h"
#include "src/ops/mx_weights.h"

namespace qj {

bool mx16_weights_type(qj_dtype t) {
  return t == QJ_MXFP6_E3M2 || t == QJ_BDR_MX9 || t == QJ_BDR_MX6 || t == QJ_BDR_MX4;
}

int mx16_block(qj_dtype t) { return t == QJ_MXFP6_E3M2 ? mx::kBlock : bdr::kBlock; }

int mx16_int_shift(qj_dtype t) {
  if (t == QJ_MXFP6_E3M2) return mx::format(t)->int_shift;
  return bdr::format(t)->m;
}

namespace {

// E3M2 integer form 16 v -> code (the inverse of mx::e3m2_int_table; 0 -> +0).
struct E3m2Inverse {
  uint8_t code[897];
  E3m2Inverse() {
    std::memset(code, 0, sizeof code);
    const int16_t* t = mx::e3m2_int_table();
    for (int c = 63; c >= 0; --c) code[t[c] + 448] = static_cast<uint8_t>(c);  // +0 wins over -0
  }
};

uint8_t e3m2_code(int32_t q) {
  static const E3m2Inverse inv;
  return inv.code[q + 448];
}

// Byte offset of element (c, r) (column c of the panel, r = K within the 8-K step) in one step,
// and, MX9 only, the byte and bit of its "double" flag. See int_weights.h kMx16.
// Dense panels (fp6_dense: E3M2, MX6 on the VNNI tier): the 6-bit code index `code` from `byte`
// (the column vector's first byte in the step), in the byte layout's order.
struct StepPos {
  int64_t byte, flag_byte;
  int flag_bit;
  int nibble;  // MX4: 0 low, 1 high
  int64_t code;  // dense: code index at `byte`
};

StepPos step_pos(const PackedWeights& w, int64_t c, int r) {
  const int64_t lanes = w.isa >= QJ_ISA_AVX512 ? 16 : 8;
  const int64_t cs = w.mx_col_step();
  const int64_t base = (c / lanes) * cs * lanes, cl = c % lanes;
  StepPos p;
  p.nibble = 0;
  p.code = -1;
  if (w.dtype == QJ_BDR_MX4) {  // dword per column: nibble of (o, e) at bit 16 e + 4 o
    const int o = r / 2, e = r % 2;
    p.byte = base + cl * 4 + 2 * e + o / 2;
    p.nibble = o % 2;
  } else if (w.fp6_dense()) {
    p.byte = base;
    p.code = (r / 2) * 2 * lanes + cl * 2 + r % 2;
  } else {
    p.byte = base + (r / 2) * 2 * lanes + cl * 2 + r % 2;
  }
  const int64_t bit = 2 * cl + r % 2;
  p.flag_byte = base + 8 * lanes + (r / 2) * (lanes / 4) + bit / 8;
  p.flag_bit = static_cast<int>(bit % 8);
  return p;
}

// Packs q(kk, col) (integer forms) and scale(g, col) (E8M0 / BDR exponent bytes, one per group of
// group_size along K) into w (type and shape set) for isa.
template <class Q, class Scale>
qj_status pack_mx16(PackedWeights* w, qj_isa isa, int64_t group_size, const Q& q, const Scale& scale) {
  w->gran = QJ_GRAN_GROUP;
  w->group_size = group_size;
  set_weights_geometry(w, isa);
  const size_t bytes = static_cast<size_t>(w->n_panels) * w->panel_bytes();
  if (!allocate_packed(w, bytes, true))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of packed weights", bytes);
  uint8_t* base = w->packed.data<uint8_t>();
  const int64_t n = w->n, k = w->k, nr = w->nr, groups = w->groups();
  const bool mx9 = w->dtype == QJ_BDR_MX9;
  for (int64_t p = 0; p < w->n_panels; ++p) {
    uint8_t* panel = base + p * w->panel_bytes();
    const int64_t c0 = p * nr, live = std::min<int64_t>(nr, n - c0);
    for (int64_t c = 0; c < live; ++c) {
      for (int64_t kk = 0; kk < k; kk += 2) {
        uint8_t* step = panel + w->mx_k_offset(kk);
        const int32_t q0 = q(kk, c0 + c), q1 = q(kk + 1, c0 + c);
        const int r = static_cast<int>(kk % 8);
        const StepPos p0 = step_pos(*w, c, r), p1 = step_pos(*w, c, r + 1);
        if (w->fp6_dense()) {  // E3M2 code, or MX6 q as a 6-bit two's complement
          const bool e3m2 = w->dtype == QJ_MXFP6_E3M2;
          fp6_put(step + p0.byte, p0.code, e3m2 ? e3m2_code(q0) : static_cast<uint8_t>(q0 & 63));
          fp6_put(step + p1.byte, p1.code, e3m2 ? e3m2_code(q1) : static_cast<uint8_t>(q1 & 63));
        } else if (w->dtype == QJ_MXFP6_E3M2) {
          step[p0.byte] = e3m2_code(q0);
          step[p1.byte] = e3m2_code(q1);
        } else if (mx9) {
          // A pair of even values is stored halved with its double flags set (mu = 0 pairs always
          // are; |q| > 127 only happens there); otherwise as is (|q| <= 127 for mu = 1 pairs).
          const bool dbl = (q0 % 2 == 0) && (q1 % 2 == 0);
          step[p0.byte] = static_cast<uint8_t>(static_cast<int8_t>(dbl ? q0 / 2 : q0));
          step[p1.byte] = static_cast<uint8_t>(static_cast<int8_t>(dbl ? q1 / 2 : q1));
          if (dbl) {
            step[p0.flag_byte] |= static_cast<uint8_t>(1u << p0.flag_bit);
            step[p1.flag_byte] |= static_cast<uint8_t>(1u << p1.flag_bit);
          }
        } else if (w->dtype == QJ_BDR_MX4) {
          step[p0.byte] |= static_cast<uint8_t>((q0 + 8) << (4 * p0.nibble));
          step[p1.byte] |= static_cast<uint8_t>((q1 + 8) << (4 * p1.nibble));
        } else {
          step[p0.byte] = static_cast<uint8_t>(static_cast<int8_t>(q0));
          step[p1.byte] = static_cast<uint8_t>(static_cast<int8_t>(q1));
        }
      }
      for (int64_t g = 0; g < groups; ++g) panel[w->mx_scale_offset(g) + c] = scale(g, c0 + c);
    }
    // Padding columns: q = 0 and scale byte 0 (2^-127, finite: no NaN leaks into padding lanes).
  }
  w->colsum.assign(groups * n, 0);
  const int64_t gk = w->group_size;
  for (int64_t c = 0; c < n; ++c)
    for (int64_t kk = 0; kk < k; ++kk) w->colsum[(kk / gk) * n + c] += q(kk, c);
  return QJ_OK;
}

}  // namespace

int32_t mx16_q(const PackedWeights& w, int64_t kk, int64_t col) {
  const int64_t panel = col / w.nr, c = col % w.nr;
  const uint8_t* step = w.packed.data<uint8_t>() + panel * w.panel_bytes() + w.mx_k_offset(kk);
  const StepPos p = step_pos(w, c, static_cast<int>(kk % 8));
  if (w.fp6_dense()) {
    const uint8_t code = fp6_get(step + p.byte, p.code);
    if (w.dtype == QJ_MXFP6_E3M2) return mx::e3m2_int_table()[code];
    return code >= 32 ? code - 64 : code;  // MX6: sign-extended
  }
  const uint8_t b = step[p.byte];
  if (w.dtype == QJ_MXFP6_E3M2) return mx::e3m2_int_table()[b & 63];
  if (w.dtype == QJ_BDR_MX4) return ((b >> (4 * p.nibble)) & 15) - 8;
  int32_t v = static_cast<int8_t>(b);
  if (w.dtype == QJ_BDR_MX9 && ((step[p.flag_byte] >> p.flag_bit) & 1)) v *= 2;
  return v;
}

qj_status pack_mx16_weights(const qj_weights_desc& d, const void* data, int64_t ld, qj_isa isa,
                            std::shared_ptr<PackedWeights>* out) {
  const auto* md = static_cast<const qj_mx_weights_data*>(data);
  if (!md) return fail(QJ_ERR_INVALID_ARGUMENT, "data is NULL");
  if (!md->elems) return fail(QJ_ERR_INVALID_ARGUMENT, "data->elems is NULL");
  auto w = std::make_shared<PackedWeights>();
  w->dtype = d.dtype;
  w->k = d.k;
  w->n = d.n;
  const uint8_t* el = static_cast<const uint8_t*>(md->elems);
  if (d.dtype == QJ_MXFP6_E3M2) {
    const mx::ElemFormat& f = *mx::format(d.dtype);
    QJ_TRY(check_mx_split_data(d, *md, ld, f.block_bytes));
    const int16_t* iv = mx::e3m2_int_table();
    QJ_TRY(pack_mx16(
        w.get(), isa, mx::kBlock,
        [&](int64_t kk, int64_t c) -> int32_t { return iv[mx::get_code(f, el + c * ld, kk) & 63]; },
        [&](int64_t g, int64_t c) { return md->scales[c * md->scales_ld + g]; }));
    *out = std::move(w);
    return QJ_OK;
  }
  // BDR: column n's blocks at elems + n * ld, self-contained (exponent and microexponents inside).
  const bdr::BdrFormat& f = *bdr::format(d.dtype);
  const int64_t blocks = d.k / bdr::kBlock;
  if (md->scales)
    return fail(QJ_ERR_INVALID_ARGUMENT, "data->scales must be NULL for %s weights (each 16-value block "
                "holds its own exponent)", qj_dtype_name(d.dtype));
  if (ld < blocks * f.block_bytes)
    return fail(QJ_ERR_INVALID_ARGUMENT, "ld=%lld is smaller than the %lld block bytes of a column",
                (long long)ld, (long long)(blocks * f.block_bytes));
  // Unpack every block once (fields, n x blocks), then pack from them.
  std::vector<bdr::Fields> fl(static_cast<size_t>(d.n * blocks));
  for (int64_t c = 0; c < d.n; ++c)
    for (int64_t b = 0; b < blocks; ++b) bdr::unpack(f, el + c * ld + b * f.block_bytes, &fl[c * blocks + b]);
  auto bq = [&](int64_t kk, int64_t c) -> int32_t {
    const bdr::Fields& b = fl[c * blocks + kk / bdr::kBlock];
    const int i = static_cast<int>(kk % bdr::kBlock);
    return bdr::int_value(f, b.code[i]) * (((b.mu >> (i / 2)) & 1) ? 1 : 2);
  };
  QJ_TRY(pack_mx16(w.get(), isa, mx16_block(w->dtype), bq,
                   [&](int64_t g, int64_t c) { return fl[c * blocks + g].e; }));
  *out = std::move(w);
  return QJ_OK;
}

qj_status quantize_mx16_weights(const qj_weights_desc& d, const float* src, int64_t ld, qj_isa isa,
                                std::shared_ptr<PackedWeights>* out) {
  const int64_t k = d.k, n = d.n;
  const int blk = mx16_block(d.dtype), blocks = static_cast<int>(k / blk);
  // Integer forms (n x k, int16) and scale bytes (n x blocks): the transient input of the packer.
  // Each column through the vectorized row quantizers (mx_quantize FLOOR / bdr_quantize: the same
  // bytes as the scalar codecs), then read back per element.
  std::vector<int16_t> q(static_cast<size_t>(n) * k);
  std::vector<uint8_t> sc(static_cast<size_t>(n) * blocks);
  if (d.dtype == QJ_MXFP6_E3M2) {
    const mx::ElemFormat& f = *mx::format(d.dtype);
    const int16_t* iv = mx::e3m2_int_table();
    std::vector<uint8_t> el(static_cast<size_t>(mx::split_elem_bytes(f, k)));
    for_weight_columns(d, src, ld, [&](int64_t c, const float* v) {
      mx_quantize(d.dtype, QJ_ROUND_FLOOR, QJ_F32, v, k, el.data(), &sc[c * blocks]);
      for (int64_t i = 0; i < k; ++i) q[c * k + i] = iv[mx::get_code(f, el.data(), i) & 63];
    });
  } else {
    const bdr::BdrFormat& f = *bdr::format(d.dtype);
    std::vector<uint8_t> bl(static_cast<size_t>(bdr::storage_bytes(f, k)));
    bdr::Fields fl;
    for_weight_columns(d, src, ld, [&](int64_t c, const float* v) {
      bdr_quantize(d.dtype, QJ_F32, v, k, bl.data());
      for (int b = 0; b < blocks; ++b) {
        bdr::unpack(f, bl.data() + b * f.block_bytes, &fl);
        sc[c * blocks + b] = fl.e;
        for (int i = 0; i < 16; ++i)
          q[c * k + b * 16 + i] = static_cast<int16_t>(bdr::int_value(f, fl.code[i]) * (((fl.mu >> (i / 2)) & 1) ? 1 : 2));
      }
    });
  }
  auto w = std::make_shared<PackedWeights>();
  w->dtype = d.dtype;
  w->k = k;
  w->n = n;
  QJ_TRY(pack_mx16(
      w.get(), isa, blk, [&](int64_t kk, int64_t c) -> int32_t { return q[c * k + kk]; },
      [&](int64_t g, int64_t c) { return sc[c * blocks + g]; }));
  *out = std::move(w);
  return QJ_OK;
}

qj_status repack_mx16_weights(const PackedWeights& src, qj_isa isa, std::shared_ptr<PackedWeights>* out) {
  auto w = std::make_shared<PackedWeights>();
  w->dtype = src.dtype;
  w->k = src.k;
  w->n = src.n;
  QJ_TRY(pack_mx16(
      w.get(), isa, src.group_size, [&](int64_t kk, int64_t c) { return mx16_q(src, kk, c); },
      [&](int64_t g, int64_t c) { return src.mx_scale_byte(g, c); }));
  *out = std::move(w);
  return QJ_OK;
}

}  // namespace qj
