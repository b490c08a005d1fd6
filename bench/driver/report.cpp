// Report: records of ordered key/value fields, printed as a table, CSV or JSON Lines (report.h).
#include "driver/report.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace bench {

bool parse_format(const char* s, Format* out) {
  if (!s) return false;
  if (!std::strcmp(s, "table")) *out = Format::kTable;
  else if (!std::strcmp(s, "csv")) *out = Format::kCsv;
  else if (!std::strcmp(s, "json") || !std::strcmp(s, "jsonl")) *out = Format::kJson;
  else return false;
  return true;
}

Field& Record::slot(const std::string& key) {
  for (Field& f : fields_)
    if (f.key == key) return f;
  fields_.emplace_back();
  fields_.back().key = key;
  return fields_.back();
}

Record& Record::set(const std::string& key, const std::string& v) {
  Field& f = slot(key);
  f.kind = Field::Kind::kString;
  f.s = v;
  return *this;
}

Record& Record::set(const std::string& key, int64_t v) {
  Field& f = slot(key);
  f.kind = Field::Kind::kInt;
  f.i = v;
  return *this;
}

Record& Record::set(const std::string& key, double v, int decimals) {
  Field& f = slot(key);
  f.kind = Field::Kind::kDouble;
  f.d = v;
  f.decimals = decimals;
  return *this;
}

const Field* Record::find(const std::string& key) const {
  for (const Field& f : fields_)
    if (f.key == key) return &f;
  return nullptr;
}

std::string cell(const Field& f) {
  char buf[64];
  switch (f.kind) {
    case Field::Kind::kString: return f.s;
    case Field::Kind::kInt:
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(f.i));
      return buf;
    case Field::Kind::kDouble:
      if (!std::isfinite(f.d)) return "-";
      // Very small magnitudes (seconds) would print as 0.000 with fixed decimals: use %g there.
      if (f.d != 0 && std::fabs(f.d) < std::pow(10.0, -f.decimals))
        std::snprintf(buf, sizeof buf, "%.*g", std::max(f.decimals, 1), f.d);
      else
        std::snprintf(buf, sizeof buf, "%.*f", f.decimals, f.d);
      return buf;
  }
  return "";
}

std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o;
}

std::string json_value(const Field& f) {
  char buf[64];
  switch (f.kind) {
    case Field::Kind::kString: return "\"" + json_escape(f.s) + "\"";
    case Field::Kind::kInt:
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(f.i));
      return buf;
    case Field::Kind::kDouble:
      if (!std::isfinite(f.d)) return "null";
      std::snprintf(buf, sizeof buf, "%.9g", f.d);
      return buf;
  }
  return "null";
}

template <class Hidden>
static void print_json_record(FILE* f, const Record& r, Hidden&& hidden) {
  std::string line = "{";
  bool first = true;
  for (const Field& x : r.fields()) {
    if (hidden(x.key)) continue;
    if (!first) line += ", ";
    first = false;
    line += "\"" + json_escape(x.key) + "\": " + json_value(x);
  }
  line += "}\n";
  std::fputs(line.c_str(), f);
}

static std::string csv_cell(const Field* f) {
  if (!f) return "";
  std::string c = cell(*f);
  if (f->kind == Field::Kind::kDouble && !std::isfinite(f->d)) return "";
  if (c.find_first_of(",\"\n") != std::string::npos) {
    std::string q = "\"";
    for (char ch : c) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  }
  return c;
}

Report::~Report() { finish(); }

void Report::hide(Format f, const std::vector<std::string>& keys) {
  if (f == fmt_) hidden_.insert(hidden_.end(), keys.begin(), keys.end());
}

void Report::declare(const std::vector<std::string>& keys) {
  declared_.insert(declared_.end(), keys.begin(), keys.end());
}

bool Report::hidden(const std::string& key) const {
  return std::find(hidden_.begin(), hidden_.end(), key) != hidden_.end();
}

Record& Report::add() {
  flush_pending();
  records_.emplace_back();
  return records_.back();
}

void Report::note(const std::string& line) {
  if (fmt_ == Format::kTable) {
    notes_.push_back(line);
    return;
  }
  flush_pending();
  if (fmt_ == Format::kCsv) std::fprintf(out_, "# %s\n", line.c_str());
  else std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(out_);
}

void Report::flush_pending() {
  if (fmt_ == Format::kTable) return;
  for (; printed_ < records_.size(); ++printed_) {
    const Record& r = records_[printed_];
    if (fmt_ == Format::kJson) {
      print_json_record(out_, r, [this](const std::string& k) { return hidden(k); });
    } else {
      if (csv_columns_.empty()) {
        for (const std::string& k : declared_)
          if (!hidden(k)) csv_columns_.push_back(k);
        for (const Field& f : r.fields())
          if (!hidden(f.key) &&
              std::find(csv_columns_.begin(), csv_columns_.end(), f.key) == csv_columns_.end())
            csv_columns_.push_back(f.key);
        std::string h;
        for (const std::string& k : csv_columns_) h += (h.empty() ? "" : ",") + k;
        std::fprintf(out_, "%s\n", h.c_str());
      }
      std::string line;
      for (size_t i = 0; i < csv_columns_.size(); ++i)
        line += (i ? "," : "") + csv_cell(r.find(csv_columns_[i]));
      std::fprintf(out_, "%s\n", line.c_str());
    }
  }
  std::fflush(out_);
}

void Report::print_table() {
  // Declared columns first (only those some record has), then any others in order of appearance.
  std::vector<std::string> cols;
  for (const std::string& k : declared_) {
    if (hidden(k) || std::find(cols.begin(), cols.end(), k) != cols.end()) continue;
    for (const Record& r : records_)
      if (r.find(k)) {
        cols.push_back(k);
        break;
      }
  }
  for (const Record& r : records_)
    for (const Field& f : r.fields())
      if (!hidden(f.key) && std::find(cols.begin(), cols.end(), f.key) == cols.end())
        cols.push_back(f.key);
  std::vector<std::vector<std::string>> cells(records_.size(), std::vector<std::string>(cols.size()));
  std::vector<size_t> width(cols.size());
  std::vector<bool> numeric(cols.size(), true);
  for (size_t c = 0; c < cols.size(); ++c) width[c] = cols[c].size();
  for (size_t r = 0; r < records_.size(); ++r)
    for (size_t c = 0; c < cols.size(); ++c) {
      const Field* f = records_[r].find(cols[c]);
      cells[r][c] = f ? cell(*f) : "-";
      if (f && f->kind == Field::Kind::kString) numeric[c] = false;
      width[c] = std::max(width[c], cells[r][c].size());
    }
  auto row = [&](const std::vector<std::string>& v) {
    std::string line;
    for (size_t c = 0; c < cols.size(); ++c) {
      if (c) line += "  ";
      std::string pad(width[c] - v[c].size(), ' ');
      line += numeric[c] ? pad + v[c] : v[c] + pad;  // numbers right-aligned, text left-aligned
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(out_, "%s\n", line.c_str());
  };
  if (!records_.empty()) {
    row(cols);
    std::string rule;
    for (size_t c = 0; c < cols.size(); ++c) rule += (c ? "  " : "") + std::string(width[c], '-');
    std::fprintf(out_, "%s\n", rule.c_str());
    for (auto& v : cells) row(v);
  }
  for (const std::string& n : notes_) std::fprintf(out_, "%s\n", n.c_str());
  std::fflush(out_);
}

void Report::finish() {
  if (finished_) return;
  finished_ = true;
  if (fmt_ == Format::kTable) print_table();
  else flush_pending();
}

void Report::write_json(FILE* f) const {
  for (const Record& r : records_) print_json_record(f, r, [](const std::string&) { return false; });
}

}  // namespace bench
