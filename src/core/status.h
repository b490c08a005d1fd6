// Thread-local error reporting shared by every layer.
//
// A failing function calls qj::fail(code, "fmt", ...) and returns its result; the C API hands the
// code to the caller and qj_last_error() returns the text. Keeping this in core (not api) lets
// ops validate deep arguments (an index in a bag, a corrupt blob) and still name them precisely.
#pragma once
#include <quantjit/quantjit.h>

namespace qj {

// Records the message for this thread and returns `code`, so callers can `return fail(...)`.
qj_status fail(qj_status code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void clear_error();
const char* last_error();

}  // namespace qj

// Propagate a failing qj_status.
#define QJ_TRY(expr)                        \
  do {                                      \
    qj_status qj_try_s_ = (expr);           \
    if (qj_try_s_ != QJ_OK) return qj_try_s_; \
  } while (0)
