#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// One data row of a CSV file. `line` is the 1-based line in the file where the
// row starts (the header is line 1), so errors can point at it.
struct CsvRow {
  int line = 0;
  std::vector<std::string> fields;
};

// A parsed CSV file: RFC 4180 (quoted fields, "" escapes, quoted newlines,
// CRLF), a mandatory header row, every row with the header's field count.
// Blank lines are skipped.
class CsvTable {
 public:
  // Reads and parses `path`. Errors: NOT_FOUND when the file cannot be opened;
  // INVALID_ARGUMENT "<path>:<line>: ..." for an unterminated quote, a row
  // with the wrong number of fields, or an empty file.
  static StatusOr<CsvTable> Read(const std::string& path);
  // Parses `text`; `name` is used in error messages in place of a path.
  static StatusOr<CsvTable> Parse(const std::string& text,
                                  const std::string& name);

  const std::string& name() const { return name_; }
  const std::vector<std::string>& header() const { return header_; }
  const std::vector<CsvRow>& rows() const { return rows_; }

  // Index of column `column` in the header, or INVALID_ARGUMENT naming the
  // file and the columns it does have.
  StatusOr<int> ColumnIndex(const std::string& column) const;

  // Field `column` of `row` as a number; INVALID_ARGUMENT "<path>:<line>:
  // column 'time': 'abc' is not a number" otherwise.
  StatusOr<double> GetDouble(const CsvRow& row, int column) const;
  // "<path>:<line>: " prefix for callers' own row errors.
  std::string Where(const CsvRow& row) const;

 private:
  std::string name_;
  std::vector<std::string> header_;
  std::vector<CsvRow> rows_;
};

// Quotes `field` if it holds a comma, quote or newline (for writers).
std::string CsvEscape(const std::string& field);

}  // namespace ddprun::examples
