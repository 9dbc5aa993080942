#include "ddprun_catch.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "agent/process/console.h"
#include "agent/process/line_splitter.h"
#include "agent/process/worker_output.h"

using ddprun::agent::Console;
using ddprun::agent::LineSplitter;
using ddprun::agent::WorkerOutput;

namespace {

class CaptureConsole : public Console {
 public:
  void Write(Stream stream, std::string_view text) override {
    writes.emplace_back(stream, std::string(text));
  }
  std::string All(Stream s) const {
    std::string out;
    for (const auto& [stream, text] : writes) {
      if (stream == s) out += text;
    }
    return out;
  }
  std::vector<std::pair<Stream, std::string>> writes;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("LineSplitter: emits only whole lines, with the prefix", "[agent]") {
  LineSplitter s;
  CHECK(s.Feed("hel", "[default0]:") == "");
  CHECK(s.has_partial());
  CHECK(s.Feed("lo\nwor", "[default0]:") == "[default0]:hello\n");
  CHECK(s.Feed("ld\n\nx\n", "[d1]:") == "[d1]:world\n[d1]:\n[d1]:x\n");
  CHECK_FALSE(s.has_partial());
  CHECK(s.Flush("[d1]:") == "");
}

TEST_CASE("LineSplitter: flushes a partial last line at EOF", "[agent]") {
  LineSplitter s;
  CHECK(s.Feed("a\nno newline", "") == "a\n");
  CHECK(s.Flush("[p]:") == "[p]:no newline\n");
  CHECK(s.Flush("[p]:") == "");
}

TEST_CASE("WorkerOutput: console lines are whole and prefixed", "[agent]") {
  CaptureConsole console;
  WorkerOutput::Options o;
  o.prefix = "[default2]:";
  o.stream = Console::Stream::kErr;
  WorkerOutput out(o, &console);
  REQUIRE(out.Open().ok());
  out.OnChunk("first li");
  CHECK(console.writes.empty());
  out.OnChunk("ne\nsecond\nthi");
  out.OnEof();
  REQUIRE(console.writes.size() == 2);
  CHECK(console.writes[0].first == Console::Stream::kErr);
  CHECK(console.writes[0].second ==
        "[default2]:first line\n[default2]:second\n");
  CHECK(console.writes[1].second == "[default2]:thi\n");
}

TEST_CASE("WorkerOutput: redirect writes raw bytes to the file only",
          "[agent]") {
  char tmpl[] = "/tmp/ddprun_wo_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  std::string path = std::string(tmpl) + "/stdout.log";
  CaptureConsole console;
  WorkerOutput::Options o;
  o.file_path = path;
  o.to_console = false;
  o.prefix = "[default0]:";
  {
    WorkerOutput out(o, &console);
    REQUIRE(out.Open().ok());
    out.OnChunk("a\nb");
    out.OnEof();
  }
  CHECK(console.writes.empty());
  CHECK(ReadFile(path) == "a\nb");
  // tee: file and console.
  o.to_console = true;
  {
    WorkerOutput out(o, &console);
    REQUIRE(out.Open().ok());
    out.OnChunk("c\n");
    out.OnEof();
  }
  CHECK(ReadFile(path) == "c\n");
  CHECK(console.All(Console::Stream::kOut) == "[default0]:c\n");
  unlink(path.c_str());
  rmdir(tmpl);
}

TEST_CASE("WorkerOutput: an uncreatable file is an error", "[agent]") {
  CaptureConsole console;
  WorkerOutput::Options o;
  o.file_path = "/nonexistent_dir_ddprun/x/stdout.log";
  WorkerOutput out(o, &console);
  ddprun::Status s = out.Open();
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("/nonexistent_dir_ddprun/x/stdout.log") !=
        std::string::npos);
}

TEST_CASE("WorkerOutput live: carriage-return redraws pass as they arrive", "[agent]") {
  CaptureConsole console;
  WorkerOutput::Options o;
  o.prefix = "[default0]:";
  o.stream = Console::Stream::kErr;
  o.live = true;
  WorkerOutput out(o, &console);
  REQUIRE(out.Open().ok());
  // tqdm's writes: '\r' first, then the bar, no newline until it ends.
  out.OnChunk("\r 10%|#");
  REQUIRE(console.writes.size() == 1);
  CHECK(console.writes[0].second == "\r[default0]: 10%|#");
  out.OnChunk("\r 20%|##");
  CHECK(console.writes.back().second == "\r[default0]: 20%|##");
  // A redraw ending in '\r', then text: the text gets the prefix.
  out.OnChunk("\r 30%|###\r");
  out.OnChunk("done\nnext");  // a plain partial line waits for its end
  CHECK(console.writes.back().second == "[default0]:done\n");
  out.OnEof();  // ... or the end of the stream
  CHECK(console.writes.back().second == "\n");
  CHECK(console.All(Console::Stream::kErr) ==
        "\r[default0]: 10%|#\r[default0]: 20%|##\r[default0]: 30%|###\r"
        "[default0]:done\n[default0]:next\n");
}

TEST_CASE("WorkerOutput live: two workers never share a line", "[agent]") {
  CaptureConsole console;
  WorkerOutput::Options o;
  o.live = true;
  o.prefix = "[default0]:";
  WorkerOutput r0(o, &console);
  o.prefix = "[default1]:";
  WorkerOutput r1(o, &console);
  r0.OnChunk("\r 50%|#####");
  r1.OnChunk("hello");  // ends rank 0's bar line first
  r1.OnChunk(" world\n");
  r0.OnChunk("\r 60%|######");
  r0.OnChunk("\n");
  CHECK(console.All(Console::Stream::kOut) ==
        "\r[default0]: 50%|#####\n[default1]:hello world\n"
        "\r[default0]: 60%|######\n");
  // A plain partial line (a chunk ending mid-line) waits for its end.
  r0.OnChunk("loading...");
  r1.OnChunk("x\n");
  r0.OnChunk(" ok\n");
  CHECK(console.All(Console::Stream::kOut)
            .find("[default1]:x\n[default0]:loading... ok\n") !=
        std::string::npos);
  // Rank 0's bar open when rank 1 writes: the bar goes on on a new line.
  r0.OnChunk("\rloading 1/2");
  r1.OnChunk("y\n");
  r0.OnChunk("\rloading 2/2\n");
  CHECK(console.All(Console::Stream::kOut)
            .find("\r[default0]:loading 1/2\n[default1]:y\n"
                  "\r[default0]:loading 2/2\n") != std::string::npos);
  // An incomplete UTF-8 character waits for its last byte.
  console.writes.clear();
  r1.OnChunk("\rcaf\xc3");
  CHECK(console.writes.back().second == "\r[default1]:caf");
  r1.OnChunk("\xa9\n");
  CHECK(console.writes.back().second == "\xc3\xa9\n");
}

TEST_CASE("WorkerOutput: not live, a redraw waits for its line", "[agent]") {
  CaptureConsole console;
  WorkerOutput::Options o;
  o.prefix = "[default0]:";
  WorkerOutput out(o, &console);
  out.OnChunk("\r 10%");
  out.OnChunk("\r 20%");
  CHECK(console.writes.empty());
  out.OnChunk("\n");
  CHECK(console.All(Console::Stream::kOut) == "[default0]:\r 10%\r 20%\n");
}
