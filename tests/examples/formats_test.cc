#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "ddprun_catch.h"
#include "tests/common/remove_at_exit.h"

#include "examples/formats/csv_table.h"
#include "examples/formats/jsonl_reader.h"
#include "examples/formats/media_limits.h"
#include "examples/formats/vocabulary.h"

namespace ddprun::examples {
namespace {

std::string TempFile(const std::string& name, const std::string& text) {
  std::string path =
      "/tmp/ddprun_formats_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return ddprun::testing::RemoveAtExit(path);
}

TEST_CASE("CsvTable: parses quotes, escaped quotes, quoted newlines and CRLF",
          "[csv]") {
  auto table = CsvTable::Parse(
      "image,time,event\r\n\"a,b.nii\",1.5,1\r\n\"say "
      "\"\"hi\"\"\",2,0\n\"multi\nline\",3,1\n\n",
      "t.csv");
  REQUIRE(table.ok());
  REQUIRE(table->rows().size() == 3);
  CHECK(table->rows()[0].fields[0] == "a,b.nii");
  CHECK(table->rows()[1].fields[0] == "say \"hi\"");
  CHECK(table->rows()[2].fields[0] == "multi\nline");
  CHECK(table->rows()[2].line == 4);
  CHECK(*table->GetDouble(table->rows()[0], 1) == 1.5);
}

TEST_CASE("CsvTable: errors name the file and the line", "[csv]") {
  auto short_row =
      CsvTable::Parse("image,time,event\na.nii,1,1\nb.nii,2\n", "d.csv");
  REQUIRE_FALSE(short_row.ok());
  CHECK(short_row.status().message() ==
        "d.csv:3: expected 3 fields (as the header), got 2");

  auto open_quote = CsvTable::Parse("image,time\n\"a.nii,1\n", "q.csv");
  REQUIRE_FALSE(open_quote.ok());
  CHECK(open_quote.status().message() == "q.csv:2: unterminated quoted field");

  auto table = CsvTable::Parse("image,time,event\na.nii,soon,1\n", "n.csv");
  REQUIRE(table.ok());
  auto bad = table->GetDouble(table->rows()[0], 1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "n.csv:2: column 'time': 'soon' is not a number");
  auto missing = table->ColumnIndex("label");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("missing column 'label'") !=
        std::string::npos);

  CHECK(CsvTable::Read("/nonexistent/x.csv").status().code() ==
        StatusCode::kNotFound);
  CHECK_FALSE(CsvTable::Parse("", "e.csv").ok());
}

TEST_CASE("CsvEscape: round-trips through the parser", "[csv]") {
  const std::string field = "a \"b\", c\nd";
  auto table = CsvTable::Parse("x\n" + CsvEscape(field) + "\n", "r.csv");
  REQUIRE(table.ok());
  CHECK(table->rows()[0].fields[0] == field);
}

TEST_CASE("ReadJsonl: reads objects and reports the bad line", "[jsonl]") {
  std::string good = TempFile("good.jsonl",
                              "{\"image\": \"a.png\", \"labels\": [1, 0, "
                              "-1]}\n\n{\"image\": \"b.png\"}\n");
  auto records = ReadJsonl(good);
  REQUIRE(records.ok());
  REQUIRE(records->size() == 2);
  CHECK((*records)[1].line == 3);
  CHECK(*JsonlString(good, (*records)[0], "image") == "a.png");
  CHECK(JsonlNumbers(good, (*records)[0], "labels")->at(2) == -1);
  auto no_question = JsonlString(good, (*records)[1], "question");
  REQUIRE_FALSE(no_question.ok());
  CHECK(no_question.status().message() ==
        good + ":3: missing or non-string field 'question'");

  std::string bad = TempFile("bad.jsonl", "{\"a\": 1}\n{\"a\": \n");
  auto broken = ReadJsonl(bad);
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.status().message() == bad + ":2: invalid JSON");
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST_CASE("Vocabulary: ids by count then word, unknown words, padding",
          "[vocabulary]") {
  CHECK(Tokenize("Lesion in the UPPER-left?") ==
        std::vector<std::string>{"lesion", "in", "the", "upper", "left"});
  const Vocabulary v = Vocabulary::Build(
      {"is there an opacity?", "how many opacities are there?", "is it"});
  // "is" and "there" twice (alphabetical among equals), then once each.
  CHECK(v.Id("is") == 2);
  CHECK(v.Id("there") == 3);
  CHECK(v.Id("an") == 4);
  CHECK(v.Id("opacity") == 10);
  CHECK(v.num_words() == 9);
  CHECK(v.size() == 11);  // and padding, unknown
  CHECK(v.Id("lung") == Vocabulary::kUnknown);
  CHECK(v.Encode("Is there a lung?", 6) ==
        std::vector<int64_t>{2, 3, Vocabulary::kUnknown, Vocabulary::kUnknown,
                             Vocabulary::kPad, Vocabulary::kPad});
  CHECK(v.Encode("is there is there", 3) == std::vector<int64_t>{2, 3, 2});
  // Words seen fewer than min_count times are unknown.
  const Vocabulary frequent = Vocabulary::Build({"a b", "a c"}, 2);
  CHECK(frequent.num_words() == 1);
  CHECK(frequent.Id("b") == Vocabulary::kUnknown);
}

TEST_CASE("LabelSet: the closed answer set is sorted, unseen answers are -1",
          "[vocabulary]") {
  const LabelSet answers = LabelSet::Build({"yes", "no", "2", "yes", "0"});
  REQUIRE(answers.size() == 4);
  CHECK(answers.Label(0) == "0");
  CHECK(answers.Label(3) == "yes");
  CHECK(answers.Index("no") == 2);
  CHECK(answers.Index("maybe") == -1);
  // Every rank building from the same answers gets the same indices.
  CHECK(LabelSet::Build({"0", "2", "no", "yes"}).Index("no") == 2);
}

// A PNG declaring width x height without its pixels: signature, IHDR, an
// IDAT of an empty zlib stream and IEND (stb_image reads the size from IHDR;
// newer stb, trixie's, also wants the chunks after it, as a real file has).
std::string PngHeader(uint32_t width, uint32_t height) {
  std::string png = "\x89PNG\r\n\x1a\n";
  auto put32 = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      png.push_back(static_cast<char>((v >> shift) & 0xff));
    }
  };
  put32(13);
  png += "IHDR";
  put32(width);
  put32(height);
  png += std::string("\x08\x00\x00\x00\x00", 5);
  put32(0);  // CRC (not checked for the size)
  put32(4);
  png += "IDAT";
  png += std::string("\x78\x9c\x03\x00", 4);
  put32(0);
  put32(0);
  png += "IEND";
  put32(0);
  return png;
}

TEST_CASE("MediaLimits: image sizes come from the header and are bounded",
          "[media]") {
  const MediaLimits saved = GetMediaLimits();
  const std::string path = TempFile("huge.png", PngHeader(20000, 20000));
  StatusOr<ImageSize> size = ReadImageSize(path);
  REQUIRE(size.ok());
  CHECK(size->width == 20000);
  CHECK(size->height == 20000);
  Status refused = CheckImagePixels(path, size->width, size->height);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message() ==
        path +
            ": image of 20000x20000 pixels is above the "
            "limit of 67108864 pixels (--max_image_pixels)");
  CHECK(CheckImagePixels(path, 3000, 2500).ok());
  MediaLimits larger = saved;
  larger.max_image_pixels = 400000000;
  SetMediaLimits(larger);
  CHECK(CheckImagePixels(path, 20000, 20000).ok());
  SetMediaLimits(saved);
  CHECK_FALSE(ReadImageSize(TempFile("text.png", "not an image")).ok());
  std::remove(path.c_str());
}

TEST_CASE("MediaLimits: volume sizes are bounded without overflow", "[media]") {
  CHECK(CheckVolumeVoxels("v.nii", {4, 240, 240, 155}).ok());
  Status big = CheckVolumeVoxels("v.nii", {700, 700, 700});
  CHECK(big.code() == StatusCode::kInvalidArgument);
  CHECK(big.message() ==
        "v.nii: volume of 700x700x700 voxels is above the limit of 268435456 "
        "voxels (--max_volume_voxels)");
  // 2^31 cubed overflows int64: still refused, not wrapped around.
  const int64_t huge = int64_t{1} << 31;
  CHECK_FALSE(CheckVolumeVoxels("v.nii", {huge, huge, huge}).ok());
  CHECK_FALSE(CheckVolumeVoxels("v.nii", {0, 10}).ok());
}

}  // namespace
}  // namespace ddprun::examples
