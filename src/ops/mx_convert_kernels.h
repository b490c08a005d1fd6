// Internal: the per-ISA MX conversion kernels behind src/ops/mx_convert.cpp. Each works on whole
// blocks only (the driver pads the tail block) and must be bit-identical to the scalar codecs
// of src/formats. The caller has set the default MXCSR.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj::mxk {

// nb whole 32-value blocks of fp32 (bf16 = false) or bf16 input; writes nb * block_bytes element
// bytes (SPLIT layout) and nb scales.
using QuantizeFn = void (*)(qj_rounding r, const void* src, int64_t nb, uint8_t* elems, uint8_t* scales);
// nb whole blocks -> 32 * nb fp32 or bf16 values.
using DequantizeFn = void (*)(const uint8_t* elems, const uint8_t* scales, int64_t nb, void* dst);
// BDR: nb whole 16-value blocks.
using BdrQuantizeFn = void (*)(const void* src, int64_t nb, uint8_t* blocks);
using BdrDequantizeFn = void (*)(const uint8_t* blocks, int64_t nb, void* dst);

// nullptr when the ISA has no kernel for this type (the driver then uses the scalar path).
QuantizeFn quantize_avx512(qj_dtype t, bool bf16_src);
DequantizeFn dequantize_avx512(qj_dtype t, bool bf16_dst);
QuantizeFn quantize_avx2(qj_dtype t, bool bf16_src);
DequantizeFn dequantize_avx2(qj_dtype t, bool bf16_dst);
BdrQuantizeFn bdr_quantize_avx512(qj_dtype t, bool bf16_src);
BdrDequantizeFn bdr_dequantize_avx512(qj_dtype t, bool bf16_dst);
BdrQuantizeFn bdr_quantize_avx2(qj_dtype t, bool bf16_src);
BdrDequantizeFn bdr_dequantize_avx2(qj_dtype t, bool bf16_dst);

}  // namespace qj::mxk
