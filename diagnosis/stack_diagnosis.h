#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::diagnosis {

// One Python frame as faulthandler prints it: `  File "f", line N in fn`.
struct PyFrame {
  std::string file;
  int line = 0;
  std::string function;
};

// One thread of a faulthandler dump; frames innermost first (faulthandler's
// "most recent call first" order).
struct ThreadStack {
  std::string thread_id;  // "0x00007f..."
  bool current = false;   // "Current thread": the one that took the signal
  std::vector<PyFrame> frames;
};

// Parses what faulthandler.dump_traceback(all_threads=True) (or a
// faulthandler.register'ed signal) writes: "Thread 0x.. (most recent call
// first):" / "Current thread 0x.. ..." headers, each followed by `  File`
// lines. Lines it does not know (our "# ddprun" headers, "<no Python
// frame>", "...") are skipped. Never fails: text without a header gives no
// threads.
std::vector<ThreadStack> ParseFaulthandlerDump(std::string_view text);

// True for frames that are not the user's code: the standard library
// (.../lib/python3.X/...), installed packages (site-packages, dist-packages:
// torch among them) and frozen or generated code ("<frozen ...>").
bool IsLibraryFrame(const PyFrame& frame);

// The thread a rank's diagnosis looks at: the one whose outermost frame is a
// module's top level (`<module>`, the script's main thread), else the
// current thread, else the first. nullptr when there is none.
const ThreadStack* MainThread(const std::vector<ThreadStack>& threads);

// What a C++ worker's handler (worker/src/stack_dump.cc) writes before its
// native frames: "# ddprun native stacks: pid P, doing all_reduce, step 12",
// then "Thread <tid>[ (current)]:" blocks, then "# end of native stacks".
inline constexpr const char* kNativeHeader = "# ddprun native stacks: ";
inline constexpr const char* kNativeEnd = "# end of native stacks";
struct NativeDump {
  bool present = false;
  std::string activity;  // "" = in no collective
  int64_t step = -1;
  int threads = 0;
};
// The last native dump in `text` (present = false when there is none).
NativeDump ParseNativeDump(std::string_view text);

// Where one rank stands, as the diagnosis groups ranks.
struct RankPosition {
  bool known = false;  // false: no stack (see RankStacks::missing)
  PyFrame user;        // innermost frame of user code
  // The library function user code called (all_reduce, sleep, __next__,
  // ...), "" when the innermost frame is user code itself.
  std::string callee;
  bool in_collective = false;  // callee lives in torch/distributed
  // A C++ worker: where it stands is its activity (callee) and step.
  bool native = false;
  int64_t step = -1;
};
RankPosition PositionOf(const std::vector<ThreadStack>& threads);
RankPosition PositionOf(const NativeDump& native);

// A rank's collected stacks, or why there are none.
struct RankStacks {
  int rank = 0;
  int pid = 0;
  std::vector<ThreadStack> threads;
  NativeDump native;  // a C++ worker's dump, used when `threads` is empty
  // Non-empty when the rank gave no stack: "did not answer within 2 s",
  // "stopped (state T)", ...
  std::string missing;
  // Where the rank runs, for a diagnosis across nodes ("node 1: host-b");
  // "" on one node: the paragraph then names pids only.
  std::string node;
};

// The diagnosis in one paragraph: ranks grouped by where they stand (their
// main thread's innermost user frame), the largest group (on a tie the one
// waiting in a torch.distributed call) named as where the others wait, and
// every other rank named with its pid and position, e.g.
//   rank 1 (pid 812) is in train.py:88 in load while ranks 0,2,3 wait in
//   all_reduce (train.py:102)
// (across nodes a rank with a `node` is named "rank 1 (node 1: b, pid 812)").
// Ranks without a stack are named as such; when every rank stands in the
// same place the paragraph says so. "" for no ranks.
std::string DiagnoseHang(const std::vector<RankStacks>& ranks);

// "rank 5 (pid 812)", or with a node "rank 5 (node 1: b, pid 812)".
std::string RankLabel(int rank, int pid, const std::string& node);

// "0,2,3", runs of three or more as "0-4": "0-4,6,7".
std::string FormatRankList(std::vector<int> ranks);

// A thread's frames on one line, innermost first, at most `max_frames`:
// "train.py:88 in load <- train.py:120 in <module>".
std::string OneLineStack(const ThreadStack& thread, size_t max_frames);

}  // namespace ddprun::diagnosis
