// A gcc-buildable driver for any LLVMFuzzerTestOneInput in tests/fuzz/:
// replays a seed corpus, then pseudo-random mutations of it (bit flips,
// inserts, deletes, repeated chunks, splices) for a bounded time. ctest runs
// it briefly for every target (fuzz/<name>); a Clang build gets the real
// coverage-guided libFuzzer binary of the same target instead
// (tests/fuzz/CMakeLists.txt, run_libfuzzer.sh).
//
//   <name>_fuzz_replay [--seconds S] [--seed N] [--max_len B] CORPUS_DIR...
//   <name>_fuzz_replay --write_seeds DIR   (writes the target's built-in
//                                            seeds, if it has any)
//
// Exit 0 when every input ran; an invariant violation aborts (non-zero),
// and the failing input is written to ./fuzz-failure-<pid> (its first
// bytes printed in hex).
// A target may add seeds built in code by defining DdprunFuzzSeeds()
// (fuzz_seeds.h); otherwise the corpus directories are the seeds.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// The default: no seeds built in code (a target overrides it).
__attribute__((weak)) std::vector<std::string> DdprunFuzzSeeds() { return {}; }

namespace {

std::vector<std::string> ReadCorpus(const std::string& dir, bool* found) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  *found = d != nullptr;
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    out.push_back(ss.str());
  }
  closedir(d);
  return out;
}

std::string Mutate(std::string s, const std::vector<std::string>& corpus,
                   size_t max_len, std::mt19937_64& rng) {
  const int n = 1 + rng() % 8;
  for (int i = 0; i < n; ++i) {
    const size_t pos = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[pos] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s[pos] = static_cast<char>(rng());
        break;
      case 2:
        s.insert(pos, 1, static_cast<char>(rng()));
        break;
      case 3:
        if (!s.empty()) s.erase(pos, 1 + rng() % 4);
        break;
      case 4: {  // duplicate a chunk (repeats a record or a request)
        const size_t len = s.empty() ? 0 : 1 + rng() % (s.size() - pos);
        s.insert(pos, s.substr(pos, len));
        break;
      }
      case 5: {  // splice with another corpus entry
        const std::string& other = corpus[rng() % corpus.size()];
        s = s.substr(0, pos) +
            other.substr(other.empty() ? 0 : rng() % other.size());
        break;
      }
      case 6: {  // an interesting integer byte (0, 0xff, 0x7f, 0x80)
        static const char kBytes[] = {0, '\xff', '\x7f', '\x80'};
        if (!s.empty()) s[pos] = kBytes[rng() % 4];
        break;
      }
    }
  }
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

// The input being run, for the report of one that aborts or crashes.
const std::string* g_current = nullptr;

// On an invariant violation (abort) or a crash: the input into
// ./fuzz-failure-<pid> and its first bytes in hex on stderr, so that it can
// be replayed and added to the corpus. Only async-signal-safe calls.
void ReportInput(int sig) {
  if (g_current != nullptr) {
    char name[64];
    std::snprintf(name, sizeof(name), "fuzz-failure-%d", ::getpid());
    const int fd = ::open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)!::write(fd, g_current->data(), g_current->size());
      ::close(fd);
    }
    char line[160];
    int n = std::snprintf(line, sizeof(line),
                          "failing input: %zu bytes, written to %s; first "
                          "bytes:\n",
                          g_current->size(), name);
    (void)!::write(2, line, static_cast<size_t>(n));
    const size_t shown = g_current->size() < 256 ? g_current->size() : 256;
    for (size_t i = 0; i < shown; ++i) {
      n = std::snprintf(line, sizeof(line), "%02x%s",
                        static_cast<unsigned char>((*g_current)[i]),
                        (i % 32 == 31 || i + 1 == shown) ? "\n" : " ");
      (void)!::write(2, line, static_cast<size_t>(n));
    }
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void Run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
  g_current = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const char* self = argc > 0 ? argv[0] : "fuzz_replay";
  double seconds = 10;
  uint64_t seed = 1;
  size_t max_len = 16384;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--max_len" && i + 1 < argc) {
      max_len = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--write_seeds" && i + 1 < argc) {
      const std::string dir = argv[++i];
      const auto seeds = DdprunFuzzSeeds();
      for (size_t k = 0; k < seeds.size(); ++k) {
        std::ofstream(dir + "/seed" + std::to_string(k), std::ios::binary)
            << seeds[k];
      }
      std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "%s: unknown option %s\n", self, arg.c_str());
      return 2;
    } else {
      dirs.push_back(arg);
    }
  }
  std::vector<std::string> corpus = DdprunFuzzSeeds();
  for (const auto& d : dirs) {
    bool found = false;
    const auto files = ReadCorpus(d, &found);
    if (!found || files.empty()) {
      std::fprintf(stderr, "%s: no corpus in %s\n", self, d.c_str());
      return 2;
    }
    corpus.insert(corpus.end(), files.begin(), files.end());
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "%s: no seeds: name a corpus folder\n", self);
    return 2;
  }
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    std::signal(sig, ReportInput);
  }
  for (const auto& input : corpus) Run(input);
  std::mt19937_64 rng(seed);
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(seconds));
  uint64_t runs = corpus.size();
  while (std::chrono::steady_clock::now() < deadline) {
    Run(Mutate(corpus[rng() % corpus.size()], corpus, max_len, rng));
    ++runs;
  }
  std::printf(
      "%s: %llu inputs (%zu corpus), seed %llu, no invariant violated\n", self,
      static_cast<unsigned long long>(runs), corpus.size(),
      static_cast<unsigned long long>(seed));
  return 0;
}
