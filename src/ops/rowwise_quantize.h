// Table conversion: fp32/fp16 rows <-> fused-rowwise rows (8/4/2-bit), vectorized.
//
// The byte results are those of the scalar formulas in src/formats/fused_rowwise.h (FBGEMM's), at
// every ISA tier: the vector code performs the same fp32 operations (subtract, multiply, round half
// to even) element by element, so the tiers agree bit for bit with src/formats.
// All rows are checked (finite values, fp16-representable parameters) before any byte is written.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj {

struct RowwiseConvert {
  qj_dtype fused_type = QJ_FUSED_8BIT;  // QJ_FUSED_8BIT / 4BIT / 2BIT
  bool sb_first = false;                // scale/bias before the values (FBGEMM TBE rows)
  qj_dtype plain_type = QJ_F32;         // QJ_F32 or QJ_F16 (the unquantized side)
  int64_t rows = 0, dim = 0;
  int64_t fused_stride = 0;             // bytes between fused rows (0: the natural row size)
};

// plain (rows x dim, dense) -> fused rows.
qj_status quantize_rowwise(const RowwiseConvert& c, const void* src, void* dst);
// fused rows -> plain (rows x dim, dense).
qj_status dequantize_rowwise(const RowwiseConvert& c, const void* src, void* dst);

}  // namespace qj
