// Output of quantjit-bench: one record per measured case, printed as a table, CSV or JSON Lines.
//
// A record is an ordered list of key/value fields (string, integer or floating point). Columns
// are the union of the keys in order of first appearance; a record without a key prints "-" in a
// table, an empty CSV cell, and omits the key in JSON. Keys are the JSON names other tools read
// (README "Benchmarks"): keep them lower_snake_case and stable.
//
//   bench::Report rep(bench::parse_format("json"));
//   rep.add().set("m", 64).set("n", 800).set("seconds", 1.2e-4).set("gops", 650.1, 1);
//   rep.note("geomean gops 612.3");
//   rep.finish();
//
// - table: buffered and printed by finish() (column widths need every row); notes follow it.
// - csv:   header at the first record, one line per record as it is added (columns: declare()d
//          ones, else the first record's keys; later new keys reach only the table and JSON);
//          notes as "# ..." lines.
// - json:  one object per record as it is added (JSON Lines on stdout); notes go to stderr so that
//          stdout stays parseable.
// Floating-point values print with the record's chosen decimals in table/CSV and with full
// precision (%.9g) in JSON; non-finite values print as "-" / empty / null.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace bench {

enum class Format { kTable, kCsv, kJson };

// "table", "csv" or "json"; returns false for anything else.
bool parse_format(const char* s, Format* out);

struct Field {
  enum class Kind { kString, kInt, kDouble } kind = Kind::kString;
  std::string key;
  std::string s;
  int64_t i = 0;
  double d = 0;
  int decimals = 3;  // table/CSV precision of a double
};

class Record {
 public:
  Record& set(const std::string& key, const std::string& v);
  Record& set(const std::string& key, const char* v) { return set(key, std::string(v)); }
  Record& set(const std::string& key, int64_t v);
  Record& set(const std::string& key, int v) { return set(key, static_cast<int64_t>(v)); }
  Record& set(const std::string& key, double v, int decimals = 3);
  // Value as a table/CSV cell, and as JSON; "" / "null" if the key is absent.
  const Field* find(const std::string& key) const;
  const std::vector<Field>& fields() const { return fields_; }

 private:
  Field& slot(const std::string& key);
  std::vector<Field> fields_;
};

class Report {
 public:
  explicit Report(Format f, FILE* out = stdout) : fmt_(f), out_(out) {}
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  // Starts a new record. The reference is valid until the next add(); in CSV and JSON modes the
  // previous record is printed when the next one starts (or at finish()).
  Record& add();
  // Declares the columns (in order) before any record: CSV then has a stable header even if the
  // first record lacks some keys (e.g. a failed case), and the table keeps this order. Keys a
  // record adds beyond these still appear in tables and JSON (after the declared ones).
  void declare(const std::vector<std::string>& keys);
  // Leave these keys out when printing in format f (records keep them: records(), write_json()).
  // E.g. a table shows "time_us" while JSON carries "seconds".
  void hide(Format f, const std::vector<std::string>& keys);
  // A free-form summary line (geomean, warnings).
  void note(const std::string& line);
  // Prints whatever is pending (the whole table in table mode). Called by the destructor too.
  void finish();

  Format format() const { return fmt_; }
  // Every record added so far (for summaries and for writing a JSON copy for plotting).
  const std::vector<Record>& records() const { return records_; }
  // Writes every record as JSON Lines to f (used by --plot whatever the display format is).
  void write_json(FILE* f) const;

 private:
  void flush_pending();
  void print_table();
  bool hidden(const std::string& key) const;
  Format fmt_;
  FILE* out_;
  std::vector<Record> records_;
  std::vector<std::string> notes_;
  std::vector<std::string> csv_columns_;
  std::vector<std::string> hidden_;  // keys hidden in fmt_
  std::vector<std::string> declared_;
  size_t printed_ = 0;  // records already streamed (csv/json)
  bool finished_ = false;
};

// Formatting helpers shared by the subcommands.
std::string cell(const Field& f);        // table/CSV text of a value
std::string json_value(const Field& f);  // JSON text of a value
std::string json_escape(const std::string& s);

}  // namespace bench
