// libFuzzer target over the trainers' CSV reader
// (examples/formats/csv_table.h: survival's and vqa's tables, the
// segmentation annotations).
//
// Input: a CSV file's bytes.
//
// Invariants (abort() on violation): a parsed table has a header and
// every row the header's field count, rows in increasing line order; a
// table of two or more columns written back with CsvEscape parses to the
// same header and rows (what the trainers write, they read back);
// ColumnIndex finds every header name; GetDouble of a field that is not
// a number fails naming the file.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/formats/csv_table.h"
#include "fuzz_check.h"

namespace ddprun::examples {
namespace {

using fuzz::Check;

std::string Line(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    out += (i ? "," : "") + CsvEscape(fields[i]);
  }
  return out + "\n";
}

}  // namespace
}  // namespace ddprun::examples

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::examples;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ddprun::StatusOr<CsvTable> table = CsvTable::Parse(text, "data.csv");
  if (!table.ok()) {
    Check(table.status().message().rfind("data.csv", 0) == 0,
          "an error that does not name the file");
    return 0;
  }
  const size_t columns = table->header().size();
  Check(columns > 0, "a table without a header");
  int last_line = 1;
  for (const CsvRow& row : table->rows()) {
    Check(row.fields.size() == columns, "a row of another width");
    Check(row.line > last_line, "rows out of line order");
    last_line = row.line;
  }
  for (size_t c = 0; c < columns; ++c) {
    ddprun::StatusOr<int> index = table->ColumnIndex(table->header()[c]);
    Check(index.ok() && table->header()[*index] == table->header()[c],
          "a header name not found");
    if (!table->rows().empty()) {
      ddprun::StatusOr<double> v =
          table->GetDouble(table->rows().front(), static_cast<int>(c));
      if (!v.ok()) {
        Check(v.status().message().rfind("data.csv:", 0) == 0,
              "a number error that does not name the file");
      }
    }
  }
  if (columns < 2) return 0;
  std::string written = Line(table->header());
  for (const CsvRow& row : table->rows()) written += Line(row.fields);
  ddprun::StatusOr<CsvTable> back = CsvTable::Parse(written, "back.csv");
  Check(back.ok(), "a written table does not parse");
  Check(back->header() == table->header(), "the header changed");
  Check(back->rows().size() == table->rows().size(), "rows were lost");
  for (size_t r = 0; r < back->rows().size(); ++r) {
    Check(back->rows()[r].fields == table->rows()[r].fields, "a row changed");
  }
  return 0;
}
