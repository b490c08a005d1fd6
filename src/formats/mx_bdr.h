// BDR shared-microexponent formats MX9 / MX6 / MX4 (arXiv:2302.08007), as quantjit defines them
// in MX.md section 6 (normative). Scalar, integer-exact encode/decode and the block byte layout.
//
// A block holds 16 values: an 8-bit shared exponent E (the largest biased fp32 exponent field of
// the block; 0xFF = NaN block), one microexponent bit mu_j per pair {2j, 2j+1} (1 when both values
// of the pair have biased exponent <= E-1), and per element a sign + m-bit magnitude M:
//   v = (-1)^s * M * 2^(E - 127 - mu_j + 1 - m),  M = RNE(|V| / step) saturated to 2^m - 1.
// Byte layout of one block (library-defined, LSB-first bit stream):
//   byte 0 = E; byte 1 = mu bits (bit j = pair j); then 16 fields of (1+m) bits, element i at bits
//   [(1+m)i, (1+m)(i+1)) of bytes 2.., magnitude in the low m bits, sign in the top bit.
//   MX9 (m=7): 18 bytes, MX6 (m=4): 12 bytes, MX4 (m=2): 8 bytes.
// Choices: fp32 subnormals are kept (count as exponent 0), signed zero is kept (sign bit of the
// input), a block with NaN or Inf gets E = 0xFF, mu = 0, codes 0; an all-zero block is all zero.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj::bdr {

constexpr int kBlock = 16;  // values per block
constexpr int kPairs = 8;   // microexponent sub-blocks (pairs) per block
constexpr uint8_t kExpNaN = 0xFF;

struct BdrFormat {
  qj_dtype type;
  const char* name;
  int m;            // magnitude bits: 7, 4, 2
  int block_bytes;  // 18, 12, 8
};

// nullptr when t is not QJ_BDR_MX9/MX6/MX4.
const BdrFormat* format(qj_dtype t);
inline bool is_bdr_type(qj_dtype t) { return format(t) != nullptr; }

inline int64_t num_blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }
inline int64_t storage_bytes(const BdrFormat& f, int64_t n) { return num_blocks(n) * f.block_bytes; }

// A block with its fields separated: what a GEMM decoder works on.
struct Fields {
  uint8_t e;                // shared exponent (0xFF: NaN block)
  uint8_t mu;               // bit j = microexponent of pair j
  uint8_t code[kBlock];     // sign << m | M
};

// Integer form of element i: +-M (a -0 code gives 0).
inline int int_value(const BdrFormat& f, uint8_t code) {
  const int mag = code & ((1 << f.m) - 1);
  return (code >> f.m) & 1 ? -mag : mag;
}
// log2 of the step of pair j: value = int_value * 2^step_exp (E != 0xFF).
inline int step_exp(const BdrFormat& f, const Fields& b, int pair) {
  return static_cast<int>(b.e) - 127 - ((b.mu >> pair) & 1) + 1 - f.m;
}

// Quantize count (1..16) values (the rest of the block counts as +0.0) into fields.
void quantize_fields(const BdrFormat& f, const float* v, int count, Fields* out);
// Exact value of every element as fp32 (E = 0xFF: all NaN). Exact: steps are >= 2^-133.
void dequantize_fields(const BdrFormat& f, const Fields& b, float* out16);

void pack(const BdrFormat& f, const Fields& b, uint8_t* dst);
void unpack(const BdrFormat& f, const uint8_t* src, Fields* out);

// Convenience: values <-> one packed block.
void quantize_block(const BdrFormat& f, const float* v, int count, uint8_t* dst);
void dequantize_block(const BdrFormat& f, const uint8_t* src, float* out16);

}  // namespace qj::bdr
