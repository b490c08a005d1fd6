// Command-line reading shared by the quantjit-bench subcommands: strict numbers, comma lists,
// and one message per bad argument naming the option and the value it got. A bad argument
// makes the subcommand exit with status 2 after that message; it is never read as 0, as a
// default, or as an empty selection.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bench {

// The comma-separated items of s ("a,b" -> {"a", "b"}; "" -> {""}).
std::vector<std::string> split_list(const std::string& s);

// s as a decimal integer in [lo, hi] and nothing else (no trailing characters, no blanks).
bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t* out);

// Prints "quantjit-bench <cmd>: <message>" and a pointer to --help on stderr; returns false.
bool arg_error(const char* cmd, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The same for an option's value: "<option>: '<value>' is not <what>", or
// "<option> needs a value" when value is NULL.
bool bad_value(const char* cmd, const std::string& option, const char* value, const char* what);

// True for --help and -h.
bool is_help(const std::string& arg);

}  // namespace bench
