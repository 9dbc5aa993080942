// TensorBoard event files as RunOutputs writes them, read back by an
// independent reader (tests/outputs/read_tfevents.py: standard-library
// Python that checks every CRC and decodes the protobuf by hand).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "ddprun_catch.h"
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "examples/outputs/event_file.h"
#include "examples/outputs/run_outputs.h"
#include "examples/outputs/tfrecord.h"
#include "tests/examples/trainer_run.h"

namespace ddprun::examples::outputs {
namespace {

using ::ddprun::examples::testing::CommandResult;
using ::ddprun::examples::testing::FreshDir;
using ::ddprun::examples::testing::RunCommand;
using json = nlohmann::json;
using namespace std::chrono_literals;

CommandResult PythonRead(const std::string& path) {
  return RunCommand(
      std::string("/usr/bin/python3 ") + DDPRUN_READ_TFEVENTS + " " + path, 60);
}

json PythonReadOk(const std::string& path) {
  const CommandResult r = PythonRead(path);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.output);
}

// (tag, step, value) of every scalar, in file order.
struct Scalar {
  std::string tag;
  int64_t step;
  double value;
  bool operator==(const Scalar& o) const {
    return tag == o.tag && step == o.step && value == o.value;
  }
};
std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  return os << s.tag << "@" << s.step << "=" << s.value;
}
std::vector<Scalar> Scalars(const json& read) {
  std::vector<Scalar> out;
  for (const json& rec : read["records"]) {
    for (const json& v : rec["values"]) {
      if (v.contains("simple_value")) {
        out.push_back({v["tag"], rec["step"], v["simple_value"]});
      }
    }
  }
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

RasterImage Gradient(int w, int h) {
  RasterImage img{w, h, 3, {}};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      img.pixels.push_back(static_cast<uint8_t>(x * 255 / (w - 1)));
      img.pixels.push_back(static_cast<uint8_t>(y * 255 / (h - 1)));
      img.pixels.push_back(80);
    }
  }
  return img;
}

std::unique_ptr<RunOutputs> OpenOutputs(const std::string& dir,
                                        const Clock* clock) {
  RunOutputs::Options o;
  o.output_dir = dir;
  o.trainer_name = "unit";
  o.clock = clock;
  auto opened = RunOutputs::Open(o);
  INFO(opened.status());
  REQUIRE(opened.ok());
  return std::move(opened).value();
}

TEST_CASE("event file: an independent reader gets back tags, steps, values",
          "[outputs]") {
  const std::string dir = FreshDir("events_roundtrip");
  FakeClock clock;
  clock.Advance(12s);
  auto out = OpenOutputs(dir, &clock);
  std::vector<Scalar> expected;
  for (int step = 1; step <= 6; ++step) {
    clock.Advance(1s);
    const double loss = 2.0 / step;
    REQUIRE(out->Scalar("train/loss", step, loss).ok());
    expected.push_back({"train/loss", step, static_cast<float>(loss)});
    if (step % 3 == 0) {
      REQUIRE(out->Scalar("val/dice", step, 0.1 * step).ok());
      expected.push_back({"val/dice", step, static_cast<float>(0.1 * step)});
      REQUIRE(out->Scalar("train/lr", step, 1e-4).ok());
      expected.push_back({"train/lr", step, static_cast<float>(1e-4)});
      REQUIRE(out->EpochEnd().ok());
    }
  }
  REQUIRE(out->Image("val/samples", 6, Gradient(40, 24)).ok());
  REQUIRE(out->Finish().ok());

  // TensorBoard's name: events.out.tfevents.<10-digit time>.<hostname>.
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string name =
      std::filesystem::path(out->event_file()).filename().string();
  CHECK(name == "events.out.tfevents.1700000012." + std::string(host));
  CHECK(ListEventFiles(dir) == std::vector<std::string>{out->event_file()});

  const json read = PythonReadOk(out->event_file());
  CHECK(read["truncated"] == false);
  const json& records = read["records"];
  REQUIRE(records.size() == 2 + expected.size() + 1);
  CHECK(records[0]["file_version"] == "brain.Event:2");
  CHECK(records[0]["wall_time"].get<double>() == 1700000012.0);
  // A fresh start: SessionLog START at step 1.
  CHECK(records[1]["session_log_status"] == 1);
  CHECK(records[1]["step"] == 1);
  CHECK(records[2]["wall_time"].get<double>() == 1700000013.0);
  CHECK(Scalars(read) == expected);
  const json& last = records.back();
  CHECK(last["step"] == 6);
  REQUIRE(last["values"].size() == 1);
  CHECK(last["values"][0]["tag"] == "val/samples");
  const json& image = last["values"][0]["image"];
  CHECK(image["width"] == 40);
  CHECK(image["height"] == 24);
  CHECK(image["colorspace"] == 3);
  CHECK(image["png_width"] == 40);
  CHECK(image["png_height"] == 24);
}

TEST_CASE("event file: the independent reader detects a flipped byte",
          "[outputs]") {
  const std::string dir = FreshDir("events_flip");
  FakeClock clock;
  std::string path;
  {
    auto out = OpenOutputs(dir, &clock);
    for (int step = 1; step <= 3; ++step) {
      REQUIRE(out->Scalar("train/loss", step, 1.0 / step).ok());
    }
    path = out->event_file();
  }
  const std::string good = ReadAll(path);
  // Record 2 (the first scalar) follows the version and START records.
  auto records = ReadTfRecordFile(path);
  REQUIRE(records.ok());
  const size_t rec1 = FrameTfRecord(records->records[0]).size() +
                      FrameTfRecord(records->records[1]).size();
  const size_t len1 = records->records[2].size();
  struct Flip {
    size_t pos;
    const char* expect;
  };
  for (const Flip& f : {Flip{rec1 + 0, "length CRC mismatch"},
                        Flip{rec1 + 9, "length CRC mismatch"},
                        Flip{rec1 + 12 + len1 / 2, "data CRC mismatch"},
                        Flip{rec1 + 12 + len1 + 2, "data CRC mismatch"}}) {
    std::string bad = good;
    bad[f.pos] = static_cast<char>(bad[f.pos] ^ 0x10);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    const CommandResult r = PythonRead(path);
    INFO("flipped byte " << f.pos << ": " << r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("byte " + std::to_string(rec1) + ": " + f.expect) !=
          std::string::npos);
    // And so does our own reader, which a resumed run uses.
    auto ours = ReadEventFileScalars(path);
    REQUIRE(ours.ok());
    CHECK(ours->damage.code() == StatusCode::kDataLoss);
    CHECK(ours->series.empty());  // the damaged record was the first scalar
  }
}

TEST_CASE("event file: a crash loses only what was not flushed", "[outputs]") {
  const std::string dir = FreshDir("events_crash");
  // A child process records 10 steps, ends the epoch (flush), records 5
  // more and dies without any cleanup (_exit skips stdio's flush).
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    RunOutputs::Options o;
    o.output_dir = dir;
    o.trainer_name = "crash";
    auto out = RunOutputs::Open(o);
    if (!out.ok()) ::_exit(3);
    for (int step = 1; step <= 15; ++step) {
      if (!(*out)->Scalar("train/loss", step, step).ok()) ::_exit(4);
      if (step == 10 && !(*out)->EpochEnd().ok()) ::_exit(5);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const std::vector<std::string> files = ListEventFiles(dir);
  REQUIRE(files.size() == 1);
  const json read = PythonReadOk(files[0]);
  const std::vector<Scalar> got = Scalars(read);
  REQUIRE(got.size() == 10);
  CHECK(got.back() == Scalar{"train/loss", 10, 10.0});

  // A record cut in the middle (the kernel had part of a write): the reader
  // stops at it, as TensorBoard does, and keeps the ones before.
  const std::string full = ReadAll(files[0]);
  std::ofstream(files[0], std::ios::binary | std::ios::trunc)
      << full.substr(0, full.size() - 7);
  const json cut = PythonReadOk(files[0]);
  CHECK(cut["truncated"] == true);
  CHECK(Scalars(cut).size() == 9);
}

std::unique_ptr<RunOutputs> Resume(const std::string& dir, const Clock* clock,
                                   int64_t resumed_step) {
  RunOutputs::Options o;
  o.output_dir = dir;
  o.trainer_name = "unit";
  o.clock = clock;
  o.resumed_step = resumed_step;
  auto opened = RunOutputs::Open(o);
  INFO(opened.status());
  REQUIRE(opened.ok());
  return std::move(opened).value();
}

// What TensorBoard shows for train/loss: the event files in name order, a
// SessionLog START dropping the values at its step and later.
std::vector<Scalar> AsTensorBoardShows(const std::string& dir,
                                       const std::string& tag) {
  std::vector<Scalar> shown;
  for (const std::string& file : ListEventFiles(dir)) {
    const json read = PythonReadOk(file);
    for (const json& rec : read["records"]) {
      if (rec.value("session_log_status", 0) == 1) {
        const int64_t start = rec["step"];
        shown.erase(
            std::remove_if(shown.begin(), shown.end(),
                           [&](const Scalar& s) { return s.step >= start; }),
            shown.end());
      }
      for (const json& v : rec["values"]) {
        if (v["tag"] == tag)
          shown.push_back({tag, rec["step"], v["simple_value"]});
      }
    }
  }
  return shown;
}

TEST_CASE("event file: a restarted run's plot covers all its attempts",
          "[outputs]") {
  const std::string dir = FreshDir("events_resume");
  FakeClock clock;  // all attempts in the same second: ".1", ".2" suffixes
  {
    // Attempt 1 records steps 1-33, validation at 10, 20, 30, then dies.
    auto first = Resume(dir, &clock, 0);
    for (int step = 1; step <= 33; ++step) {
      REQUIRE(first->Scalar("train/loss", step, 100 + step).ok());
      if (step % 10 == 0) {
        REQUIRE(first->Scalar("val/dice", step, step / 100.0).ok());
      }
    }
    REQUIRE(first->EpochEnd().ok());
  }
  {
    // Attempt 2 resumes from the checkpoint of step 25: attempt 1's steps
    // 26-33 (and its validation at 30) are gone. It dies at 32.
    auto second = Resume(dir, &clock, 25);
    CHECK(second->event_file() == ListEventFiles(dir)[0] + ".1");
    const SeriesMap before = second->history();
    CHECK(before.at("train/loss").size() == 25);
    CHECK(before.at("val/dice").size() == 2);
    for (int step = 26; step <= 32; ++step) {
      REQUIRE(second->Scalar("train/loss", step, 200 + step).ok());
    }
    REQUIRE(second->EpochEnd().ok());
  }
  // Attempt 3 resumes from attempt 2's checkpoint of step 30 and finishes.
  auto third = Resume(dir, &clock, 30);
  for (int step = 31; step <= 40; ++step) {
    REQUIRE(third->Scalar("train/loss", step, 300 + step).ok());
  }
  REQUIRE(third->Scalar("val/dice", 40, 0.9).ok());
  REQUIRE(third->Finish().ok());
  CHECK(ListEventFiles(dir).size() == 3);

  const SeriesMap history = third->history();
  const std::vector<ScalarPoint>& loss = history.at("train/loss");
  REQUIRE(loss.size() == 40);
  std::vector<Scalar> expected;
  for (int step = 1; step <= 40; ++step) {
    const int base = step <= 25 ? 100 : step <= 30 ? 200 : 300;
    INFO("step " << step);
    CHECK(loss[step - 1].step == step);
    CHECK(loss[step - 1].value == base + step);
    expected.push_back({"train/loss", step, double(base + step)});
  }
  const std::vector<ScalarPoint>& dice = history.at("val/dice");
  REQUIRE(dice.size() == 3);
  CHECK(dice[1].step == 20);
  CHECK(dice[2].step == 40);
  CHECK(std::filesystem::exists(third->plot_path()));
  // The plot and TensorBoard agree.
  CHECK(AsTensorBoardShows(dir, "train/loss") == expected);

  // A fresh start into the same dir (checkpoints deleted): nothing earlier.
  auto fresh = Resume(dir, &clock, 0);
  CHECK(fresh->history().empty());
}

}  // namespace
}  // namespace ddprun::examples::outputs
