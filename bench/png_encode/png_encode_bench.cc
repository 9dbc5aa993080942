// PNG encoding of a run-outputs picture: examples/outputs' EncodePng (zlib,
// Up filter, fastest level) against stb_image_write's, which it replaced,
// on the same image in one process: median time, size, and the ratio. The
// image is a training-curves plot like the one every run draws (the
// validation pictures are plots and panels of the same kind).
// Usage: png_encode_bench [ROUNDS] (default 15).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <stb_image_write.h>

#include "examples/outputs/curve_plot.h"
#include "examples/outputs/raster_image.h"

namespace outputs = ddprun::examples::outputs;

namespace {

template <typename Encode>
double MedianMs(Encode encode, int rounds, size_t* bytes) {
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    *bytes = encode();
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  outputs::SeriesMap s;
  for (int step = 1; step <= 400; ++step) {
    s["train/loss"].push_back({step, 2.0 * std::exp(-step / 90.0) + 0.1 +
                                         0.05 * std::sin(step * 0.7)});
    s["train/lr"].push_back({step, 1e-3 * (1 - step / 800.0)});
    if (step % 40 == 0) {
      s["val/loss"].push_back({step, 2.2 * std::exp(-step / 120.0)});
      s["val/cindex"].push_back({step, 0.5 + step / 1000.0});
    }
  }
  auto plot = outputs::PlotTrainingCurves("bench: training curves", s);
  if (!plot.ok()) {
    std::fprintf(stderr, "png_encode_bench: %s\n",
                 plot.status().message().c_str());
    return 1;
  }
  const outputs::RasterImage& image = *plot;
  size_t ours_bytes = 0, stb_bytes = 0;
  const double ours =
      MedianMs([&] { return outputs::EncodePng(image).value().size(); }, rounds,
               &ours_bytes);
  const double stb = MedianMs(
      [&] {
        // What EncodePng did before (stb_image_write's public API).
        std::string png;
        auto append = [](void* context, void* data, int size) {
          static_cast<std::string*>(context)->append(
              static_cast<const char*>(data), size);
        };
        stbi_write_png_to_func(append, &png, image.width, image.height,
                               image.channels, image.pixels.data(),
                               image.width * image.channels);
        return png.size();
      },
      rounds, &stb_bytes);
  std::printf(
      "%dx%dx%d plot, median of %d: ours %.2f ms (%zu bytes), "
      "stb %.2f ms (%zu bytes): stb/ours %.1fx the time, %.2fx the "
      "size\n",
      image.width, image.height, image.channels, rounds, ours, ours_bytes, stb,
      stb_bytes, stb / ours, static_cast<double>(stb_bytes) / ours_bytes);
  return 0;
}
