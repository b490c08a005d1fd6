// Scalar reference of the fused embedding-bag backward with row-wise AdaGrad / SGD.
//
// The exact arithmetic is the one documented on qj_rowwise_adagrad_desc (quantjit.h); this file
// is its plain transcription, one row and one element at a time:
//  - coalesced mode: occurrences sorted by (index, position); per unique row, G accumulated with
//    fma in that order, then one optimizer step;
//  - per-occurrence mode: bags in order, positions in order, one step per occurrence with
//    G = fma(e, grad, +0).
// Vector code (src/ops/rowwise_adagrad.cpp) must give the same bits at every ISA tier.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj::ref {

// Inputs must be valid (indices in [0, num_rows), offsets / lengths consistent); returns false
// otherwise, possibly after updating some rows.
bool rowwise_adagrad_fused(const qj_rowwise_adagrad_desc& d, void* table, float* momentum,
                           int64_t num_rows, int64_t num_bags, const void* indices,
                           int64_t num_indices, const void* offsets_or_lengths,
                           const float* weights, const float* grad, uint64_t seed);

// The optimizer step of one row given its summed gradient G (shared by both modes).
void rowwise_update_row(const qj_rowwise_adagrad_desc& d, void* table, float* momentum, int64_t row,
                        const float* G, uint64_t seed);

}  // namespace qj::ref
