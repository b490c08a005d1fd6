// Fused-rowwise embedding rows: byte layouts and the scalar encode/decode of one row.
//
// These rows are byte-compatible with FBGEMM and PyTorch (FloatOrHalfToFused8BitRowwiseQuantizedSBFloat,
// FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf and their inverses), so users can load their existing
// tables. Every row carries its own scale and bias; value = q * scale + bias.
//
//   QJ_FUSED_8BIT, scale/bias last (default):  [dim x u8][fp32 scale][fp32 bias]          dim + 8 bytes
//   QJ_FUSED_4BIT, scale/bias last:            [ceil(dim/2) bytes][fp16 scale][fp16 bias] ... + 4 bytes
//   QJ_FUSED_2BIT, scale/bias last:            [ceil(dim/4) bytes][fp16 scale][fp16 bias] ... + 4 bytes
//   scale/bias first (FBGEMM's TBE rows, its scale_bias_last = false), any bit width:
//                                              [fp16 scale][fp16 bias][packed values]
// Packed values: element j sits in byte j / (8/bits) at bit (j % (8/bits)) * bits (low bits first);
// unused high bits of the last byte are written as zero and ignored on read.
//
// Encoding follows FBGEMM's documented reference formulas exactly (so the bytes are identical):
//  8-bit, fp32 scale/bias:  min, max over the row; range = max - min;
//      scale = range / 255; bias = min; inv = 255 / (range + 1e-8f); q = lrint((x - min) * inv).
//  N-bit (and 8-bit with fp16 scale/bias):  min16 = fp16(min) (nearest even), min = float(min16);
//      range = max - min; scale = range == 0 ? 1 : range / (2^bits - 1); scale = float(fp16(scale));
//      if scale == 0: scale = 1; inv = 1 / scale; if inv is inf: scale = inv = 1;
//      q = clamp(lrint((x - min) * inv), 0, 2^bits - 1); stored: fp16(scale), min16.
// lrint rounds half to even (the default rounding mode), as the vector cvtps2dq does.
#pragma once
#include <quantjit/quantjit.h>

#include <cmath>
#include <cstdint>

namespace qj::fused {

// Round to nearest, ties to even (the default rounding mode; cvtps2dq does the same).
inline long lrint_f32(float x) { return std::lrintf(x); }

// Bits per value of a fused type (8, 4, 2), or 0 if `t` is not a fused type.
int bits_of(qj_dtype t);
// Bytes of packed values in a row: ceil(dim * bits / 8).
inline int64_t data_bytes(int bits, int64_t dim) {
  int per_byte = 8 / bits;
  return (dim + per_byte - 1) / per_byte;
}
// Bytes of scale + bias: 8 (two fp32) for 8-bit scale/bias-last rows, otherwise 4 (two fp16).
inline int sb_bytes(int bits, bool sb_first) { return (bits == 8 && !sb_first) ? 8 : 4; }
// Natural (unpadded) row size in bytes.
inline int64_t row_bytes(int bits, int64_t dim, bool sb_first) {
  return data_bytes(bits, dim) + sb_bytes(bits, sb_first);
}
// Byte offset of the packed values and of the scale inside a row.
inline int64_t data_offset(int bits, bool sb_first) { return sb_first ? sb_bytes(bits, true) : 0; }
inline int64_t sb_offset(int bits, int64_t dim, bool sb_first) {
  return sb_first ? 0 : data_bytes(bits, dim);
}

struct RowLayout {
  int bits = 8;
  int64_t dim = 0;
  bool sb_first = false;
  int64_t bytes() const { return row_bytes(bits, dim, sb_first); }
};

// Scale and bias of a row, widened to fp32 exactly.
float row_scale(const RowLayout& L, const uint8_t* row);
float row_bias(const RowLayout& L, const uint8_t* row);
// The integer code of element j.
inline uint32_t code(const RowLayout& L, const uint8_t* row, int64_t j) {
  const uint8_t* d = row + data_offset(L.bits, L.sb_first);
  int per_byte = 8 / L.bits;
  uint32_t b = d[j / per_byte];
  return (b >> ((j % per_byte) * L.bits)) & ((1u << L.bits) - 1u);
}

// Why a row cannot be encoded (kOk if it can). Checked before anything is written.
enum class RowIssue { kOk = 0, kNonFinite, kRangeOverflow, kFp16Overflow };

// min and max of a row as std::min_element / std::max_element give them (the first occurrence of
// the extreme value wins, which fixes the sign of a zero minimum, and so the stored bias bytes).
void row_min_max(const float* x, int64_t dim, float* mn, float* mx);

// Everything the per-element step needs, derived from the row's min and max by the formulas above.
struct QuantParams {
  float minimum = 0;   // subtracted before scaling (fp32 min, or the fp16-rounded min)
  float inv = 1;       // multiplier before rounding
  int32_t qmax = 255;  // clamp bound (the 8-bit fp32 formula cannot leave [0, 255])
  bool clamp = false;  // N-bit formula clamps; the 8-bit fp32 formula does not
  uint8_t sb[8] = {};  // scale and bias bytes as stored (sb_bytes() of them)
};
RowIssue row_params(const RowLayout& L, float mn, float mx, QuantParams* p);

// One element: lrint((x - minimum) * inv), clamped for the N-bit formula.
inline uint32_t quantize_value(const QuantParams& p, float x) {
  long q = lrint_f32((x - p.minimum) * p.inv);
  if (p.clamp) q = q < 0 ? 0 : (q > p.qmax ? p.qmax : q);
  return static_cast<uint32_t>(q) & 0xffu;
}

// Checks one fp32 row; on a problem, *col receives the offending column (or -1 for the range).
RowIssue check_row(const RowLayout& L, const float* x, int64_t* col);
// Encodes one fp32 row (the formulas above). The row must have passed check_row.
void quantize_row(const RowLayout& L, const float* x, uint8_t* row);
// Writes the scale/bias bytes and clears the packed values of a row.
void begin_row(const RowLayout& L, const QuantParams& p, uint8_t* row);
// Encodes elements [j0, j1) into a row prepared by begin_row (j0 at a byte boundary).
void quantize_range(const RowLayout& L, const QuantParams& p, const float* x, int64_t j0,
                    int64_t j1, uint8_t* row);
// Decodes one row: out[j] = q * scale + bias, as a product rounded to fp32 and then a sum rounded to
// fp32 (FBGEMM's Fused*ToFloatOrHalf), not a fused multiply-add.
void dequantize_row(const RowLayout& L, const uint8_t* row, float* out);
inline float dequantize_value(float scale, float bias, uint32_t q) {
  float p = static_cast<float>(q) * scale;  // rounded product,
  return p + bias;                          // then a rounded sum
}

}  // namespace qj::fused
