/*
 * quantjit.h -- the C API of quantjit, a library of quantized CPU kernels generated at run time.
 *
 * This header is the ABI. It is valid C99 and C++; every symbol is prefixed qj_ / QJ_.
 *
 * Conventions (see README.md for worked examples):
 *  - Every fallible call returns qj_status; QJ_OK == 0. On failure, qj_last_error() returns a
 *    thread-local message naming the argument and the value that was wrong, and nothing has been
 *    written to any output buffer.
 *  - Handles are opaque pointers created and destroyed in pairs. Destroy functions accept NULL.
 *  - Sizes and leading dimensions are int64_t counts of elements (not bytes) unless a name says
 *    otherwise. Matrices are row-major.
 *  - Kernels are generated when a plan is created, never inside a run call.
 *
 * Byte layouts that are part of the ABI are documented next to the types that use them.
 */
#ifndef QUANTJIT_H_
#define QUANTJIT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(QJ_BUILDING_LIBRARY)
#define QJ_API __attribute__((visibility("default")))
#else
#define QJ_API
#endif

#define QJ_VERSION_MAJOR 0
#define QJ_VERSION_MINOR 1
#define QJ_VERSION_PATCH 0
/** Numeric version, e.g. 100 for 0.1.0. Compare with qj_version() to detect header/library skew. */
#define QJ_VERSION (QJ_VERSION_MAJOR * 10000 + QJ_VERSION_MINOR * 100 + QJ_VERSION_PATCH)
#define QJ_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------------------------ */
/* Status and errors                                                                          */
/* ------------------------------------------------------------------------------------------ */

/** Result of every fallible call. */
typedef enum qj_status {
  QJ_OK = 0,                    /**< success */
  QJ_ERR_INVALID_ARGUMENT = 1,  /**< null pointer, bad size, bad enum, bad scale, bad stride ... */
  QJ_ERR_OUT_OF_RANGE = 2,      /**< an index or offset outside its table / array */
  QJ_ERR_UNSUPPORTED = 3,       /**< a valid request that this build does not implement */
  QJ_ERR_OUT_OF_MEMORY = 4,     /**< an allocation (host or JIT memory) failed */
  QJ_ERR_CORRUPT_DATA = 5,      /**< a serialized buffer failed its size, magic or checksum check */
  QJ_ERR_VERSION_MISMATCH = 6,  /**< a serialized buffer from an incompatible format version */
  QJ_ERR_ISA_UNAVAILABLE = 7,   /**< an ISA above what this CPU supports was requested */
  QJ_ERR_INTERNAL = 8           /**< a bug: please report it with QJ_VERBOSE=2 output */
} qj_status;

/** Static name of a status, e.g. "QJ_ERR_INVALID_ARGUMENT". Unknown values give "QJ_ERR_UNKNOWN". */
QJ_API const char* qj_status_name(qj_status s);
/** This thread's message for its most recent failed call ("" if none). Valid until the next call
 *  on this thread. */
QJ_API const char* qj_last_error(void);
/** Library version string, e.g. "0.1.0". */
QJ_API const char* qj_version(void);

/* ------------------------------------------------------------------------------------------ */
/* CPU features and the ISA cap                                                               */
/* ------------------------------------------------------------------------------------------ */

/** ISA tiers, ordered: each includes everything below it. */
typedef enum qj_isa {
  QJ_ISA_SCALAR = 0,      /**< portable C++ reference kernels only */
  QJ_ISA_AVX2 = 1,        /**< AVX2 + FMA + F16C, ymm */
  QJ_ISA_AVX512 = 2,      /**< AVX-512 F/BW/VL/DQ, zmm */
  QJ_ISA_AVX512_VNNI = 3  /**< AVX-512 + VNNI (vpdpbusd) */
} qj_isa;

/** Best ISA tier this CPU supports (ignores the cap). */
QJ_API qj_isa qj_cpu_isa(void);
/** Current cap: the tier kernels are generated for (min of cpu ISA and the cap). */
QJ_API qj_isa qj_max_isa(void);
/** Cap the ISA used by plans created from now on. A tier above the CPU is QJ_ERR_ISA_UNAVAILABLE
 *  (never a silent downgrade). The environment variable QJ_MAX_ISA (scalar, avx2, avx512,
 *  avx512_vnni) sets the initial cap. */
QJ_API qj_status qj_set_max_isa(qj_isa isa);
/** Static name of an ISA tier: "scalar", "avx2", "avx512", "avx512_vnni". */
QJ_API const char* qj_isa_name(qj_isa isa);

/* ------------------------------------------------------------------------------------------ */
/* Data types                                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef enum qj_dtype {
  QJ_DT_UNDEFINED = 0,
  QJ_U8 = 1,
  QJ_S8 = 2,
  QJ_S32 = 3,
  QJ_F32 = 4,
  QJ_F16 = 5,   /**< IEEE binary16 */
  QJ_BF16 = 6,  /**< bfloat16, round-to-nearest-even when produced */
  QJ_S4 = 7,    /**< two's complement nibbles, -8..7, low nibble = even index along K */
  QJ_U4 = 8,    /**< unsigned nibbles, 0..15, low nibble = even index along K */
  /* OCP Microscaling (MX.md): blocks of 32 elements, one E8M0 scale per block. */
  QJ_MXFP8_E4M3 = 16,
  QJ_MXFP8_E5M2 = 17,
  QJ_MXFP6_E3M2 = 18,
  QJ_MXFP6_E2M3 = 19,
  QJ_MXFP4_E2M1 = 20,
  QJ_MXINT8 = 21,
  /* Shared-microexponent BDR formats (MX.md section 6): blocks of 16. */
  QJ_BDR_MX9 = 24,
  QJ_BDR_MX6 = 25,
  QJ_BDR_MX4 = 26,
  /* Fused-rowwise embedding rows (byte-compatible with FBGEMM / PyTorch). */
  QJ_FUSED_8BIT = 32,  /**< dim u8, then fp32 scale, fp32 bias */
  QJ_FUSED_4BIT = 33,  /**< ceil(dim/2) bytes (low nibble first), then fp16 scale, fp16 bias */
  QJ_FUSED_2BIT = 34   /**< ceil(dim/4) bytes (low bits first), then fp16 scale, fp16 bias */
} qj_dtype;

/** Static name of a dtype, e.g. "u8", "mxfp4", "mxfp8_e4m3"; "undefined" for unknown values. */
QJ_API const char* qj_dtype_name(qj_dtype t);

/* ------------------------------------------------------------------------------------------ */
/* Threading                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/** The slice of a problem one call computes, FBGEMM style: the caller's pool calls a run function
 *  once per thread with thread_id in [0, num_threads). Every partition gives bit-identical output. */
typedef struct qj_partition {
  int32_t thread_id;
  int32_t num_threads;
} qj_partition;

/** A task body: run the slice thread_id of num_threads. */
typedef void (*qj_task_fn)(void* ctx, int32_t thread_id, int32_t num_threads);
/** A pool hook: must call fn(ctx, t, num_threads) once for every t in [0, num_threads) and return
 *  when all have returned. */
typedef void (*qj_parallel_for_fn)(void* pool, qj_task_fn fn, void* ctx, int32_t num_threads);

/** Install the pool used by the *_run_parallel convenience calls (NULL restores the built-in
 *  pool of std::threads). Not thread-safe against concurrent *_run_parallel calls.
 *  The built-in pool: the caller and its workers claim the call's slices as they come free, so
 *  a worker that wakes late never delays the call; a short call (estimated under
 *  QJ_POOL_INLINE_US, default 100 us) made while the workers sleep and the previous call ended
 *  longer ago than they poll (QJ_POOL_POLL_US) runs on the calling thread alone. The output is
 *  the same either way. */
QJ_API void qj_set_parallel_for(qj_parallel_for_fn fn, void* pool);

/* ------------------------------------------------------------------------------------------ */
/* Packed weights                                                                             */
/* ------------------------------------------------------------------------------------------ */

typedef struct qj_weights_s* qj_weights;

typedef enum qj_layout {
  QJ_LAYOUT_KN = 0,  /**< B[k][n], row k at data + k*ld */
  QJ_LAYOUT_NK = 1   /**< B stored transposed: column n at data + n*ld (PyTorch Linear weight) */
} qj_layout;

typedef enum qj_granularity {
  QJ_GRAN_TENSOR = 0,   /**< one scale / zero point */
  QJ_GRAN_CHANNEL = 1,  /**< one per output column n */
  QJ_GRAN_GROUP = 2,    /**< one per (group of group_size along K, column n), stored [K/G][N] */
  QJ_GRAN_ROW = 3       /**< activations only: one per row of A (dynamic quantization) */
} qj_granularity;

/** Describes weights B (K x N) handed to qj_weights_pack / qj_weights_quantize_pack.
 *
 *  Value of an integer weight: w = scale * (q - zero_point).
 *  - S8: q in [-128, 127], one byte per element, zero_point in [-128, 127].
 *  - S4 / U4: two values per byte, low nibble = even k (the row-major element order along K for
 *    QJ_LAYOUT_NK, i.e. packed along K; for QJ_LAYOUT_KN element (k, n) is nibble k%2 of byte
 *    (k/2)*ld + n). Zero points in the nibble's range.
 *  scales: 1 (tensor), N (channel) or (K/group_size)*N (group, [g][n]) floats, finite and > 0.
 *  group_size divides K and is a multiple of 4 for S8 (of 8 for S4 / U4), or equals K (stored
 *  per channel); another multiple is QJ_ERR_UNSUPPORTED, a non-divisor QJ_ERR_INVALID_ARGUMENT.
 *  zero_points: same count as scales, or NULL for all zero.
 *  For qj_weights_quantize_pack, scales and zero_points must be NULL: they are computed
 *  (symmetric, amax/qmax per channel or per group). */
typedef struct qj_weights_desc {
  qj_dtype dtype;
  int64_t k;
  int64_t n;
  qj_layout layout;
  qj_granularity granularity;
  int64_t group_size;          /**< for QJ_GRAN_GROUP: divides K; ignored otherwise */
  const float* scales;
  const int32_t* zero_points;
} qj_weights_desc;

/** Pack quantized weights into the layout of the current ISA tier. ld is in elements of the
 *  stored layout (bytes for S8; for S4/U4, ld counts bytes of packed nibbles). */
QJ_API qj_status qj_weights_pack(const qj_weights_desc* desc, const void* data, int64_t ld,
                                 qj_weights* out);
/** Quantize fp32 weights (K x N or N x K as desc->layout says, ld in floats) to desc->dtype with
 *  symmetric scales computed per channel or per group, then pack. */
QJ_API qj_status qj_weights_quantize_pack(const qj_weights_desc* desc, const float* w, int64_t ld,
                                          qj_weights* out);
/** Bytes qj_weights_serialize needs (0 for NULL). */
QJ_API size_t qj_weights_serialized_size(qj_weights w);
/** Write a versioned, checksummed image of w. size must be >= qj_weights_serialized_size(w). */
QJ_API qj_status qj_weights_serialize(qj_weights w, void* buf, size_t size);
/** Read an image written by qj_weights_serialize. A truncated, corrupted or wrong-version buffer
 *  is rejected; an image packed for another ISA tier is repacked for the current one. */
QJ_API qj_status qj_weights_deserialize(const void* buf, size_t size, qj_weights* out);
/** Dimensions and type of packed weights (any pointer may be NULL). */
QJ_API qj_status qj_weights_info(qj_weights w, qj_dtype* dtype, int64_t* k, int64_t* n, qj_isa* isa);
QJ_API void qj_weights_destroy(qj_weights w);

/* ---- INT4 and FP16 / BF16 weights ---------------------------------------------------------
 * S4 / U4 (qj_weights_pack): data holds nibbles as described at qj_weights_desc, ld in BYTES
 *  (QJ_LAYOUT_KN: ld >= n; QJ_LAYOUT_NK: ld >= ceil(k/2)). Granularity tensor, channel or group
 *  with group_size a multiple of 8 (32, 64, 128, 256 ...) or equal to k; a group_size that does
 *  not divide k is QJ_ERR_INVALID_ARGUMENT (no padding is implied). Zero points: S4 in [-8, 7],
 *  U4 in [0, 15]. qj_weights_quantize_pack computes S4 symmetric (scale = amax / 7, q in [-7, 7])
 *  and U4 asymmetric (over [min(0, lo), max(0, hi)]: scale = (max - min) / 15, zero point
 *  rne(-min / scale) in [0, 15]) per channel or per group (max - min beyond fp32:
 *  QJ_ERR_INVALID_ARGUMENT; a scale that underflows to 0 for subnormal weights is replaced by the
 *  least positive float, for S8 too). The nibbles stay 4-bit in memory;
 *  the GEMM kernels decode them in registers.
 *  GEMM with S4 / U4 weights takes every A type and output type of the S8 path and has the same
 *  exact definition (integer sums per group folded in fp32, docs/kernel-contract.md);
 *  k <= 561433 (int32 exactness of 255 * 15 * k). With grouped S4 / U4 weights, fp32 / bf16 A may
 *  also be quantized per row AND per weight group (a_granularity = QJ_GRAN_GROUP: scale = amax of
 *  the group's K / 127, so an outlier only coarsens its own group); each group's int32 sum is
 *  then multiplied by that scale before the fold: facc = fma(float(sum) * a_scale(i, g),
 *  w_scale(g, n), facc). With weights of one group along K (per tensor, per channel, or grouped
 *  with group_size = K, which is stored per channel) QJ_GRAN_GROUP is QJ_GRAN_ROW.
 * F16 / BF16: qj_weights_pack takes uint16_t codes (ld in elements); desc->scales and
 *  desc->zero_points must be NULL, granularity and group_size are ignored. Every code is kept,
 *  including inf, nan and subnormals. qj_weights_quantize_pack converts fp32 by round-to-nearest-
 *  even; a finite value whose rounding would overflow (|x| >= 65520 for f16) is stored as
 *  +-65504 (+-bf16 max) instead of +-inf: qj_weights_clamped reports how many, and QJ_VERBOSE=1
 *  logs a line. inf and nan inputs are kept.
 *  GEMM with F16 / BF16 weights: a_type QJ_F32 or QJ_BF16 (not quantized), c_type QJ_F32 or
 *  QJ_BF16, fp32 accumulation; y = sum_k a*w + bias[n], ReLU, then C = y + beta * C (fp32 C);
 *  a_scale, a_zero_point, c_scale, c_zero_point are ignored. The summation order over K is the
 *  kernel's (results may differ from a sequential sum by rounding; src/ref/gemm_float_ref.h
 *  states the bound the tests use). Non-finite A values propagate (no error). */

/** Number of values qj_weights_quantize_pack clamped to the largest finite value of a float
 *  weight type (0 for every other way of making weights). */
QJ_API qj_status qj_weights_clamped(qj_weights w, int64_t* count);

/* ---- MX weights (OCP Microscaling; MX.md sections 4, 5, 6, 9) ------------------------------
 * Weight types QJ_MXFP4_E2M1, QJ_MXFP6_E2M3, QJ_MXINT8, QJ_MXFP6_E3M2 (the element types whose
 * per-block dot product is exact in integers), the BDR shared-microexponent types QJ_BDR_MX9,
 * QJ_BDR_MX6, QJ_BDR_MX4, and QJ_MXFP8_E4M3 / QJ_MXFP8_E5M2 (the fp32 path, below). Blocks run
 * along K: 32 values with one E8M0 scale each (OCP), or 16 values with their shared exponent E and
 * 8 pair microexponents inside the block (BDR); k must be a multiple of the block (32 / 16). desc->scales and desc->zero_points must be NULL; granularity
 * and group_size are ignored (the blocks are the groups).
 * qj_weights_pack: desc->layout must be QJ_LAYOUT_NK (one vector per output column n) and `data`
 *  points to a qj_mx_weights_data:
 *  - OCP types: the elements of column n start at (const uint8_t*)elems + n * ld (ld in BYTES,
 *    >= k/32 * block bytes: FP4 16, FP6 24 (4 codes LSB-first in 3 bytes), INT8 and FP8 32;
 *    qj_mx_quantize's SPLIT layout), the E8M0 byte of block j of column n is
 *    scales[n * scales_ld + j]; 0xFF (NaN) makes every product with the block NaN.
 *  - BDR types: column n's k/16 packed blocks (qj_mx_quantize's BDR layout: 18 / 12 / 8 bytes per
 *    block) start at (const uint8_t*)elems + n * ld (ld in BYTES, >= k/16 * block bytes); scales
 *    must be NULL (scales_ld is ignored). A block exponent of 0xFF makes the block NaN.
 * qj_weights_quantize_pack: fp32 K x N or N x K (ld in floats) -> MX per column along K, FLOOR
 *  scale rule, round-to-nearest-even with saturation (qj_mx_quantize with QJ_ROUND_FLOOR; BDR:
 *  qj_mx_quantize's BDR rule, MX.md section 6). A block holding NaN or Inf gets the NaN scale.
 * GEMM: a_type QJ_F32 / QJ_BF16 (quantized on the fly to int8; a_granularity QJ_GRAN_GROUP = per
 *  (row, block of 32 or 16), recommended, or QJ_GRAN_ROW / QJ_GRAN_TENSOR), an MX type (MX x MX:
 *  any OCP MX activations in a qj_mx_matrix with any MX / BDR weights, see qj_gemm_desc) or
 *  U8 / S8 with a_scale and a_zero_point; c_type QJ_F32 / QJ_BF16
 *  (or U8 / S8 requantized), bias, ReLU, beta. Per block the sum of int8(A) x integer(weight) is
 *  exact in int32 (integer forms: FP4 2v, E2M3 8v, INT8 the code, E3M2 16v in [-448, 448], BDR
 *  +-M * 2^(1 - mu)); it is scaled by A's scale and by the block scale 2^(b - 127) (BDR:
 *  2^(E - 127)) in fp32 and accumulated in fp32 across blocks; the type's power of two (2^-shift)
 *  is applied with the output multiplier. E3M2 and BDR weights multiply as int16 pairs (vpdpwssd
 *  with AVX512-VNNI, vpmaddwd at AVX-512 / AVX2). Every MX type runs JIT at every tier from AVX2,
 *  the weights read in place from their packed codes (no copy is made at plan creation): MXFP4,
 *  MXFP6 E2M3 and MXINT8 in the int8 kernel (E2M3: vpermb with AVX512-VBMI, else vpshufb; below
 *  AVX512-VNNI MXINT8 split into nibbles and E2M3 pair sums widened one by one, so vpmaddubsw
 *  cannot saturate). Packed E2M3 weights hold 6 bits per code at the AVX512-VNNI tier (one byte
 *  below it); a call of many rows unpacks each cache-sized block of them once into per-thread
 *  scratch (about 0.6 MiB, plus up to 2 MiB of packed A). The fp32 block partial sum
 *  * 2^(b - 127) overflows to +-Inf when it exceeds FLT_MAX (scale bytes near 0xFE); blocks
 *  quantized from fp32 weights below 2^100 in magnitude never do.
 * GEMM with MXFP8 weights (E4M3, E5M2; MX.md section 9 decision 6, the fp32 path): like F16 / BF16
 *  weights (see above): a_type QJ_F32 or QJ_BF16, NOT quantized; c_type QJ_F32 or QJ_BF16; bias,
 *  ReLU, beta; a_scale, a_zero_point, c_scale, c_zero_point ignored. y = sum_k a * w + bias with
 *  w = value(code) * 2^(b - 127) exactly (b = 0xFF, an E4M3 NaN code or an E5M2 NaN code make w
 *  NaN, E5M2 Inf codes +-Inf), products and sums in fp32 in the kernel's order (the bound the tests
 *  use is in test/gemm_mxfp8_test.cpp); a weight beyond the fp32 range (only from foreign scale
 *  bytes) is +-Inf. The codes stay 8-bit in memory and are decoded in registers; JIT at AVX2 and
 *  above, the scalar reference below. */
typedef struct qj_mx_weights_data {
  const void* elems;       /**< SPLIT element bytes (BDR: blocks) of column 0 (column n at + n * ld) */
  const uint8_t* scales;   /**< E8M0 scale bytes, scales[n * scales_ld + j]; NULL for BDR */
  int64_t scales_ld;       /**< >= k / 32 (ignored for BDR) */
} qj_mx_weights_data;

/** MX ACTIVATIONS (A of a GEMM in an OCP MX type; see qj_gemm_desc): the same three fields, read
 *  per ROW of A: row i's SPLIT element bytes start at (const uint8_t*)elems + i * lda (lda in
 *  BYTES), the E8M0 byte of its block j is scales[i * scales_ld + j] (scales_ld >= k / 32). */
typedef qj_mx_weights_data qj_mx_matrix;

/* ------------------------------------------------------------------------------------------ */
/* GEMM: C (M x N) = output_stage(A (M x K) * B (K x N))                                       */
/* ------------------------------------------------------------------------------------------ */

typedef struct qj_gemm_plan_s* qj_gemm_plan;

typedef enum qj_activation {
  QJ_ACT_NONE = 0,
  QJ_ACT_RELU = 1
} qj_activation;

/** The GEMM problem apart from M and the data pointers.
 *
 *  A types:
 *   - QJ_U8: value = a_scale * (a - a_zero_point), a_zero_point in [0, 255].
 *   - QJ_S8: value = a_scale * (a - a_zero_point), a_zero_point in [-128, 127].
 *   - QJ_F32 / QJ_BF16 with integer weights: quantized on the fly while A is packed, symmetric to
 *     [-127, 127] with scale amax/127 per row (a_granularity = QJ_GRAN_ROW) or per call
 *     (QJ_GRAN_TENSOR). a_scale / a_zero_point are ignored.
 *   - MX activations (MX x MX, MX.md section 5): a_type any OCP MX type (QJ_MXFP4_E2M1,
 *     QJ_MXFP6_E2M3, QJ_MXFP6_E3M2, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXINT8).
 *     The `a` argument of qj_gemm_run / qj_gemm_run_parallel then points to a qj_mx_matrix (row i
 *     at elems + i * lda BYTES, the SPLIT layout of qj_mx_quantize; scales[i * scales_ld + j]);
 *     k must be a multiple of 32 (whole blocks; no implied padding). a_scale, a_zero_point and
 *     a_granularity are ignored. Output F32 / BF16 (or U8 / S8 requantized on the integer routes),
 *     bias, ReLU, beta as for fp32 A; QJ_S32 is invalid. Pairs and routes:
 *      . exact integer route: per block (per 16 for BDR weights) the sum of the integer forms
 *        (FP4 2v, E2M3 8v, E3M2 16v, INT8 the code, -128 accepted; BDR +-M * 2^(1 - mu)) is exact
 *        in int32; then facc = fma(float(sum) * 2^(sA - 127 - shiftA), w_scale(g, n), facc) in
 *        fp32, block by block (both factors exact powers of two, so only the fp32 accumulation
 *        rounds). A in {FP4, E2M3, INT8} with weights MXFP4 / E2M3 / MXINT8 (int8 kernels; JIT at
 *        every tier from AVX2) or S4 / U4 per group of
 *        exactly 32, k >= 64 (a group of the whole k = 32 is stored per channel; S8 weights and
 *        other groupings: QJ_ERR_UNSUPPORTED); A in {FP4, E2M3, INT8,
 *        E3M2} with MXFP6 E3M2 / BDR MX9 / MX6 / MX4 weights (int16-pair kernel, JIT at every
 *        tier; A's block scale applies to both 16-blocks of BDR weights it spans); E3M2 A with
 *        MXFP4 / E2M3 / MXINT8 weights (AVX512-VNNI: the int8 kernels, A's 16v split into two s8
 *        parts 32 hi + lo; below it the int16-pair kernel, A as s16 pairs, each step's decoded
 *        weight quads widened into s16 pair rows; the weights are read in place either way).
 *      . fp32 route (A dequantized exactly to fp32, value * 2^(b - 127), 0xFF -> NaN; then the
 *        float GEMM's definition: products and sums in fp32, no per-block exactness): any A with
 *        F16 / BF16 / MXFP8 weights; MXFP8 A with every other MX / BDR weight type, every one
 *        read in place (the float kernel decodes their packed codes). Each
 *        block's fp32 sum of products is multiplied by the block factor 2^(b - 127 - shift), so a
 *        weight beyond fp32 on its own still takes part exactly. JIT at AVX2 and above.
 *     float(sum) * 2^(sA - 127 - shiftA) is formed first, so an A block with a scale byte so large
 *     that it overflows fp32 (sA above ~235, values beyond ~2^108) gives +-Inf even where the
 *     product with a tiny weight scale would be finite (likewise a dequantized fp32 A value).
 *     A 0xFF scale on either side makes the outputs it reaches NaN (before the activation: ReLU
 *     maps NaN to 0, as for every A type). Below the JIT tiers the scalar reference runs (logged
 *     at QJ_VERBOSE=1).
 *  Output types:
 *   - QJ_S32: the exact integer sum  sum_k (a - za) * (b - zb)  (integer weights, non-group only).
 *   - QJ_F32 / QJ_BF16: y = a_scale * b_scale[n] * sum + bias[n], then activation.
 *   - QJ_U8 / QJ_S8: q = saturate(round_half_even(y / c_scale) + c_zero_point); ReLU clamps at
 *     c_zero_point. Exact definition (bit-exact across ISAs) in docs/kernel-contract.md.
 *  bias: N floats or NULL; copied at plan creation. */
typedef struct qj_gemm_desc {
  qj_dtype a_type;
  float a_scale;
  int32_t a_zero_point;
  qj_granularity a_granularity;  /**< for dynamic (F32/BF16) A: QJ_GRAN_ROW or QJ_GRAN_TENSOR
                                      (or QJ_GRAN_GROUP); ignored for MX A */
  qj_dtype c_type;
  float c_scale;
  int32_t c_zero_point;
  const float* bias;
  qj_activation activation;
  float beta;                    /**< float outputs only: C = result + beta * C (0 = overwrite) */
} qj_gemm_desc;

/** Create a plan for desc and weights b (the plan keeps its own reference to b: destroying b
 *  afterwards is allowed). Generates (or fetches from the cache) every kernel the plan needs.
 *  Scales are finite and > 0; a column's output multiplier a_scale * weight scale (/ c_scale for
 *  u8 / s8 C) that overflows fp32 is QJ_ERR_INVALID_ARGUMENT. */
QJ_API qj_status qj_gemm_plan_create(const qj_gemm_desc* desc, qj_weights b, qj_gemm_plan* out);
/** Run the plan on M rows. lda, ldc in elements (lda in bytes, and a a const qj_mx_matrix*, for
 *  MX A). part = NULL runs the whole problem on the calling thread. A plan may be run
 *  concurrently from many threads. m = 0 writes nothing (a and c may be NULL) but lda, ldc and
 *  part are still checked. */
QJ_API qj_status qj_gemm_run(qj_gemm_plan p, int64_t m, const void* a, int64_t lda, void* c,
                             int64_t ldc, const qj_partition* part);
/** Convenience: run over num_threads in [1, 1024] threads with the installed pool
 *  (qj_set_parallel_for). Every slice's scratch is allocated before any slice starts: if that
 *  memory, or the built-in pool's threads, cannot be had, QJ_ERR_OUT_OF_MEMORY and nothing
 *  written. */
QJ_API qj_status qj_gemm_run_parallel(qj_gemm_plan p, int64_t m, const void* a, int64_t lda,
                                      void* c, int64_t ldc, int32_t num_threads);
QJ_API void qj_gemm_plan_destroy(qj_gemm_plan p);

/* ------------------------------------------------------------------------------------------ */
/* Embedding-bag                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* For each bag, gather rows of a table by index, decode them, weight and pool them into one
 * output row (FBGEMM's EmbeddingSpMDM family, with its table layouts).
 *
 * Row formats (row_type) and their bytes: QJ_F32 / QJ_F16 / QJ_BF16 rows are dim dense elements;
 * QJ_FUSED_8BIT / 4BIT / 2BIT rows are the fused-rowwise layouts documented with
 * qj_quantize_rowwise below (scale_bias_first selects FBGEMM's TBE variant); MX rows (blocks of 32
 * elements, E8M0 scales, see the MX section below):
 *  - QJ_MXFP4_E2M1: FBGEMM's MX4 rows (QJ_MX_LAYOUT_FBGEMM_MX4 per row): ceil(dim/32) groups of 17
 *    bytes, 16 data bytes (byte j = code[2j] | code[2j+1] << 4) then the E8M0 byte;
 *  - QJ_MXINT8, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2: the SPLIT layout, ceil(dim/32) * 32 code bytes per
 *    table row, and the E8M0 bytes in a separate array table_scales[row][block] (dense); run
 *    these with qj_embedding_bag_run_ex.
 * Rows are row_stride bytes apart (0: the natural row size).
 *
 * A bag b covers indices [offsets[b], offsets[b+1]) (offsets: num_bags + 1 entries, offsets[0] =
 * 0, non-decreasing, offsets[num_bags] = num_indices) or, with use_lengths, lengths[b] consecutive
 * indices (lengths >= 0, summing to num_indices). QJ_POOL_NONE ignores offsets_or_lengths (may be
 * NULL) and writes one output row per index.
 *
 * Exact arithmetic (fp32; every ISA tier and thread count gives the same bits):
 *   acc = +0; for each index i of the bag in order, at position p in the bag, with
 *   w = weighted ? weights[positional ? p : i] : 1 and row = remap ? remap[index] : index
 *   (a remapped -1 is a pruned row: it adds nothing, but still counts in the bag's length):
 *     float rows:  acc = fma(w, x, acc), x the element widened exactly to fp32;
 *     fused rows:  acc = fma(q, w * scale, acc), q the integer code, and bsum = bsum + w * bias
 *                  (one scalar per bag, from +0), added once at the end: acc = acc + bsum;
 *     MX rows:     acc = fma(w, x, acc), x = value(code) * X (fp32 product; X = 2^(e-127), a NaN
 *                  scale byte gives NaN). NaN element codes give NaN outputs (payload unspecified).
 *   QJ_POOL_MEAN: acc * (1.0f / len) when len > 0 (an empty bag gives zeros);
 *   QJ_POOL_NONE: the row's value alone, w * x or fma(q, w * scale, w * bias) (zeros if pruned).
 *   Output: fp32, or fp16 / bf16 rounded to nearest even; row b at out + b * out_stride elements
 *   (out_stride 0: dim), so several tables can write into one concatenated output.
 *
 * Errors of a run (nothing is written to out, for any partition): an index outside [0, num_rows)
 * (or [0, remap_size) with a remap) is QJ_ERR_OUT_OF_RANGE, and the message names the bag and the
 * index; offsets that do not start at 0, decrease, overrun the index array or do not end at
 * num_indices, and lengths that are negative or do not sum to num_indices, are
 * QJ_ERR_INVALID_ARGUMENT naming the bag. A remap entry >= num_rows is QJ_ERR_OUT_OF_RANGE.
 *
 * Large tables: per-row cost is dominated by the random DRAM access (tens of ns per row); backing
 * the table with transparent huge pages roughly halves it. Allocate with qj_embedding_table_alloc,
 * or madvise(ptr, bytes, MADV_HUGEPAGE) your own 2 MiB-aligned mapping before filling it
 * (requires /sys/kernel/mm/transparent_hugepage/enabled to be "always" or "madvise").
 */
typedef struct qj_embedding_bag_plan_s* qj_embedding_bag_plan;

typedef enum qj_pooling {
  QJ_POOL_SUM = 0,
  QJ_POOL_MEAN = 1,
  QJ_POOL_NONE = 2  /**< gather only: one output row per index */
} qj_pooling;

/** prefetch_distance value that lets the library choose. */
#define QJ_PREFETCH_AUTO (-1)

/** Which prefetch instruction brings the rows `prefetch_distance` indices ahead. */
typedef enum qj_prefetch_hint {
  QJ_PREFETCH_HINT_AUTO = 0,  /**< the library's choice (currently T0 for f32 / f16 / bf16 rows
                                   of dim <= 64, T2 otherwise; on AMD Zen 5 T0 for every row) */
  QJ_PREFETCH_HINT_T0 = 1,    /**< prefetcht0: into L1 */
  QJ_PREFETCH_HINT_T1 = 2,    /**< prefetcht1 */
  QJ_PREFETCH_HINT_T2 = 3,    /**< prefetcht2: into L2 (more misses in flight than L1 allows) */
  QJ_PREFETCH_HINT_NTA = 4    /**< prefetchnta */
} qj_prefetch_hint;

/** Zero-initialize, then set the fields (new fields are appended and default to 0). */
typedef struct qj_embedding_bag_desc {
  qj_dtype row_type;        /**< F32, F16, BF16, FUSED_8BIT/4BIT/2BIT, MXFP4_E2M1, MXINT8, MXFP8 */
  int64_t dim;              /**< elements per row, >= 1 */
  int32_t index_bits;       /**< 32 or 64 */
  int32_t offset_bits;      /**< 32 or 64 */
  int32_t use_lengths;      /**< 0: offsets (num_bags + 1 entries), 1: lengths (num_bags) */
  int32_t weighted;         /**< per-index weights */
  int32_t positional;       /**< weights indexed by position within the bag (needs weighted) */
  qj_pooling pooling;
  qj_dtype out_type;        /**< F32, F16, BF16 */
  int64_t out_stride;       /**< elements between output rows (0: dim; otherwise >= dim) */
  int32_t prefetch_distance;/**< indices ahead to prefetch; 0 disables; QJ_PREFETCH_AUTO */
  int32_t scale_bias_first; /**< fused rows: fp16 scale/bias before the values (FBGEMM TBE) */
  const int32_t* remap;     /**< optional pruned-table remap (index -> row or -1); must stay
                                 valid and unchanged while the plan lives */
  int64_t remap_size;       /**< entries of remap (indices are checked against it) */
  int64_t row_stride;       /**< bytes between table rows (0: the natural row size) */
  qj_prefetch_hint prefetch_hint;
} qj_embedding_bag_desc;

/** Create a plan (generates or fetches its kernels; no kernel is generated in a run call). */
QJ_API qj_status qj_embedding_bag_plan_create(const qj_embedding_bag_desc* desc,
                                              qj_embedding_bag_plan* out);
/** Run the slice part of the bags (NULL: all of them) on the calling thread; the slices share out
 *  the bags by their indices, not their count. A plan may be run concurrently from many threads.
 *  num_rows: rows in the table; outputs: num_bags rows (QJ_POOL_NONE: num_indices rows). */
QJ_API qj_status qj_embedding_bag_run(qj_embedding_bag_plan p, const void* table, int64_t num_rows,
                                      int64_t num_bags, const void* indices, int64_t num_indices,
                                      const void* offsets_or_lengths, const float* weights,
                                      void* out, const qj_partition* part);
/** The arguments of a run, for row formats that need more than one table array. */
typedef struct qj_embedding_bag_args {
  const void* table;
  const uint8_t* table_scales;  /**< SPLIT MX rows: [num_rows][ceil(dim/32)] E8M0 bytes; else NULL */
  int64_t num_rows;
  int64_t num_bags;
  const void* indices;
  int64_t num_indices;
  const void* offsets_or_lengths;
  const float* weights;
  void* out;
} qj_embedding_bag_args;
/** qj_embedding_bag_run with its arguments in a struct (required for SPLIT MX rows). */
QJ_API qj_status qj_embedding_bag_run_ex(qj_embedding_bag_plan p, const qj_embedding_bag_args* args,
                                         const qj_partition* part);
/** Convenience: run on num_threads in [1, 1024] threads of the installed pool
 *  (qj_set_parallel_for; at most one per bag, or per index when gathering). If the built-in pool
 *  cannot start them: QJ_ERR_OUT_OF_MEMORY, nothing written. */
QJ_API qj_status qj_embedding_bag_run_parallel(qj_embedding_bag_plan p, const void* table,
                                               int64_t num_rows, int64_t num_bags,
                                               const void* indices, int64_t num_indices,
                                               const void* offsets_or_lengths,
                                               const float* weights, void* out,
                                               int32_t num_threads);
/** qj_embedding_bag_run_parallel with its arguments in a struct (required for SPLIT MX rows). */
QJ_API qj_status qj_embedding_bag_run_parallel_ex(qj_embedding_bag_plan p, const qj_embedding_bag_args* args,
                                                  int32_t num_threads);
/** The canonical name of the plan's kernel (e.g. "emb_fused8_i64_o64_sum_f32_d128_b8_pf32t2__avx512";
 *  "emb_ref_..." when it runs the reference). Valid while the plan lives. */
QJ_API const char* qj_embedding_bag_plan_kernel_name(qj_embedding_bag_plan p);
QJ_API void qj_embedding_bag_plan_destroy(qj_embedding_bag_plan p);

/** Allocate bytes for a large table: 2 MiB-aligned anonymous memory advised as transparent huge
 *  pages (madvise(MADV_HUGEPAGE)); falls back to normal pages where THP is unavailable. Contents
 *  are zero. Returns NULL on failure (bytes = 0, or more than can be mapped; qj_last_error says
 *  which). Free with qj_embedding_table_free(ptr, bytes). */
QJ_API void* qj_embedding_table_alloc(size_t bytes);
QJ_API void qj_embedding_table_free(void* ptr, size_t bytes);

/* Fused-rowwise table conversion (FBGEMM / PyTorch compatible bytes).
 *
 * Row layouts (dim values per row; value = q * scale + bias):
 *  - QJ_FUSED_8BIT:  [dim x u8][fp32 scale][fp32 bias]                        dim + 8 bytes
 *  - QJ_FUSED_4BIT:  [ceil(dim/2) bytes][fp16 scale][fp16 bias]               ceil(dim/2) + 4 bytes
 *  - QJ_FUSED_2BIT:  [ceil(dim/4) bytes][fp16 scale][fp16 bias]               ceil(dim/4) + 4 bytes
 *  - with QJ_ROWWISE_SCALE_BIAS_FIRST (FBGEMM's TBE rows, its scale_bias_last = false), any width:
 *                    [fp16 scale][fp16 bias][packed values]                   packed + 4 bytes
 *  Packed values: element j is in byte j / (8/bits) at bit (j % (8/bits)) * bits, low bits first;
 *  unused bits of the last byte are zero when written and ignored when read.
 *
 * qj_quantize_rowwise (FBGEMM's FloatOrHalfToFused{8,N}BitRowwiseQuantizedSB{Float,Half} formulas,
 * byte for byte; rounding is to nearest, ties to even):
 *  - fp32 scale/bias (8-bit, scale/bias last): scale = (max - min) / 255, bias = min,
 *    q = rint((x - min) * (255 / (max - min + 1e-8))).
 *  - fp16 scale/bias (4-bit, 2-bit, and 8-bit scale/bias first): bias = fp16(min) and min is
 *    replaced by that fp16 value; scale = fp16((max - min) / (2^bits - 1)) (1 when max == min or
 *    when it rounds to 0); q = clamp(rint((x - min) / scale), 0, 2^bits - 1), the division done as
 *    a multiplication by the fp32 reciprocal 1 / scale.
 *  Errors (nothing is written): a non-finite value (QJ_ERR_INVALID_ARGUMENT naming row and column),
 *  max - min overflowing fp32, or a min / scale outside the fp16 range (naming the row).
 * qj_dequantize_rowwise: x = q * scale + bias, the product rounded to fp32 before the sum (FBGEMM's
 *  Fused*RowwiseQuantizedSB*ToFloatOrHalf); fp16 output rounds that fp32 to nearest even.
 * rows == 0 is a no-op (pointers may be NULL); dim must be >= 1. The results are identical at every
 * ISA tier.
 */
#define QJ_ROWWISE_SCALE_BIAS_FIRST 1u

/** Bytes of one natural (unpadded) fused row of `dim` values; flags: QJ_ROWWISE_SCALE_BIAS_FIRST.
 *  Also accepts QJ_F32 / QJ_F16 / QJ_BF16 (dim * element size). Returns -1 for an unknown type, a
 *  dim < 1 or an overflowing size (qj_last_error says which). */
QJ_API int64_t qj_rowwise_row_bytes(qj_dtype type, int64_t dim, uint32_t flags);
/** qj_quantize_rowwise with fp16 (IEEE binary16) source values. */
QJ_API qj_status qj_quantize_rowwise_f16(qj_dtype dst_type, const uint16_t* src, int64_t rows,
                                         int64_t dim, void* dst);
/** qj_dequantize_rowwise with fp16 output (rounded to nearest even). */
QJ_API qj_status qj_dequantize_rowwise_f16(qj_dtype src_type, const void* src, int64_t rows,
                                           int64_t dim, uint16_t* dst);
/** General form: src_type QJ_F32 or QJ_F16 (rows x dim, dense); dst rows dst_stride bytes apart
 *  (0: the natural row size; otherwise >= it). flags: QJ_ROWWISE_SCALE_BIAS_FIRST. */
QJ_API qj_status qj_quantize_rowwise_ex(qj_dtype dst_type, uint32_t flags, qj_dtype src_type,
                                        const void* src, int64_t rows, int64_t dim, void* dst,
                                        int64_t dst_stride);
/** General form: src rows src_stride bytes apart (0: natural), dst_type QJ_F32 or QJ_F16. */
QJ_API qj_status qj_dequantize_rowwise_ex(qj_dtype src_type, uint32_t flags, const void* src,
                                          int64_t src_stride, int64_t rows, int64_t dim,
                                          qj_dtype dst_type, void* dst);

/* ------------------------------------------------------------------------------------------ */
/* Training: the fused embedding-bag backward with a row-wise sparse optimizer                 */
/* ------------------------------------------------------------------------------------------ */

typedef enum qj_sparse_optimizer {
  QJ_OPT_ROWWISE_ADAGRAD = 0, /**< h[row] += mean_j(G_j^2); w -= lr * G / (sqrt(h[row]) + eps) */
  QJ_OPT_SGD = 1              /**< w -= lr * G (momentum unused, may be NULL) */
} qj_sparse_optimizer;

typedef enum qj_update_mode {
  /** Deterministic: the occurrences of each row are coalesced first (sorted by index, then by
   *  position), G = the sum of their gradients in that order, and each row is updated once.
   *  Bit-identical for any thread count and any run. */
  QJ_UPDATE_COALESCED = 0,
  /** FBGEMM's RowWiseSparseAdaGradFused order: every occurrence updates its row immediately, bag
   *  by bag in index order. With one thread this is deterministic; with several (each takes a
   *  contiguous share of the positions), occurrences of one row in different threads' shares race
   *  and the result depends on timing. */
  QJ_UPDATE_PER_OCCURRENCE_RACY = 1
} qj_update_mode;

/** A fused backward + row-wise optimizer step for one embedding table.
 *
 *  Exact arithmetic (fp32; identical at every ISA tier, in src/ref/rowwise_adagrad_ref.h):
 *   - Occurrence i of bag b at position p: e_i = (weighted ? weights[positional ? p : i] : 1)
 *     * (pooling == QJ_POOL_MEAN ? 1.0f / len_b : 1) (one rounded product; the factor 1 is exact).
 *   - G_j = fma(e_i, grad[b][j], G_j) over the row's occurrences, starting from +0.
 *   - AdaGrad: P_k = fma(G_j, G_j, P_k) for j = k mod 8 in increasing j, then
 *     m = (((P0 + P1) + (P2 + P3)) + ((P4 + P5) + (P6 + P7))) / dim; h[row] = h[row] + m;
 *     step = learning_rate / (sqrtf(h[row]) + epsilon); w_j = fma(-step, G_j, w_j).
 *   - SGD: w_j = fma(-learning_rate, G_j, w_j).
 *   - F16 tables: w_j is widened to fp32, updated, then rounded to nearest even, or with
 *     stochastic_rounding != 0 rounded stochastically with 13 random bits that are a pure function
 *     of (seed, row, j) (reproducible; src/formats/fp16_stochastic.h).
 *  Pruned-row remaps are not supported here. */
typedef struct qj_rowwise_adagrad_desc {
  qj_dtype table_type;           /**< QJ_F32 or QJ_F16 rows of dim elements, dense */
  int64_t dim;
  int32_t index_bits;            /**< 32 or 64 */
  int32_t offset_bits;           /**< 32 or 64 */
  int32_t use_lengths;           /**< 0: offsets (num_bags + 1 entries), 1: lengths */
  int32_t weighted;              /**< per-index (or positional) weights scaled the forward rows */
  int32_t positional;
  qj_pooling pooling;            /**< QJ_POOL_SUM or QJ_POOL_MEAN (the forward pooling) */
  qj_sparse_optimizer optimizer;
  qj_update_mode mode;
  float learning_rate;
  float epsilon;
  int32_t stochastic_rounding;   /**< F16 tables only */
  int64_t grad_stride;           /**< floats between gradient rows (0: dim) */
} qj_rowwise_adagrad_desc;

/** Update table rows (and momentum, one float per table row) in place from the pooled-output
 *  gradients grad[num_bags][grad_stride] of one embedding-bag call. Inputs are validated like
 *  qj_embedding_bag_run (bad index: QJ_ERR_OUT_OF_RANGE naming bag and index; bad offsets or
 *  lengths: QJ_ERR_INVALID_ARGUMENT) before anything is written. num_threads in [1, 1024] threads of the
 *  installed pool (qj_set_parallel_for) share the work (QJ_ERR_OUT_OF_MEMORY, nothing written, if
 *  the built-in pool cannot start them). Rows a few places ahead are prefetched:
 *  with prefetchw, or, for rows of 512 bytes or more in tables larger than the last-level cache,
 *  into L2 (prefetcht1, which keeps more rows in flight from DRAM); smaller rows of such tables
 *  are also prefetched into L2 twice as far ahead. The results do not depend on it. Large tables
 *  belong on huge pages (qj_embedding_table_alloc). */
QJ_API qj_status qj_rowwise_adagrad_fused(const qj_rowwise_adagrad_desc* desc, void* table,
                                          float* momentum, int64_t num_rows, int64_t num_bags,
                                          const void* indices, int64_t num_indices,
                                          const void* offsets_or_lengths, const float* weights,
                                          const float* grad, uint64_t seed, int32_t num_threads);

/* ------------------------------------------------------------------------------------------ */
/* Conversions                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef enum qj_rounding {
  QJ_ROUND_FLOOR = 0, /**< OCP MX scale rule (default) */
  QJ_ROUND_RCEIL = 1  /**< round-up scale: never clamps the block maximum */
} qj_rounding;

QJ_API qj_status qj_quantize_rowwise(qj_dtype dst_type, const float* src, int64_t rows, int64_t dim,
                                     void* dst);
QJ_API qj_status qj_dequantize_rowwise(qj_dtype src_type, const void* src, int64_t rows,
                                       int64_t dim, float* dst);
QJ_API qj_status qj_mx_quantize(qj_dtype mx_type, qj_rounding r, const float* src, int64_t n,
                                void* elems, uint8_t* scales);
QJ_API qj_status qj_mx_dequantize(qj_dtype mx_type, const void* elems, const uint8_t* scales,
                                  int64_t n, float* dst);

/* ------------------------------------------------------------------------------------------ */
/* MX (OCP Microscaling v1.0) and BDR MX9/MX6/MX4 conversions                                 */
/* ------------------------------------------------------------------------------------------ */
/*
 * Semantics (MX.md in the source tree is the normative summary):
 *  - OCP types (QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP6_E3M2, QJ_MXFP6_E2M3, QJ_MXFP4_E2M1,
 *    QJ_MXINT8): blocks of 32 consecutive values share one E8M0 scale byte b, X = 2^(b-127);
 *    b = 0xFF is NaN and makes every value of its block NaN on decode.
 *  - Scale rule, qj_rounding: QJ_ROUND_FLOOR (OCP 6.3: X = 2^(floor(log2 amax) - emax_elem), the
 *    exponent taken from the fp32 bits) or QJ_ROUND_RCEIL (smallest power of two X with
 *    amax / X <= the element's max value). Both clamp to 2^-127 <= X <= 2^(127 - emax_elem)
 *    (emax_elem = 8, 15, 4, 2, 2, 0 in the order above): the largest X whose max * X is finite,
 *    so no finite block decodes to Inf (near FLT_MAX, RCEIL then saturates like FLOOR).
 *  - Elements: V / X rounded to nearest, ties to even, saturated to +-max (E4M3 never becomes NaN
 *    from a finite input), the sign of zero kept. MXINT8 codes are RNE(64 V / X) clamped to
 *    [-127, 127]; -128 is never produced but is decoded (-2 X).
 *  - An all-zero block gets scale 0x00 and codes 0; a block holding a NaN or +-Inf gets scale 0xFF
 *    and codes 0.
 *  - Decoding is code value * X in fp32 (exact unless it leaves the fp32 range: +-Inf above).
 *    BF16 output is that fp32 result rounded to nearest even.
 *  - BF16 input is widened to fp32 exactly first.
 *  - The result does not depend on the ISA tier or on the caller's MXCSR (FTZ/DAZ, rounding).
 *
 * QJ_MX_LAYOUT_SPLIT (what qj_mx_quantize writes): two arrays.
 *  - elems: ceil(n/32) whole blocks, element i of the input in block i/32. Bytes per block:
 *      FP8 / INT8: 32, one code per byte (INT8 two's complement);
 *      FP6: 24, an LSB-first bit stream, element i at bits [6i, 6i+6): 4 codes c0..c3 in 3 bytes,
 *           b0 = c0 | c1 << 6, b1 = c1 >> 2 | c2 << 4, b2 = c2 >> 4 | c3 << 2 (library-defined);
 *      FP4: 16, byte j = c[2j] | c[2j+1] << 4 (low nibble = even element, as PyTorch
 *           float4_e2m1fn_x2 and FBGEMM's triton MX4).
 *    Elements past n in the last block are written as code 0 (+0.0) and count as zeros for its
 *    scale.
 *  - scales: ceil(n/32) E8M0 bytes, one per block.
 *  Element codes: FP types S|E|M with the sign in the top bit (E4M3 bias 7, S.1111.111 = NaN;
 *  E5M2 bias 15, exponent 31 = Inf/NaN; E3M2 bias 3; E2M3 bias 1; E2M1 bias 1; FP6/FP4 have no
 *  Inf/NaN).
 *
 * BDR types (QJ_BDR_MX9, QJ_BDR_MX6, QJ_BDR_MX4): self-contained blocks of 16 values in `elems`;
 * `scales` must be NULL and the rounding QJ_ROUND_FLOOR. Block bytes (LSB-first bit stream):
 *  byte 0 = E, the largest biased fp32 exponent field of the block (0xFF: NaN block);
 *  byte 1 = microexponent bits, bit j for the pair {2j, 2j+1}: 1 when both values have exponent
 *           field <= E-1;
 *  then 16 fields of 1+m bits (m = 7, 4, 2), element i at bits [(1+m)i, (1+m)(i+1)) of the bytes
 *  from byte 2 on, magnitude M in the low m bits, sign in the top bit.
 *  value = (-1)^s * M * 2^(E - 127 - mu + 1 - m), M = RNE(|V| / 2^(E-127-mu+1-m)) <= 2^m - 1.
 *  Block sizes: MX9 18 bytes, MX6 12, MX4 8; ceil(n/16) blocks, padding values +0.0.
 *
 * QJ_MX_LAYOUT_GGML_MXFP4 (QJ_MXFP4_E2M1 only): ceil(n/32) blocks of 17 bytes, ggml's
 *  block_mxfp4 {uint8_t e; uint8_t qs[16];}: e = the E8M0 scale byte, qs[j] = c[j] | c[j+16] << 4
 *  (low nibble = first half of the block). Byte-compatible with GGUF / llama.cpp MXFP4 tensors.
 * QJ_MX_LAYOUT_FBGEMM_MX4 (QJ_MXFP4_E2M1 only): ceil(n/32) groups of 17 bytes, FBGEMM's MX4 row
 *  format (triton / CPU path): 16 data bytes with byte j = c[2j] | c[2j+1] << 4, then the E8M0
 *  byte. (FBGEMM's CUDA path puts the even element in the HIGH nibble and is not this layout.)
 *
 * Common rules: n == 0 is a no-op (pointers may then be NULL); otherwise every pointer must be
 * non-NULL (except scales for BDR, which must be NULL). Buffers must not overlap.
 */

typedef enum qj_mx_layout {
  QJ_MX_LAYOUT_SPLIT = 0,        /**< elems + separate scales (the library's own layout) */
  QJ_MX_LAYOUT_GGML_MXFP4 = 1,   /**< 17-byte {e, qs[16]} blocks, first/second-half nibbles */
  QJ_MX_LAYOUT_FBGEMM_MX4 = 2    /**< 17-byte [16 data][1 exponent] groups, low nibble even */
} qj_mx_layout;

/** Bytes needed for n values of mx_type in layout: *elem_bytes for the element (or block) array,
 *  *scale_bytes for the separate scales (0 for BDR and the 17-byte layouts). Either output
 *  pointer may be NULL. */
QJ_API qj_status qj_mx_storage_size(qj_mx_layout layout, qj_dtype mx_type, int64_t n,
                                    size_t* elem_bytes, size_t* scale_bytes);
/** Quantize n values of src_type (QJ_F32 or QJ_BF16) to mx_type in the SPLIT layout (OCP types)
 *  or to BDR blocks (scales NULL). qj_mx_quantize(t, r, src, n, e, s) is
 *  qj_mx_quantize_ex(t, r, QJ_F32, src, n, e, s). */
QJ_API qj_status qj_mx_quantize_ex(qj_dtype mx_type, qj_rounding r, qj_dtype src_type,
                                   const void* src, int64_t n, void* elems, uint8_t* scales);
/** Decode n values to dst_type (QJ_F32 or QJ_BF16). qj_mx_dequantize(t, e, s, n, dst) is
 *  qj_mx_dequantize_ex(t, e, s, n, QJ_F32, dst). For BDR types scales must be NULL. */
QJ_API qj_status qj_mx_dequantize_ex(qj_dtype mx_type, const void* elems, const uint8_t* scales,
                                     int64_t n, qj_dtype dst_type, void* dst);
/** Convert n values of SPLIT MX data (elems, scales) to a foreign layout (GGML_MXFP4 or
 *  FBGEMM_MX4; mx_type must be QJ_MXFP4_E2M1). dst holds qj_mx_storage_size bytes. */
QJ_API qj_status qj_mx_export(qj_mx_layout layout, qj_dtype mx_type, const void* elems,
                              const uint8_t* scales, int64_t n, void* dst);
/** The inverse: read n values in a foreign layout into SPLIT elems and scales. Codes past n in
 *  the last block are set to 0 (the SPLIT padding rule), whatever the source held there. */
QJ_API qj_status qj_mx_import(qj_mx_layout layout, qj_dtype mx_type, const void* src, int64_t n,
                              void* elems, uint8_t* scales);

/* ------------------------------------------------------------------------------------------ */
/* Kernel cache                                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef struct qj_cache_stats_t {
  uint64_t hits;              /**< lookups answered from the cache */
  uint64_t misses;            /**< lookups that generated a kernel */
  uint64_t evictions;         /**< kernels dropped to respect QJ_CACHE_MAX_BYTES */
  uint64_t entries;           /**< kernels in the cache now */
  uint64_t code_bytes;        /**< bytes of JIT code held now (cached or pinned by live plans) */
  uint64_t max_bytes;         /**< the bound (QJ_CACHE_MAX_BYTES; default 64 MiB) */
  uint64_t generation_ns;     /**< total time spent generating kernels */
  uint64_t fallbacks;         /**< plans that fell back to the scalar reference */
} qj_cache_stats_t;

QJ_API void qj_cache_stats(qj_cache_stats_t* out);
/** Drop every cached kernel not used by a live plan. */
QJ_API void qj_cache_clear(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QUANTJIT_H_ */
