// quantjit.hpp -- header-only C++ RAII layer over the C API (like oneDNN's dnnl.hpp).
//
// Errors become qjpp::error exceptions carrying the status and qj_last_error()'s message; the
// C API underneath never throws. Handles are move-only and destroyed automatically.
#ifndef QUANTJIT_HPP_
#define QUANTJIT_HPP_

#include <quantjit/quantjit.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace qjpp {

class error : public std::runtime_error {
 public:
  error(qj_status s, const std::string& what) : std::runtime_error(what), status_(s) {}
  qj_status status() const noexcept { return status_; }

 private:
  qj_status status_;
};

inline void check(qj_status s) {
  if (s != QJ_OK) throw error(s, std::string(qj_status_name(s)) + ": " + qj_last_error());
}

template <class H, void (*Destroy)(H)>
class handle {
 public:
  handle() = default;
  explicit handle(H h) noexcept : h_(h) {}
  handle(handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  handle& operator=(handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  handle(const handle&) = delete;
  handle& operator=(const handle&) = delete;
  ~handle() { reset(); }
  void reset() noexcept {
    if (h_) Destroy(h_);
    h_ = nullptr;
  }
  H get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  H h_ = nullptr;
};

class weights : public handle<qj_weights, qj_weights_destroy> {
 public:
  using handle::handle;
  static weights pack(const qj_weights_desc& d, const void* data, int64_t ld) {
    qj_weights w = nullptr;
    check(qj_weights_pack(&d, data, ld, &w));
    return weights(w);
  }
  static weights quantize_pack(const qj_weights_desc& d, const float* data, int64_t ld) {
    qj_weights w = nullptr;
    check(qj_weights_quantize_pack(&d, data, ld, &w));
    return weights(w);
  }
  static weights deserialize(const void* buf, size_t size) {
    qj_weights w = nullptr;
    check(qj_weights_deserialize(buf, size, &w));
    return weights(w);
  }
  size_t serialized_size() const { return qj_weights_serialized_size(get()); }
  void serialize(void* buf, size_t size) const { check(qj_weights_serialize(get(), buf, size)); }
};

class gemm_plan : public handle<qj_gemm_plan, qj_gemm_plan_destroy> {
 public:
  using handle::handle;
  gemm_plan(const qj_gemm_desc& d, const weights& b) {
    qj_gemm_plan p = nullptr;
    check(qj_gemm_plan_create(&d, b.get(), &p));
    *this = gemm_plan(p);
  }
  void run(int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
           const qj_partition* part = nullptr) const {
    check(qj_gemm_run(get(), m, a, lda, c, ldc, part));
  }
  void run_parallel(int64_t m, const void* a, int64_t lda, void* c, int64_t ldc, int32_t threads) const {
    check(qj_gemm_run_parallel(get(), m, a, lda, c, ldc, threads));
  }
};

}  // namespace qjpp

#endif  // QUANTJIT_HPP_
