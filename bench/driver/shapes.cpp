// Shape lists: CSV reader and --shapes resolution (shapes.h).
#include "driver/shapes.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#ifndef QJ_SHAPES_DIR
#define QJ_SHAPES_DIR "bench/shapes"
#endif
#ifndef QJ_PLOT_SCRIPT
#define QJ_PLOT_SCRIPT "bench/plot.py"
#endif

namespace bench {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) v.push_back(trim(cur));
  if (!s.empty() && s.back() == sep) v.push_back("");
  return v;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_row(const std::vector<std::string>& cells, std::vector<int64_t>* row) {
  row->clear();
  for (const std::string& c : cells) {
    if (c.empty()) return false;
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(c.c_str(), &end, 10);
    if (errno || !end || *end != '\0') return false;  // (errno: beyond 64 bits)
    row->push_back(v);
  }
  return true;
}

bool file_exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string base_name(const std::string& p) {
  size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// Appends src to dst, checking the columns agree.
bool append(CsvTable* dst, const CsvTable& src, const std::string& what, std::string* err) {
  if (dst->columns.empty()) {
    dst->columns = src.columns;
  } else {
    bool same = dst->columns.size() == src.columns.size();
    for (size_t i = 0; same && i < src.columns.size(); ++i)
      same = lower(dst->columns[i]) == lower(src.columns[i]);
    if (!same) {
      *err = what + ": columns differ from the previous shape file";
      return false;
    }
  }
  dst->rows.insert(dst->rows.end(), src.rows.begin(), src.rows.end());
  dst->row_source.insert(dst->row_source.end(), src.row_source.begin(), src.row_source.end());
  return true;
}

}  // namespace

int CsvTable::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (lower(columns[i]) == lower(name)) return static_cast<int>(i);
  return -1;
}

bool read_csv(const std::string& path, CsvTable* out, std::string* err) {
  std::ifstream f(path);
  if (!f) {
    *err = "cannot open shape file '" + path + "'";
    return false;
  }
  *out = CsvTable{};
  std::string line;
  int lineno = 0;
  const std::string src = base_name(path);
  while (std::getline(f, line)) {
    ++lineno;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::vector<std::string> cells = split(t, ',');
    if (out->columns.empty()) {
      out->columns = cells;
      continue;
    }
    std::vector<int64_t> row;
    if (cells.size() != out->columns.size() || !parse_row(cells, &row)) {
      *err = path + ":" + std::to_string(lineno) + ": expected " +
             std::to_string(out->columns.size()) + " 64-bit integers, got '" + t + "'";
      return false;
    }
    out->rows.push_back(row);
    out->row_source.push_back(src);
  }
  if (out->columns.empty()) {
    *err = path + ": no header line";
    return false;
  }
  return true;
}

bool resolve_shapes(const std::string& spec, const std::vector<NamedShapeList>& named,
                    const std::vector<std::string>& inline_columns, CsvTable* out,
                    std::string* err) {
  for (const NamedShapeList& n : named) {
    if (spec != n.name) continue;
    for (const char* file : n.files) {
      CsvTable t;
      std::string path = shapes_dir() + "/" + file;
      if (!read_csv(path, &t, err) || !append(out, t, path, err)) return false;
    }
    return true;
  }
  if (file_exists(spec)) {
    CsvTable t;
    return read_csv(spec, &t, err) && append(out, t, spec, err);
  }
  // Inline: "64,800,320;1,4096,4096".
  if (!spec.empty() && (std::isdigit(static_cast<unsigned char>(spec[0])) || spec[0] == '-')) {
    CsvTable t;
    t.columns = inline_columns;
    for (const std::string& r : split(spec, ';')) {
      std::vector<int64_t> row;
      if (!parse_row(split(r, ','), &row) || row.size() != inline_columns.size()) {
        *err = "inline shape '" + r + "' is not " + std::to_string(inline_columns.size()) +
               " integers (64-bit)";
        return false;
      }
      t.rows.push_back(row);
      t.row_source.push_back("inline");
    }
    return append(out, t, "inline shapes", err);
  }
  std::string names;
  for (const NamedShapeList& n : named) names += std::string(names.empty() ? "" : ", ") + n.name;
  std::string cols;
  for (const std::string& c : inline_columns) cols += std::string(cols.empty() ? "" : ",") + c;
  *err = "--shapes '" + spec + "' is not a named list (" + names + "), an existing file, or inline " + cols +
         " rows";
  return false;
}

std::string shapes_dir() {
  if (const char* e = std::getenv("QJ_SHAPES_DIR")) return e;
  return QJ_SHAPES_DIR;
}

std::string plot_script() { return QJ_PLOT_SCRIPT; }

}  // namespace bench
