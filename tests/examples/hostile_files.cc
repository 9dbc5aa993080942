#include "tests/examples/hostile_files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ddprun::examples::testing {
namespace {

void Put32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

void Chunk(std::string* png, const char* type, const std::string& data) {
  Put32(png, static_cast<uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  *png += body;
  Put32(png, static_cast<uint32_t>(
                 crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                       static_cast<uInt>(body.size()))));
}

// Streams bytes through deflate (zlib or gzip framing) into a string.
class Deflater {
 public:
  explicit Deflater(bool gzip) {
    if (deflateInit2(&z_, 9, Z_DEFLATED, gzip ? 31 : 15, 9,
                     Z_DEFAULT_STRATEGY) != Z_OK) {
      throw std::runtime_error("deflateInit2");
    }
  }
  ~Deflater() { deflateEnd(&z_); }
  Deflater(const Deflater&) = delete;
  Deflater& operator=(const Deflater&) = delete;

  void Add(const std::string& data) { Run(data, Z_NO_FLUSH); }
  std::string Finish() {
    Run("", Z_FINISH);
    return std::move(out_);
  }

 private:
  void Run(const std::string& data, int flush) {
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    z_.avail_in = static_cast<uInt>(data.size());
    char buf[1 << 16];
    do {
      z_.next_out = reinterpret_cast<Bytef*>(buf);
      z_.avail_out = sizeof(buf);
      deflate(&z_, flush);
      out_.append(buf, sizeof(buf) - z_.avail_out);
    } while (z_.avail_out == 0);
  }

  z_stream z_{};
  std::string out_;
};

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

void WriteBlackPng(const std::string& path, int width, int height) {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  Put32(&ihdr, static_cast<uint32_t>(width));
  Put32(&ihdr, static_cast<uint32_t>(height));
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // 8-bit gray, no interlace
  Chunk(&png, "IHDR", ihdr);
  // Each row: filter byte 0, then the pixels.
  Deflater pixels(/*gzip=*/false);
  const std::string row(static_cast<size_t>(width) + 1, '\0');
  for (int r = 0; r < height; ++r) pixels.Add(row);
  Chunk(&png, "IDAT", pixels.Finish());
  Chunk(&png, "IEND", "");
  Write(path, png);
}

std::string NiftiHeader(int nx, int ny, int nz, int16_t datatype,
                        int16_t bitpix, float scl_slope, float scl_inter) {
  // NIfTI-1 single file: a 348-byte header, 4 bytes of extension flag,
  // then the data at vox_offset 352.
  std::string header(352, '\0');
  auto put = [&](size_t at, const void* v, size_t n) {
    std::memcpy(&header[at], v, n);
  };
  const int32_t sizeof_hdr = 348;
  put(0, &sizeof_hdr, 4);
  const int16_t x = static_cast<int16_t>(nx), y = static_cast<int16_t>(ny),
                z = static_cast<int16_t>(nz);
  const int16_t dim[8] = {3, x, y, z, 1, 1, 1, 1};
  put(40, dim, sizeof(dim));
  put(70, &datatype, 2);
  put(72, &bitpix, 2);
  const float pixdim[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  put(76, pixdim, sizeof(pixdim));
  const float vox_offset = 352;
  put(108, &vox_offset, 4);
  put(112, &scl_slope, 4);
  put(116, &scl_inter, 4);
  put(344, "n+1\0", 4);
  return header;
}

void WriteZeroNiftiGz(const std::string& path, int nx, int ny, int nz) {
  const std::string header =
      NiftiHeader(nx, ny, nz, /*datatype=*/2, /*bitpix=*/8);  // DT_UINT8
  // The header and the zeros as one gzip stream, a row of nx voxels at a
  // time.
  Deflater gz(/*gzip=*/true);
  gz.Add(header);
  const std::string row(static_cast<size_t>(nx), '\0');
  for (int64_t r = 0; r < int64_t{ny} * nz; ++r) gz.Add(row);
  Write(path, gz.Finish());
}

PeakRun RunMeasured(const std::vector<std::string>& argv,
                    const std::string& out_file, int timeout_s) {
  PeakRun run;
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("OMP_NUM_THREADS", "1", 1);
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, WNOHANG, &usage) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.max_rss_kb = usage.ru_maxrss;
  std::ifstream in(out_file);
  std::stringstream ss;
  ss << in.rdbuf();
  run.output = ss.str();
  return run;
}

}  // namespace ddprun::examples::testing
