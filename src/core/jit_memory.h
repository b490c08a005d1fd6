// JIT memory that is never writable and executable at the same time (W^X).
//
// Each kernel gets its own mapping: it is mapped read-write, the code is copied in, and the
// mapping is switched to read-execute with mprotect before anyone can call it. There is no
// writable alias of executable memory (unlike a dual mapping), at the cost of rounding each kernel
// up to a page; kernels are a few KiB, and the cache bounds their number.
#pragma once
#include <cstddef>

namespace qj {

struct JitBlock {
  void* code = nullptr;  // read-execute
  size_t bytes = 0;      // mapping size (a multiple of the page size)
};

// Copies `size` bytes of position-dependent code produced for base address `addr_out` by `emit`:
// the callback receives the final address and must write exactly `size` bytes into `dst`.
bool jit_alloc_and_seal(size_t size, bool (*fill)(void* ctx, void* dst, void* final_addr),
                        void* ctx, JitBlock* out);
void jit_free(const JitBlock& b);

}  // namespace qj
