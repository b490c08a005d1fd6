// MX / BDR conversions driver: fp32 or bf16 <-> MX (SPLIT layout) and BDR blocks, dispatched on
// qj::max_isa() to the AVX-512, AVX2 or scalar path; all paths are bit-identical (the scalar
// codecs of src/formats define the result). Also the loops that convert SPLIT MXFP4 to and from
// the GGML and FBGEMM layouts.
//
// Arguments are assumed valid (the C API checks them). Sizes: elems = mx::split_elem_bytes(n),
// scales = mx::num_blocks(n), BDR blocks = bdr::storage_bytes(n); padding codes are written as 0.
// The floating-point environment: the vector paths set MXCSR to its default (round to nearest,
// no FTZ/DAZ) for the duration of a call and restore the caller's, so an inference server running
// with FTZ/DAZ gets the same bytes.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj {

// src_type / dst_type: QJ_F32 or QJ_BF16.
void mx_quantize(qj_dtype mx_type, qj_rounding r, qj_dtype src_type, const void* src, int64_t n,
                 uint8_t* elems, uint8_t* scales);
void mx_dequantize(qj_dtype mx_type, const uint8_t* elems, const uint8_t* scales, int64_t n,
                   qj_dtype dst_type, void* dst);

// BDR (QJ_BDR_MX9/MX6/MX4): self-contained blocks of 16 values.
void bdr_quantize(qj_dtype bdr_type, qj_dtype src_type, const void* src, int64_t n, uint8_t* blocks);
void bdr_dequantize(qj_dtype bdr_type, const uint8_t* blocks, int64_t n, qj_dtype dst_type, void* dst);

// MXFP4 SPLIT <-> foreign layouts (qj_mx_layout GGML_MXFP4 / FBGEMM_MX4), whole blocks; import
// zeroes the codes past n in the last block so the SPLIT padding invariant holds.
void mx_export(qj_mx_layout layout, const uint8_t* elems, const uint8_t* scales, int64_t n, uint8_t* dst);
void mx_import(qj_mx_layout layout, const uint8_t* src, int64_t n, uint8_t* elems, uint8_t* scales);

// The path mx_quantize (or, with dequantize, mx_dequantize; bf16: from / to bf16) takes for this
// type under the current cap (for tests and the benchmark): QJ_ISA_SCALAR, QJ_ISA_AVX2 or
// QJ_ISA_AVX512. BDR types: bdr_quantize / bdr_dequantize.
qj_isa mx_convert_isa(qj_dtype type, bool dequantize = false, bool bf16 = false);

}  // namespace qj
