#pragma once

// Small files that declare huge images and volumes (decompression bombs),
// and a way to run a trainer and read its peak memory. Torch-free test
// code.

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::examples::testing {

// A valid 8-bit grayscale PNG of `width` x `height` black pixels; the
// pixel data is deflated row by row (20000 x 20000 is ~390 KB on disk).
void WriteBlackPng(const std::string& path, int width, int height);

// The 352 bytes in front of a single-file NIfTI-1 volume (.nii) of `nx` x
// `ny` x `nz` voxels of `datatype` (a DT_* code, `bitpix` bits each), data
// at offset 352, stored value * scl_slope + scl_inter.
std::string NiftiHeader(int nx, int ny, int nz, int16_t datatype,
                        int16_t bitpix, float scl_slope = 1,
                        float scl_inter = 0);

// A gzip-compressed NIfTI-1 volume (.nii.gz) of `nx` x `ny` x `nz` uint8
// zeros (700^3 is ~330 KB on disk).
void WriteZeroNiftiGz(const std::string& path, int nx, int ny, int nz);

// Runs `argv` (argv[0] a path) with OMP_NUM_THREADS=1 and the output in
// `out_file`, waits at most `timeout_s` (then SIGKILL) and returns the exit
// code (128 + N for signal N) and the process's peak RSS.
struct PeakRun {
  int exit_code = -1;
  long max_rss_kb = 0;
  std::string output;
};
PeakRun RunMeasured(const std::vector<std::string>& argv,
                    const std::string& out_file, int timeout_s);

}  // namespace ddprun::examples::testing
