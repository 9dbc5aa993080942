#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"
#include "examples/outputs/raster_image.h"

namespace ddprun::examples::outputs {

// A 2D slice of float values (an image, a mask, a CT slice), row-major.
struct FloatSlice {
  int height = 0;
  int width = 0;
  std::vector<float> values;  // height * width
  std::string label;          // shown above the tile ("sample", "truth")
};

struct GridOptions {
  std::string title;  // a band above the grid when not empty
  int columns = 0;    // tiles per row; 0 = all in one row
  // Tiles are enlarged by a whole factor (nearest neighbour: pixels stay
  // pixels) to at most this side, e.g. 32x32 slices become 128x128.
  int min_tile = 128;
  // SliceGrid: one gray scale for all slices (compare intensities of a
  // sample and its ground truth) instead of one per slice.
  bool shared_range = false;
};

// Where everything goes; both grid functions lay out this way.
struct GridGeometry {
  int scale = 1;                        // max(1, min_tile / max(height, width))
  int tile_width = 0, tile_height = 0;  // scale * width, scale * height
  int columns = 0, rows = 0;
  // columns * (tile_width + 8) + 8, at least 400 with a title (tiles stay
  // left-aligned; a title longer than the width is cut off).
  int width = 0;
  int height = 0;  // (title ? 32 : 0) + rows * (20 + tile_height + 8) + 8
};
GridGeometry ComputeGridGeometry(int count, int slice_height, int slice_width,
                                 const GridOptions& options);

// Slices side by side in gray, each min-max normalised (black = its minimum,
// white = its maximum; a constant slice is mid-gray), its label above it.
// INVALID_ARGUMENT naming the slice for: no slices, an empty slice, a
// values size that does not match height * width, slices of different
// sizes, a non-finite value, min_tile < 1, an image over 16384 pixels wide
// or high.
StatusOr<RasterImage> SliceGrid(const std::vector<FloatSlice>& slices,
                                const GridOptions& options);

// One segmentation case: the image, the predicted and the true mask (> 0.5
// is inside), all of the same size; image.label is shown above the tile.
struct OverlayCase {
  FloatSlice image;
  FloatSlice predicted;
  FloatSlice truth;
};

// Each case as its gray image (min-max normalised) with the predicted mask
// filled in translucent red and the ground-truth outline in green; the
// title band (always present) is options.title followed by which colour is
// which. Errors as
// SliceGrid, naming the case and which of its three slices is bad.
StatusOr<RasterImage> MaskOverlayGrid(const std::vector<OverlayCase>& cases,
                                      const GridOptions& options);

}  // namespace ddprun::examples::outputs
