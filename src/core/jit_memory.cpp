#include "src/core/jit_memory.h"

#include <sys/mman.h>
#include <unistd.h>

namespace qj {

bool jit_alloc_and_seal(size_t size, bool (*fill)(void*, void*, void*), void* ctx, JitBlock* out) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t bytes = (size + page - 1) / page * page;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  if (!fill(ctx, p, p) || mprotect(p, bytes, PROT_READ | PROT_EXEC) != 0) {
    munmap(p, bytes);
    return false;
  }
  out->code = p;
  out->bytes = bytes;
  return true;
}

void jit_free(const JitBlock& b) {
  if (b.code) munmap(b.code, b.bytes);
}

}  // namespace qj
