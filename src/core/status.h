// Thread-local error reporting shared by every layer.
//
// A failing function calls qj::fail(code, "fmt", ...) and returns its result; the C API hands the
// code to the caller and qj_last_error() returns the text. Keeping this in core (not api) lets
// ops validate deep arguments (an index in a bag, a corrupt blob) and still name them precisely.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <cstring>
#include <new>

#include "src/core/fp_env.h"

namespace qj {

// Records the message for this thread and returns `code`, so callers can `return fail(...)`.
qj_status fail(qj_status code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void clear_error();
const char* last_error();

// The value a caller stored in a C enum field, read as the integer it is. Loading an out-of-range
// value through the C++ enum type is undefined behaviour (and UBSan reports it), so argument checks
// compare raw values and only then trust the field.
template <class E>
inline int32_t raw_enum(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "C API enums are int-sized");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Runs f (returning qj_status) so that no C++ exception leaves the C API: allocation failure
// becomes QJ_ERR_OUT_OF_MEMORY, anything else QJ_ERR_INTERNAL; and in the default floating-point
// environment (src/core/fp_env.h).
template <class F>
qj_status guarded(F&& f) {
  DefaultFpEnv fp_env;
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(QJ_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (...) {
    return fail(QJ_ERR_INTERNAL, "unexpected C++ exception");
  }
}

}  // namespace qj

// Propagate a failing qj_status.
#define QJ_TRY(expr)                        \
  do {                                      \
    qj_status qj_try_s_ = (expr);           \
    if (qj_try_s_ != QJ_OK) return qj_try_s_; \
  } while (0)
