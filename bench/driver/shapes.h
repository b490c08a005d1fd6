// Shape lists for quantjit-bench: CSV files under bench/shapes/ (QJ_SHAPES_DIR), named lists,
// or inline shapes.
//
// File format: lines starting with '#' are comments, blank lines are skipped, the first other
// line is the header (column names, e.g. "M,N,K"), every later line holds integers.
// A --shapes argument is resolved by resolve_shapes():
//   - a name from the command's list of named lists (e.g. gemm: "fbgemm" -> acc32 + gemms files);
//   - an existing file path;
//   - inline rows "64,800,320" or "64,800,320;1,4096,4096" (columns = the command's default
//     header).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bench {

struct CsvTable {
  std::vector<std::string> columns;         // header names as written (case kept)
  std::vector<std::vector<int64_t>> rows;   // one entry per data line, same width as columns
  std::vector<std::string> row_source;      // file (base name) each row came from
  // Index of a column by case-insensitive name, or -1.
  int column(const std::string& name) const;
};

// Reads one CSV file of integers. Returns false with *err naming the file and line.
bool read_csv(const std::string& path, CsvTable* out, std::string* err);

struct NamedShapeList {
  const char* name;                 // e.g. "fbgemm"
  std::vector<const char*> files;   // file names under QJ_SHAPES_DIR, concatenated in order
};

// Resolves spec (see above) and appends the rows to *out (which may start empty: columns are
// taken from the first file, and every later file must have the same columns).
bool resolve_shapes(const std::string& spec, const std::vector<NamedShapeList>& named,
                    const std::vector<std::string>& inline_columns, CsvTable* out,
                    std::string* err);

// Directory holding the shape files (QJ_SHAPES_DIR: the environment variable, else bench/shapes/
// of the source tree).
std::string shapes_dir();
// bench/plot.py of the source tree (--plot).
std::string plot_script();

}  // namespace bench
