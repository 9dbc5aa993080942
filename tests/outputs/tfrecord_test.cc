// CRC-32C and the TFRecord framing of event files: every flipped byte is
// detected, a record cut short at the end is a truncated tail (the records
// before it survive), writer errors name the file.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "ddprun_catch.h"

#include "examples/outputs/crc32c.h"
#include "examples/outputs/tfrecord.h"
#include "tests/examples/trainer_run.h"

namespace ddprun::examples::outputs {
namespace {

using ::ddprun::examples::testing::FreshDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_CASE("CRC-32C: the standard check value and incremental use",
          "[outputs]") {
  CHECK(Crc32c("123456789") == 0xE3069283u);
  CHECK(Crc32c("") == 0u);
  const std::string a = "brain.Event:", b = "2";
  CHECK(Crc32cExtend(Crc32c(a), b.data(), b.size()) == Crc32c(a + b));
  // TFRecord's mask: rotate right by 15, add 0xa282ead8.
  CHECK(MaskCrc(0xE3069283u) == 0xC78AB0E5u);
}

TEST_CASE("TFRecord: frame layout is length, masked CRCs, data", "[outputs]") {
  const std::string framed = FrameTfRecord("abc");
  REQUIRE(framed.size() == 8 + 4 + 3 + 4);
  CHECK(framed.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));
  CHECK(framed.substr(12, 3) == "abc");
}

TEST_CASE("TFRecord: records written are read back in order", "[outputs]") {
  const std::string dir = FreshDir("tfrecord_roundtrip");
  const std::string path = dir + "/r";
  const std::string big(100000, 'x');
  {
    auto w = TfRecordWriter::Create(path);
    REQUIRE(w.ok());
    REQUIRE((*w)->Append("first").ok());
    REQUIRE((*w)->Append("").ok());
    REQUIRE((*w)->Append(big).ok());
    REQUIRE((*w)->Close().ok());
    CHECK((*w)->Append("late").code() == StatusCode::kFailedPrecondition);
  }
  auto read = ReadTfRecordFile(path);
  REQUIRE(read.ok());
  CHECK(read->damage.ok());
  CHECK_FALSE(read->truncated_tail);
  REQUIRE(read->records.size() == 3);
  CHECK(read->records[0] == "first");
  CHECK(read->records[1].empty());
  CHECK(read->records[2] == big);
}

TEST_CASE("TFRecord: a flipped byte anywhere is reported as damage",
          "[outputs]") {
  const std::string dir = FreshDir("tfrecord_flip");
  const std::string path = dir + "/r";
  {
    auto w = TfRecordWriter::Create(path);
    REQUIRE(w.ok());
    for (const char* r : {"one", "second record", "3"}) {
      REQUIRE((*w)->Append(r).ok());
    }
  }
  const std::string good = ReadAll(path);
  const size_t second = FrameTfRecord("one").size();
  const size_t third = second + FrameTfRecord("second record").size();
  for (size_t pos = 0; pos < good.size(); ++pos) {
    for (unsigned char mask : {0x01, 0x80, 0xFF}) {
      std::string bad = good;
      bad[pos] = static_cast<char>(bad[pos] ^ mask);
      WriteAll(path, bad);
      auto read = ReadTfRecordFile(path);
      REQUIRE(read.ok());
      INFO("byte " << pos << " xor " << int(mask));
      REQUIRE(read->damage.code() == StatusCode::kDataLoss);
      CHECK_FALSE(read->truncated_tail);
      // The records before the damaged one are intact.
      const size_t damaged = pos < second ? 0 : pos < third ? 1 : 2;
      CHECK(read->records.size() == damaged);
    }
  }
  // The message names the file and the record's offset.
  std::string bad = good;
  bad[second + 13] ^= 1;  // inside the second record's data
  WriteAll(path, bad);
  auto read = ReadTfRecordFile(path);
  REQUIRE(read.ok());
  CHECK(read->damage.message() == path + ": record at byte " +
                                      std::to_string(second) +
                                      ": data CRC mismatch");
}

TEST_CASE("TFRecord: a last record cut short is a truncated tail",
          "[outputs]") {
  const std::string dir = FreshDir("tfrecord_cut");
  const std::string path = dir + "/r";
  {
    auto w = TfRecordWriter::Create(path);
    REQUIRE(w.ok());
    REQUIRE((*w)->Append("kept 1").ok());
    REQUIRE((*w)->Append("kept 2").ok());
    REQUIRE((*w)->Append("the one being written").ok());
  }
  const std::string full = ReadAll(path);
  const size_t last = FrameTfRecord("the one being written").size();
  for (size_t cut = 1; cut < last; ++cut) {
    WriteAll(path, full.substr(0, full.size() - cut));
    auto read = ReadTfRecordFile(path);
    REQUIRE(read.ok());
    INFO("cut " << cut << " bytes");
    CHECK(read->damage.ok());
    CHECK(read->truncated_tail);
    REQUIRE(read->records.size() == 2);
    CHECK(read->records[1] == "kept 2");
  }
}

TEST_CASE("TFRecord: writer errors name the file", "[outputs]") {
  const std::string dir = FreshDir("tfrecord_errors");
  auto missing = TfRecordWriter::Create(dir + "/no/such/dir/r");
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find(dir + "/no/such/dir/r") !=
        std::string::npos);
  REQUIRE(TfRecordWriter::Create(dir + "/r").ok());
  CHECK(TfRecordWriter::Create(dir + "/r").status().code() ==
        StatusCode::kAlreadyExists);
  CHECK(ReadTfRecordFile(dir + "/absent").status().code() ==
        StatusCode::kNotFound);
}

}  // namespace
}  // namespace ddprun::examples::outputs
