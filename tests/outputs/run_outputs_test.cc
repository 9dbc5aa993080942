// RunOutputs as the trainer frame uses it: the files it leaves, the other
// ranks writing nothing, and bad input answered with a Status, never a
// crash.
#include <filesystem>
#include <fstream>
#include <string>

#include "ddprun_catch.h"

#include "common/clock.h"
#include "examples/outputs/curve_plot.h"
#include "examples/outputs/event_file.h"
#include "examples/outputs/run_outputs.h"
#include "tests/examples/trainer_run.h"
#include "tests/outputs/png_probe.h"

namespace ddprun::examples::outputs {
namespace {

using ::ddprun::examples::testing::FreshDir;
namespace fs = std::filesystem;

RunOutputs::Options Options(const std::string& dir, bool is_main = true) {
  RunOutputs::Options o;
  o.output_dir = dir;
  o.trainer_name = "segmentation";
  o.is_main = is_main;
  return o;
}

TEST_CASE("run outputs: a whole run leaves events, plot and images",
          "[outputs]") {
  const std::string dir = FreshDir("run_outputs_files") + "/run";  // created
  auto out = RunOutputs::Open(Options(dir));
  INFO(out.status());
  REQUIRE(out.ok());
  for (int epoch = 1; epoch <= 3; ++epoch) {
    for (int step = (epoch - 1) * 10 + 1; step <= epoch * 10; ++step) {
      REQUIRE((*out)->Scalar("train/loss", step, 1.0 / step).ok());
    }
    REQUIRE((*out)->Scalar("val/dice", epoch * 10, 0.2 * epoch).ok());
    REQUIRE((*out)->EpochEnd().ok());
  }
  RasterImage gray{3, 2, 1, {0, 50, 100, 150, 200, 250}};
  REQUIRE((*out)->Image("val/overlay", 30, gray).ok());
  REQUIRE((*out)->Finish().ok());
  CHECK((*out)->Finish().ok());  // once is enough; again does nothing

  const std::string image = dir + "/images/val_overlay_step00000030.png";
  CHECK((*out)->ImagePath("val/overlay", 30) == image);
  const testing::Decoded png = testing::DecodePngFile(image);
  REQUIRE(png.ok);
  CHECK(png.width == 3);
  CHECK(png.file_channels == 1);
  CHECK(png.At(2, 1)[0] == 250);

  const testing::Decoded plot =
      testing::DecodePngFile(dir + "/training_curves.png");
  REQUIRE(plot.ok);
  CHECK(plot.width == kCurvePlotWidth);
  CHECK(plot.height == CurvePlotHeight(2));  // loss, dice
  CHECK(plot.Count(31, 119, 180, 20) > 200);
  for (const auto& entry : fs::directory_iterator(dir)) {
    // No temporary file of the atomic writes is left behind.
    CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
  }

  CHECK((*out)->Scalar("train/loss", 31, 0.1).code() ==
        StatusCode::kFailedPrecondition);
}

TEST_CASE("run outputs: ranks other than 0 write nothing", "[outputs]") {
  const std::string dir = FreshDir("run_outputs_rank1") + "/out";
  auto out = RunOutputs::Open(Options(dir, /*is_main=*/false));
  REQUIRE(out.ok());
  CHECK((*out)->Scalar("train/loss", 1, 0.5).ok());
  CHECK((*out)->Image("val/x", 1, RasterImage{1, 1, 1, {7}}).ok());
  CHECK((*out)->EpochEnd().ok());
  CHECK((*out)->Finish().ok());
  CHECK((*out)->event_file().empty());
  CHECK((*out)->history().empty());
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("run outputs: bad input is a clear Status, the run goes on",
          "[outputs]") {
  const std::string root = FreshDir("run_outputs_bad");
  SECTION("an output dir that cannot be created") {
    std::ofstream(root + "/file") << "x";
    auto out = RunOutputs::Open(Options(root + "/file/sub"));
    REQUIRE_FALSE(out.ok());
    CHECK(out.status().message() == "cannot create output directory " + root +
                                        "/file/sub: Not a directory");
    CHECK(RunOutputs::Open(Options("")).status().code() ==
          StatusCode::kInvalidArgument);
    RunOutputs::Options negative = Options(root);
    negative.resumed_step = -1;
    CHECK(RunOutputs::Open(negative).status().message() ==
          "resumed step -1 is negative");
  }
  SECTION("NaN, empty tags, malformed images, an unwritable images dir") {
    auto opened = RunOutputs::Open(Options(root));
    REQUIRE(opened.ok());
    RunOutputs& out = **opened;
    const Status nan = out.Scalar("train/loss", 12, NAN);
    CHECK(nan.code() == StatusCode::kInvalidArgument);
    CHECK(nan.message() ==
          "scalar 'train/loss' at step 12 is nan; not recorded");
    CHECK(out.Scalar("val/auroc", 3, -INFINITY).code() ==
          StatusCode::kInvalidArgument);
    CHECK(out.Scalar("", 1, 1.0).code() == StatusCode::kInvalidArgument);
    CHECK(out.history().empty());

    const Status wrong = out.Image("val/x", 1, RasterImage{4, 4, 3, {1, 2}});
    CHECK(wrong.message() ==
          "image 'val/x': image of 4x4x3 needs 48 bytes, has 2");
    CHECK(out.Image("val/x", 1, RasterImage{4, 4, 2, {}}).code() ==
          StatusCode::kInvalidArgument);
    std::ofstream(root + "/images") << "a file where the directory goes";
    const Status blocked = out.Image("val/x", 1, RasterImage{1, 1, 1, {9}});
    CHECK_FALSE(blocked.ok());
    CHECK(blocked.message().find(root + "/images") != std::string::npos);

    // Nothing to plot yet: Finish says so, the event file is still closed
    // and readable.
    REQUIRE(out.Scalar("train/loss", 13, 0.25).ok());
    fs::remove(root + "/images");
    REQUIRE(out.Image("val/x", 13, RasterImage{1, 1, 1, {9}}).ok());
    const Status finished = out.Finish();
    CHECK(finished.ok());
    auto read = ReadEventFileScalars(out.event_file());
    REQUIRE(read.ok());
    CHECK(read->series.at("train/loss").size() == 1);
  }
  SECTION("a run with no scalars has no plot, and says why") {
    auto opened = RunOutputs::Open(Options(root));
    REQUIRE(opened.ok());
    const Status finished = (*opened)->Finish();
    CHECK(finished.code() == StatusCode::kInvalidArgument);
    CHECK(finished.message() ==
          root + "/training_curves.png not written: no scalars to plot");
    CHECK_FALSE(fs::exists(root + "/training_curves.png"));
  }
}

}  // namespace
}  // namespace ddprun::examples::outputs
