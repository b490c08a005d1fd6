#include "src/core/status.h"

#include <cstdarg>
#include <cstdio>

namespace qj {
namespace {
thread_local char t_error[512];
}

qj_status fail(qj_status code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_error, sizeof t_error, fmt, ap);
  va_end(ap);
  return code;
}

void clear_error() { t_error[0] = '\0'; }
const char* last_error() { return t_error; }

}  // namespace qj
