#include "src/core/log.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace qj {

int verbose_level() {
  static const int level = [] {
    const char* v = std::getenv("QJ_VERBOSE");
    return v ? std::atoi(v) : 0;
  }();
  return level;
}

void log_line(const char* fmt, ...) {
  static std::mutex mu;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "quantjit: %s\n", buf);
}

}  // namespace qj
