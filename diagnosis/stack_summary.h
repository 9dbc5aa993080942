#pragma once

#include <cstddef>
#include <string>

#include "diagnosis/stack_diagnosis.h"

namespace ddprun::diagnosis {

// One rank's stacks as they travel between nodes (the proto's RankStack,
// the rendezvous client's StacksAnswer): its main thread as faulthandler
// prints it, or a C++ worker's native header.
struct StackSummary {
  int rank = 0;
  int pid = 0;
  int group_rank = 0;  // the node's, in the running round
  std::string host;
  std::string stack;
  std::string missing;  // non-empty: why there is no stack
};

// "node 1: host-b": how a diagnosis across nodes names a rank's node.
std::string NodeLabel(int group_rank, const std::string& host);

// What one node sends the others (the Stacks rpc): the rank's main thread
// as faulthandler prints it, innermost first, up to its innermost user
// frame and kSummaryFramesPast more (at most kSummaryFrames frames); a C++
// worker's native header with its thread count. FromSummary() parses it
// back into what DiagnoseHang needs (node set to NodeLabel()).
inline constexpr size_t kSummaryFrames = 32;
inline constexpr size_t kSummaryFramesPast = 8;
StackSummary Summarize(const RankStacks& rank, int group_rank,
                       const std::string& host);

// A summary's stack text is at most this long (64 KiB requests carry a
// dozen ranks; the rendezvous pages the rest). CutSummary() keeps whole
// lines within it and ends with kCutMark's line when it cut anything; the
// parsers skip that line.
inline constexpr size_t kMaxSummaryBytes = 4096;
inline constexpr const char* kCutMark = "  ... (cut by ddprun to 4096 bytes)";
std::string CutSummary(const std::string& stack);
RankStacks FromSummary(const StackSummary& summary);

// One console line for a rank, "  rank 2 (pid 812): train.py:88 in load <-
// ... (+2 more threads)" (the node before the pid when it has one), at
// most `max_frames` frames; native workers and missing stacks say so.
// Control characters are escaped (EscapeControlChars): one line, always.
std::string ConsoleLine(const RankStacks& rank, size_t max_frames);

}  // namespace ddprun::diagnosis
