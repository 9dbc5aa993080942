#include "examples/outputs/raster_image.h"

#include <cstring>

#include <zlib.h>

#include "common/file_util.h"

namespace ddprun::examples::outputs {

Status CheckRaster(const RasterImage& image) {
  constexpr int kMaxSide = 16384;
  if (image.channels != 1 && image.channels != 3) {
    return InvalidArgumentError("image has " + std::to_string(image.channels) +
                                " channels; expected 1 (gray) or 3 (RGB)");
  }
  if (image.width < 1 || image.height < 1 || image.width > kMaxSide ||
      image.height > kMaxSide) {
    return InvalidArgumentError("image size " + std::to_string(image.width) +
                                "x" + std::to_string(image.height) +
                                " is outside 1..16384");
  }
  const size_t expected = static_cast<size_t>(image.width) * image.height *
                          static_cast<size_t>(image.channels);
  if (image.pixels.size() != expected) {
    return InvalidArgumentError("image of " + std::to_string(image.width) +
                                "x" + std::to_string(image.height) + "x" +
                                std::to_string(image.channels) + " needs " +
                                std::to_string(expected) + " bytes, has " +
                                std::to_string(image.pixels.size()));
  }
  return Status::Ok();
}

namespace {

void AppendU32(uint32_t v, std::string* out) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  out->append(bytes, 4);
}

// length, type, data, CRC-32 of type and data (PNG spec 5.3).
void AppendChunk(const char* type, const std::string& data, std::string* png) {
  AppendU32(static_cast<uint32_t>(data.size()), png);
  const size_t typed = png->size();
  png->append(type, 4);
  png->append(data);
  const uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(png->data() + typed),
            static_cast<uInt>(png->size() - typed));
  AppendU32(static_cast<uint32_t>(crc), png);
}

}  // namespace

StatusOr<std::string> EncodePng(const RasterImage& image) {
  DDP_RETURN_IF_ERROR(CheckRaster(image));
  // Every row with the "Up" filter (its difference to the row above): plots
  // and panels repeat rows, so this compresses about as well as stb's
  // per-row filter search at the fastest zlib level, in a seventh of the
  // time (an 800x520 plot: 3.4 against 24.7 ms). Trainers draw a picture at
  // every validation on rank 0, where any time is serial.
  const size_t row = static_cast<size_t>(image.width) * image.channels;
  std::string filtered;
  filtered.resize((row + 1) * image.height);
  const uint8_t* px = image.pixels.data();
  for (int y = 0; y < image.height; ++y) {
    char* out = &filtered[(row + 1) * y];
    const uint8_t* cur = px + row * y;
    if (y == 0) {
      out[0] = 0;  // None: nothing above the first row.
      std::memcpy(out + 1, cur, row);
      continue;
    }
    out[0] = 2;
    const uint8_t* up = cur - row;
    for (size_t x = 0; x < row; ++x) {
      out[1 + x] = static_cast<char>(static_cast<uint8_t>(cur[x] - up[x]));
    }
  }
  uLongf compressed_size = compressBound(static_cast<uLong>(filtered.size()));
  std::string idat(compressed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(&idat[0]), &compressed_size,
                reinterpret_cast<const Bytef*>(filtered.data()),
                static_cast<uLong>(filtered.size()), Z_BEST_SPEED) != Z_OK) {
    return InternalError("cannot encode a " + std::to_string(image.width) +
                         "x" + std::to_string(image.height) + " PNG");
  }
  idat.resize(compressed_size);

  std::string header;
  AppendU32(static_cast<uint32_t>(image.width), &header);
  AppendU32(static_cast<uint32_t>(image.height), &header);
  header.push_back(8);                            // bits per channel
  header.push_back(image.channels == 1 ? 0 : 2);  // gray or RGB
  header.append(3, '\0');  // deflate, adaptive filtering, no interlace
  std::string png("\x89PNG\r\n\x1a\n", 8);
  AppendChunk("IHDR", header, &png);
  AppendChunk("IDAT", idat, &png);
  AppendChunk("IEND", std::string(), &png);
  return png;
}

Status ReplaceFile(const std::string& path, const std::string& bytes) {
  AtomicWriteOptions not_durable;
  not_durable.durable = false;
  return WriteFileAtomically(path, {bytes}, not_durable);
}

Status WritePng(const std::string& path, const RasterImage& image) {
  DDP_ASSIGN_OR_RETURN(const std::string png, EncodePng(image));
  return ReplaceFile(path, png);
}

}  // namespace ddprun::examples::outputs
