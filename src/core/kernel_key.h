// The kernel key: every parameter that changes the emitted code, and nothing else.
//
// Following libxsmm's descriptors, the key is a plain struct that is zeroed before it is filled
// and hashed and compared as raw bytes, so two keys are equal exactly when they would produce the
// same code. Fields that do not apply to a family stay zero. Problem sizes that only change loop
// trip counts (M, K, N as run-time arguments) are NOT in the key: one kernel serves all of them.
// Blocking is chosen in src/ops; a generator does what its key says.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace qj {

enum class KernelOp : uint8_t {
  kNone = 0,
  kGemmInt = 1,      // integer-weight GEMM microkernel (s8 / s4 / u4 / integer MX weights)
  kGemmFloat = 2,    // float-weight GEMM microkernel (f16 / bf16 / f32 / fp8 weights)
  kEmbeddingBag = 3, // gather + decode + pool
  kConvert = 4,      // bulk format conversion
};

struct KernelKey {
  KernelOp op;          // which generator
  uint8_t isa;          // qj_isa the code may use
  uint8_t a_type;       // qj_dtype of the streamed operand as the kernel sees it (A, or rows)
  uint8_t b_type;       // qj_dtype of packed weights (GEMM) / index width (embedding)
  uint8_t c_type;       // qj_dtype stored by the epilogue
  uint8_t mr;           // rows of the register tile (GEMM)
  uint16_t nr;          // columns of the register tile (GEMM) / dim (embedding, low 16 bits)
  uint8_t granularity;  // qj_granularity of the weight scales: tensor/channel vs group changes
                        //   the accumulation structure (int32 group sums folded in fp32)
  uint8_t has_bias;     // epilogue adds a per-column fp32 bias
  uint8_t activation;   // qj_activation applied in the epilogue
  uint8_t has_b_zp;     // weight zero points need the row-sum correction (vpmulld)
  uint8_t has_row_scale;// per-row fp32 scale of A (dynamic quantization)
  uint8_t has_beta;     // float outputs: C = y + beta * C
  uint8_t n_tail;       // columns in a partial last panel (0: none); masks / tail stores
  uint8_t flags;        // family-specific switches (documented by each family)
  uint32_t group_size;  // K group of the weight scales (0 when not grouped)
  uint32_t param[6];    // family-specific parameters (documented by each family)
  uint32_t epilogue;    // output-stage variant bits shared by the GEMM families (codegen/epilogue.h)
  uint32_t reserved[4]; // zero; keeps the size at 64 bytes

  static KernelKey zeroed() {
    KernelKey k;
    std::memset(&k, 0, sizeof k);
    return k;
  }
  bool operator==(const KernelKey& o) const { return std::memcmp(this, &o, sizeof o) == 0; }
  uint64_t hash() const;
};
static_assert(sizeof(KernelKey) == 64, "KernelKey must stay a padding-free 64-byte blob");

}  // namespace qj
