// Aligned, owning byte buffers (64-byte aligned: one cache line, one zmm).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace qj {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Returns false on allocation failure. `slack` bytes more are allocated (and zeroed with the
  // rest) but not counted in size(): room for readers that may read past the end.
  bool allocate(size_t bytes, bool zero = true, size_t slack = 0) {
    size_t rounded = (bytes + slack + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) return false;
    if (zero) std::memset(p, 0, rounded);
    p_.reset(p);
    size_ = bytes;
    return true;
  }
  template <class T = void>
  T* data() const { return static_cast<T*>(p_.get()); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<void, FreeDeleter> p_;
  size_t size_ = 0;
};

}  // namespace qj
