#include "examples/formats/csv_table.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ddprun::examples {
namespace {

// Splits `text` into records of fields. Each record remembers the line it
// started on. Returns the line of an unterminated quote through `bad_line`.
bool SplitRecords(const std::string& text, std::vector<CsvRow>* records,
                  int* bad_line) {
  CsvRow current;
  std::string field;
  bool in_quotes = false;
  bool record_has_content = false;
  int line = 1;
  current.line = 1;
  auto end_field = [&] {
    current.fields.push_back(std::move(field));
    field.clear();
  };
  auto end_record = [&] {
    if (record_has_content) {
      end_field();
      records->push_back(std::move(current));
    }
    current = CsvRow();
    field.clear();
    record_has_content = false;
  };
  int quote_line = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field.push_back('"');
          ++i;
        } else {
          in_quotes = false;
        }
      } else {
        if (c == '\n') ++line;
        field.push_back(c);
      }
      continue;
    }
    if (!record_has_content && c != '\n' && c != '\r') {
      record_has_content = true;
      current.line = line;
    }
    if (c == '"') {
      in_quotes = true;
      quote_line = line;
    } else if (c == ',') {
      end_field();
    } else if (c == '\n') {
      end_record();
      ++line;
    } else if (c == '\r') {
      // CRLF: the '\n' ends the record.
    } else {
      field.push_back(c);
    }
  }
  if (in_quotes) {
    *bad_line = quote_line;
    return false;
  }
  end_record();
  return true;
}

}  // namespace

StatusOr<CsvTable> CsvTable::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open CSV file " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return Parse(buffer.str(), path);
}

StatusOr<CsvTable> CsvTable::Parse(const std::string& text,
                                   const std::string& name) {
  std::vector<CsvRow> records;
  int bad_line = 0;
  if (!SplitRecords(text, &records, &bad_line)) {
    return InvalidArgumentError(name + ":" + std::to_string(bad_line) +
                                ": unterminated quoted field");
  }
  if (records.empty()) {
    return InvalidArgumentError(name + ": empty CSV file (no header row)");
  }
  CsvTable table;
  table.name_ = name;
  table.header_ = std::move(records.front().fields);
  for (auto& h : table.header_) {
    // Tolerate surrounding blanks in column names ("image, time").
    size_t b = h.find_first_not_of(" \t");
    size_t e = h.find_last_not_of(" \t");
    h = b == std::string::npos ? "" : h.substr(b, e - b + 1);
  }
  for (size_t i = 1; i < records.size(); ++i) {
    if (records[i].fields.size() != table.header_.size()) {
      return InvalidArgumentError(name + ":" + std::to_string(records[i].line) +
                                  ": expected " +
                                  std::to_string(table.header_.size()) +
                                  " fields (as the header), got " +
                                  std::to_string(records[i].fields.size()));
    }
    table.rows_.push_back(std::move(records[i]));
  }
  return table;
}

StatusOr<int> CsvTable::ColumnIndex(const std::string& column) const {
  std::string have;
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == column) return static_cast<int>(i);
    have += (i ? "," : "") + header_[i];
  }
  return InvalidArgumentError(name_ + ":1: missing column '" + column +
                              "' (header has: " + have + ")");
}

StatusOr<double> CsvTable::GetDouble(const CsvRow& row, int column) const {
  const std::string& s = row.fields.at(column);
  const char* begin = s.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  while (end && (*end == ' ' || *end == '\t')) ++end;
  if (s.empty() || end == begin || *end != '\0' || errno == ERANGE) {
    return InvalidArgumentError(Where(row) + "column '" + header_.at(column) +
                                "': '" + s + "' is not a number");
  }
  return v;
}

std::string CsvTable::Where(const CsvRow& row) const {
  return name_ + ":" + std::to_string(row.line) + ": ";
}

std::string CsvEscape(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace ddprun::examples
