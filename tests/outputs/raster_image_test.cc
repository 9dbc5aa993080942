// EncodePng read back by libpng (through cairo), which checks every chunk's
// CRC and the zlib stream, unlike stb_image: pixels must come back exactly,
// gray and RGB, at sizes whose rows are not a multiple of anything.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include <cairo.h>

#include "ddprun_catch.h"

#include "examples/outputs/raster_image.h"

namespace ddprun::examples::outputs {
namespace {

struct Reader {
  const std::string* bytes;
  size_t at = 0;
};

cairo_status_t ReadChunk(void* closure, unsigned char* data,
                         unsigned int length) {
  auto* r = static_cast<Reader*>(closure);
  if (r->bytes->size() - r->at < length) return CAIRO_STATUS_READ_ERROR;
  std::memcpy(data, r->bytes->data() + r->at, length);
  r->at += length;
  return CAIRO_STATUS_SUCCESS;
}

// RGB of every pixel as libpng decodes it, or an empty string when it
// refuses the bytes.
std::string DecodeStrict(const std::string& png, int* width, int* height) {
  Reader reader{&png};
  cairo_surface_t* s =
      cairo_image_surface_create_from_png_stream(ReadChunk, &reader);
  std::string rgb;
  if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
    *width = cairo_image_surface_get_width(s);
    *height = cairo_image_surface_get_height(s);
    const int stride = cairo_image_surface_get_stride(s);
    const unsigned char* data = cairo_image_surface_get_data(s);
    for (int y = 0; y < *height; ++y) {
      const auto* row = reinterpret_cast<const uint32_t*>(data + y * stride);
      for (int x = 0; x < *width; ++x) {
        rgb.push_back(static_cast<char>((row[x] >> 16) & 0xff));
        rgb.push_back(static_cast<char>((row[x] >> 8) & 0xff));
        rgb.push_back(static_cast<char>(row[x] & 0xff));
      }
    }
  }
  cairo_surface_destroy(s);
  return rgb;
}

RasterImage Noise(int width, int height, int channels, uint32_t seed) {
  std::mt19937 gen(seed);
  RasterImage image{width, height, channels, {}};
  image.pixels.resize(static_cast<size_t>(width) * height * channels);
  for (auto& p : image.pixels) p = static_cast<uint8_t>(gen());
  // Repeated rows and flat runs, as in plots, next to the noise.
  for (int y = 1; y < height; y += 3) {
    std::memcpy(&image.pixels[static_cast<size_t>(y) * width * channels],
                &image.pixels[static_cast<size_t>(y - 1) * width * channels],
                static_cast<size_t>(width) * channels);
  }
  return image;
}

TEST_CASE("PNG: gray and RGB come back pixel-exact from libpng", "[outputs]") {
  for (int channels : {1, 3}) {
    for (auto [w, h] : {std::pair{1, 1}, {7, 3}, {33, 17}, {800, 520}}) {
      const RasterImage image = Noise(w, h, channels, 7u * w + h + channels);
      auto png = EncodePng(image);
      REQUIRE(png.ok());
      int dw = 0, dh = 0;
      const std::string rgb = DecodeStrict(*png, &dw, &dh);
      INFO(channels << " channel(s), " << w << "x" << h);
      REQUIRE(dw == w);
      REQUIRE(dh == h);
      std::string expected;
      for (size_t i = 0; i < image.pixels.size(); i += channels) {
        for (int c = 0; c < 3; ++c) {
          expected.push_back(
              static_cast<char>(image.pixels[i + (channels == 3 ? c : 0)]));
        }
      }
      CHECK(rgb == expected);
    }
  }
}

TEST_CASE("PNG: a flipped byte is caught by the chunk CRC", "[outputs]") {
  auto png = EncodePng(Noise(40, 30, 3, 1));
  REQUIRE(png.ok());
  int w = 0, h = 0;
  REQUIRE(!DecodeStrict(*png, &w, &h).empty());
  std::string broken = *png;
  broken[broken.size() / 2] ^= 0x20;  // inside IDAT's compressed data
  CHECK(DecodeStrict(broken, &w, &h).empty());
}

TEST_CASE("PNG: a white plot compresses to a small file", "[outputs]") {
  RasterImage white{800, 520, 3, {}};
  white.pixels.assign(800 * 520 * 3, 255);
  auto png = EncodePng(white);
  REQUIRE(png.ok());
  CHECK(png->size() < 8000);  // 1.2 MB of pixels
}

}  // namespace
}  // namespace ddprun::examples::outputs
