#include "diagnosis/stack_summary.h"

#include <algorithm>

#include "common/logging.h"

namespace ddprun::diagnosis {

std::string NodeLabel(int group_rank, const std::string& host) {
  return "node " + std::to_string(group_rank) + ": " + host;
}

StackSummary Summarize(const RankStacks& rank, int group_rank,
                       const std::string& host) {
  StackSummary s;
  s.rank = rank.rank;
  s.pid = rank.pid;
  s.group_rank = group_rank;
  s.host = host;
  s.missing = rank.missing;
  if (const ThreadStack* main = MainThread(rank.threads)) {
    size_t user = 0;
    while (user < main->frames.size() && IsLibraryFrame(main->frames[user])) {
      ++user;
    }
    const size_t keep = std::min(
        {main->frames.size(), user + 1 + kSummaryFramesPast, kSummaryFrames});
    s.stack = "Current thread " +
              (main->thread_id.empty() ? std::string("0x0") : main->thread_id) +
              " (most recent call first):\n";
    for (size_t i = 0; i < keep; ++i) {
      const PyFrame& f = main->frames[i];
      s.stack += "  File \"" + f.file + "\", line " + std::to_string(f.line) +
                 " in " + f.function + "\n";
    }
  } else if (rank.native.present) {
    s.stack = std::string(kNativeHeader) + "pid " + std::to_string(rank.pid) +
              ", doing " +
              (rank.native.activity.empty() ? std::string("no collective")
                                            : rank.native.activity) +
              ", step " + std::to_string(rank.native.step) + "\n";
    for (int t = 0; t < rank.native.threads; ++t) s.stack += "Thread ?:\n";
    s.stack += std::string(kNativeEnd) + "\n";
  } else if (s.missing.empty()) {
    s.missing = "no Python frames";
  }
  s.stack = CutSummary(s.stack);
  return s;
}

std::string CutSummary(const std::string& stack) {
  if (stack.size() <= kMaxSummaryBytes) return stack;
  const std::string mark = std::string(kCutMark) + "\n";
  const size_t room = kMaxSummaryBytes - mark.size();
  // The last whole line that fits (none: the mark alone).
  const size_t end = stack.rfind('\n', room - 1);
  return (end == std::string::npos ? "" : stack.substr(0, end + 1)) + mark;
}

RankStacks FromSummary(const StackSummary& summary) {
  RankStacks rank;
  rank.rank = summary.rank;
  rank.pid = summary.pid;
  rank.missing = summary.missing;
  rank.node = NodeLabel(summary.group_rank, summary.host);
  if (summary.missing.empty()) {
    rank.threads = ParseFaulthandlerDump(summary.stack);
    rank.native = ParseNativeDump(summary.stack);
  }
  return rank;
}

std::string ConsoleLine(const RankStacks& r, size_t max_frames) {
  std::string line = "  " + RankLabel(r.rank, r.pid, r.node) + ": ";
  if (const ThreadStack* main = MainThread(r.threads)) {
    line += OneLineStack(*main, max_frames);
    if (r.threads.size() > 1) {
      line += " (+" + std::to_string(r.threads.size() - 1) + " more thread" +
              (r.threads.size() > 2 ? "s" : "") + ")";
    }
  } else if (r.native.present) {
    line += "native: " +
            (r.native.activity.empty() ? std::string("in no collective")
                                       : "in " + r.native.activity) +
            ", step " + std::to_string(r.native.step) + ", " +
            std::to_string(r.native.threads) +
            (r.native.threads == 1 ? " thread" : " threads");
  } else {
    line += "no stack: " +
            (r.missing.empty() ? std::string("no Python frames") : r.missing);
  }
  // Frames, hosts and reasons may come from other nodes: they cannot add
  // lines or drive the terminal.
  return EscapeControlChars(line) + "\n";
}

}  // namespace ddprun::diagnosis
