// Slice grids and mask overlays: geometry as documented, gray levels from
// min-max normalisation, the overlay's colours where the masks are.
#include <cmath>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "examples/outputs/image_panels.h"
#include "tests/outputs/png_probe.h"

namespace ddprun::examples::outputs {
namespace {

using testing::Decoded;
using testing::DecodePngBytes;

Decoded Decode(const StatusOr<RasterImage>& image) {
  INFO(image.status());
  REQUIRE(image.ok());
  auto png = EncodePng(*image);
  REQUIRE(png.ok());
  Decoded d = DecodePngBytes(*png);
  INFO(d.error);
  REQUIRE(d.ok);
  return d;
}

// Values rising left to right from `lo` to `hi`.
FloatSlice Ramp(int h, int w, float lo, float hi, const std::string& label) {
  FloatSlice s{h, w, {}, label};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x)
      s.values.push_back(lo + (hi - lo) * x / (w - 1));
  }
  return s;
}

FloatSlice Square(int h, int w, int top, int left, int size) {
  FloatSlice s{h, w, std::vector<float>(static_cast<size_t>(h) * w, 0.f), ""};
  for (int y = top; y < top + size; ++y) {
    for (int x = left; x < left + size; ++x) s.values[y * w + x] = 1.f;
  }
  return s;
}

int Gray(const Decoded& d, int x, int y) {
  const uint8_t* p = d.At(x, y);
  REQUIRE(p[0] == p[1]);
  REQUIRE(p[1] == p[2]);
  return p[0];
}

TEST_CASE("slice grid: geometry and per-slice min-max gray", "[outputs]") {
  const std::vector<FloatSlice> slices = {
      Ramp(32, 32, -3.f, 5.f, "sample"), Ramp(32, 32, 0.f, 0.001f, "truth"),
      FloatSlice{32, 32, std::vector<float>(32 * 32, 7.f), "constant"}};
  GridOptions o;
  const GridGeometry g = ComputeGridGeometry(3, 32, 32, o);
  CHECK(g.scale == 4);
  CHECK(g.width == 3 * (128 + 8) + 8);
  CHECK(g.height == 20 + 128 + 8 + 8);
  const Decoded d = Decode(SliceGrid(slices, o));
  CHECK(d.width == 416);
  CHECK(d.height == 164);
  // Tile i starts at x = 8 + 136 i, y = 28; pixels are 4x4 blocks.
  for (int tile : {0, 1}) {
    const int x = 8 + 136 * tile, y = 28 + 64;
    CHECK(Gray(d, x + 1, y) == 0);      // each slice's own minimum
    CHECK(Gray(d, x + 126, y) == 255);  // and maximum
  }
  CHECK(Gray(d, 8 + 272 + 64, 28 + 64) == 128);  // constant: mid-gray
  CHECK(d.NonWhite() > 2 * 128 * 128);           // the ramps' maxima are white
}

TEST_CASE("slice grid: a shared range compares intensities", "[outputs]") {
  GridOptions o;
  o.shared_range = true;
  o.columns = 1;
  o.title = "ddpm: samples vs truth";
  const Decoded d = Decode(SliceGrid(
      {Ramp(16, 16, 0.f, 1.f, "truth"), Ramp(16, 16, 0.f, 0.5f, "sample")}, o));
  const GridGeometry g = ComputeGridGeometry(2, 16, 16, o);
  CHECK(g.scale == 8);
  CHECK(d.width == 400);  // at least 400 with a title
  CHECK(d.height == 32 + 2 * (20 + 128 + 8) + 8);
  const int right = 8 + 127;
  CHECK(Gray(d, right, 32 + 28 + 64) == 255);
  CHECK(Gray(d, right, 32 + 28 + 156 + 64) == Approx(128).margin(1));
}

TEST_CASE("slice grid: bad slices give one clear error", "[outputs]") {
  GridOptions o;
  CHECK(SliceGrid({}, o).status().message() == "no slices to show");
  FloatSlice nan = Ramp(4, 4, 0, 1, "pred");
  nan.values[6] = NAN;
  CHECK(SliceGrid({Ramp(4, 4, 0, 1, ""), nan}, o).status().message() ==
        "slice 1 ('pred') has a non-finite value at row 1, column 2");
  CHECK(SliceGrid({Ramp(4, 4, 0, 1, ""), Ramp(4, 5, 0, 1, "")}, o)
            .status()
            .message() == "slice 1 is 4x5, the first slice 4x4");
  FloatSlice short_values{4, 4, {1, 2, 3}, ""};
  CHECK(SliceGrid({short_values}, o).status().message() ==
        "slice 0 has 3 values for 4x4");
  CHECK(SliceGrid({FloatSlice{}}, o).status().message() ==
        "slice 0 is empty (0x0)");
  o.min_tile = 0;
  CHECK(SliceGrid({Ramp(4, 4, 0, 1, "")}, o).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("mask overlay: prediction in red, truth outlined in green",
          "[outputs]") {
  OverlayCase c{Ramp(32, 32, 0, 1, "lesion in the upper left"),
                Square(32, 32, 4, 4, 8),      // predicted: rows/cols 4-11
                Square(32, 32, 16, 16, 10)};  // truth: rows/cols 16-25
  GridOptions o;
  o.title = "segmentation, epoch 3";
  const Decoded d = Decode(MaskOverlayGrid({c, c}, o));
  CHECK(d.width == 400);  // 2 * 136 + 8, widened for the title
  CHECK(d.width == ComputeGridGeometry(2, 32, 32, o).width);
  CHECK(d.height == 32 + 20 + 128 + 8 + 8);
  const int tx = 8, ty = 32 + 28;  // tile 0, scale 4
  // Inside the prediction: the gray ramp tinted red.
  const uint8_t* red = d.At(tx + 8 * 4 + 2, ty + 8 * 4 + 2);
  CHECK(red[0] > red[1] + 40);
  CHECK(red[0] > red[2] + 40);
  // Inside the truth, away from its outline: plain gray.
  const uint8_t* inner = d.At(tx + 21 * 4, ty + 21 * 4);
  CHECK(inner[0] == inner[1]);
  CHECK(inner[1] == inner[2]);
  // The truth's outline: green on its top edge (y = 16 * 4), nowhere near
  // the prediction.
  CHECK(d.Count(44, 200, 44, 40, tx + 16 * 4, ty + 16 * 4 - 1, tx + 26 * 4,
                ty + 16 * 4 + 1) > 30);
  CHECK(d.Count(44, 200, 44, 40, tx, ty, tx + 13 * 4, ty + 13 * 4) == 0);
}

TEST_CASE("mask overlay: bad cases name the case and the slice", "[outputs]") {
  GridOptions o;
  CHECK(MaskOverlayGrid({}, o).status().message() == "no cases to show");
  OverlayCase c{Ramp(8, 8, 0, 1, ""), Square(8, 8, 0, 0, 2),
                Square(8, 6, 0, 0, 2)};
  CHECK(MaskOverlayGrid({c}, o).status().message() ==
        "case 0 true mask is 8x6, the first slice 8x8");
  c.truth = Square(8, 8, 0, 0, 2);
  c.predicted.values[0] = INFINITY;
  CHECK(MaskOverlayGrid({c}, o).status().message() ==
        "case 0 predicted mask has a non-finite value at row 0, column 0");
}

}  // namespace
}  // namespace ddprun::examples::outputs
