// Packed integer weights (S8 now; the INT4 issue extends the same object): quantization
// parameters, the packed panels in the layout of one ISA tier, and the column sums the zero-point
// corrections need. Packed once, shared (read-only) by every plan made from it.
//
// Layout of `packed` (docs/kernel-contract.md): N is cut into panels of nr columns (the last one
// zero-padded); each panel holds kp/kg groups of K; each group is nr columns x 4 bytes:
//   kg = 4 (avx512_vnni): 4 consecutive s8 values of K for one column (vpdpbusd quads);
//   kg = 2 (avx512, avx2, scalar): 2 consecutive s16 values of K for one column (vpmaddwd pairs).
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "src/core/buffer.h"

namespace qj {

struct PackedWeights {
  qj_dtype dtype = QJ_S8;
  int64_t k = 0, n = 0;
  qj_granularity gran = QJ_GRAN_TENSOR;
  int64_t group_size = 0;            // QJ_GRAN_GROUP only
  std::vector<float> scales;         // 1, n or groups*n
  std::vector<int32_t> zero_points;  // same count, or empty when all zero
  qj_isa isa = QJ_ISA_SCALAR;        // tier whose layout `packed` uses
  int32_t nr = 0, kg = 0;
  int64_t kp = 0;                    // K padded to a multiple of kg
  int64_t n_panels = 0;
  AlignedBuffer packed;
  std::vector<int32_t> colsum;       // [groups][n]: sum of q over the group's K

  int64_t groups() const { return gran == QJ_GRAN_GROUP ? k / group_size : 1; }
  int64_t k_groups() const { return kp / kg; }
  size_t panel_bytes() const { return static_cast<size_t>(k_groups()) * nr * 4; }
  int32_t q(int64_t kk, int64_t col) const;  // read back one quantized value
  float scale(int64_t g, int64_t col) const;
  int32_t zp(int64_t g, int64_t col) const;
};

// Panel geometry of a tier for N columns.
int32_t weights_nr(qj_isa isa, int64_t n);
int32_t weights_kg(qj_isa isa);

// Validates desc (for packing integers when `quantized`, or for quantizing fp32 otherwise).
qj_status check_int_weights_desc(const qj_weights_desc* desc, bool quantized);
qj_status pack_int_weights(const qj_weights_desc& desc, const void* data, int64_t ld, qj_isa isa,
                           std::shared_ptr<PackedWeights>* out);
// Symmetric quantization of fp32 weights (per channel or per group: amax / 127), then packing.
qj_status quantize_int_weights(const qj_weights_desc& desc, const float* w, int64_t ld, qj_isa isa,
                               std::shared_ptr<PackedWeights>* out);
// The same weights in the layout of another tier.
qj_status repack_int_weights(const PackedWeights& w, qj_isa isa, std::shared_ptr<PackedWeights>* out);

// Versioned, checksummed images (see serialize.cpp for the format).
size_t weights_serialized_size(const PackedWeights& w);
qj_status weights_serialize(const PackedWeights& w, void* buf, size_t size);
qj_status weights_deserialize(const void* buf, size_t size, qj_isa isa,
                              std::shared_ptr<PackedWeights>* out);

}  // namespace qj
