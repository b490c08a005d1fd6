#include "driver/cli.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace bench {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  size_t a = 0;
  for (;;) {
    const size_t b = s.find(',', a);
    v.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) return v;
    a = b + 1;
  }
}

bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty() || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || !end || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool arg_error(const char* cmd, const char* fmt, ...) {
  std::fprintf(stderr, "quantjit-bench %s: ", cmd);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n(quantjit-bench %s --help lists the options)\n", cmd);
  return false;
}

bool bad_value(const char* cmd, const std::string& option, const char* value, const char* what) {
  if (!value) return arg_error(cmd, "%s needs a value", option.c_str());
  return arg_error(cmd, "%s: '%s' is not %s", option.c_str(), value, what);
}

bool is_help(const std::string& arg) { return arg == "--help" || arg == "-h"; }

}  // namespace bench
