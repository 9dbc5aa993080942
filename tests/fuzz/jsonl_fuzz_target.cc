// libFuzzer target over the trainers' JSON Lines reader
// (examples/formats/jsonl_reader.h: vqa's questions, segmentation's
// prompts) and its field getters.
//
// Input: a .jsonl file's bytes.
//
// Invariants (abort() on violation): every record is a JSON object from
// one line, lines increasing; an error names the file (and the line);
// JsonlString / JsonlNumbers of any key either give the field or an error
// naming the file and the record's line; a record written back with
// AppendJsonl's dump() parses to an equal object.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/formats/jsonl_reader.h"
#include "fuzz_check.h"

using ddprun::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::examples;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ddprun::StatusOr<std::vector<JsonlRecord>> records =
      ParseJsonl(text, "data.jsonl");
  if (!records.ok()) {
    Check(records.status().message().rfind("data.jsonl:", 0) == 0,
          "an error that does not name the file and line");
    return 0;
  }
  int last = 0;
  for (const JsonlRecord& r : *records) {
    Check(r.value.is_object(), "a record that is not an object");
    Check(r.line > last, "records out of line order");
    last = r.line;
    const std::string where = "data.jsonl:" + std::to_string(r.line) + ": ";
    for (const char* key : {"question", "answer", "image", "bbox", "prompt"}) {
      ddprun::StatusOr<std::string> s = JsonlString("data.jsonl", r, key);
      if (!s.ok()) {
        Check(s.status().message().rfind(where, 0) == 0,
              "a field error that does not name the line");
      }
      ddprun::StatusOr<std::vector<double>> n =
          JsonlNumbers("data.jsonl", r, key);
      if (!n.ok()) {
        Check(n.status().message().rfind(where, 0) == 0,
              "a field error that does not name the line");
      }
    }
    const std::string dumped =
        r.value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const nlohmann::json back = nlohmann::json::parse(dumped, nullptr, false);
    Check(back == r.value, "a record does not survive its dump");
  }
  return 0;
}
