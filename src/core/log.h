// QJ_VERBOSE logging. Level 1: one line per generated kernel (name, bytes, microseconds) and per
// fallback to the reference path. Level 2: also why each dispatch candidate declined.
// Lines go to stderr, prefixed "quantjit:", like ONEDNN_VERBOSE.
#pragma once

namespace qj {

int verbose_level();
void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace qj

#define QJ_LOG(level, ...)                                 \
  do {                                                     \
    if (::qj::verbose_level() >= (level)) ::qj::log_line(__VA_ARGS__); \
  } while (0)
