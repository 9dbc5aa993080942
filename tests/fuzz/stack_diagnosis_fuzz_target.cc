// libFuzzer target over the hang diagnosis (diagnosis/): the stack-dump
// parsers (faulthandler's text, the C++ worker's native header), the
// positions and the one-paragraph diagnosis, and the summaries nodes send
// each other.
//
// Input: the stacks files of up to 8 ranks, separated by a line
// "#--rank--" (what each rank's stacks.txt holds: faulthandler's dumps,
// ddprun's "# ddprun" headers, a C++ worker's native dump). An empty part is
// a rank that gave no stack.
//
// Invariants (abort() on violation): every parsed frame comes from one
// line (no newline in a field); a summary parses back to the rank's
// position (where it stands, what it called) whenever its innermost user
// frame is within the summary's kSummaryFrames, and to its native dump;
// the diagnosis across nodes (from the summaries) names the same groups as
// the local one; the paragraph and console lines are non-empty and bounded
// by the input's size.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "diagnosis/stack_diagnosis.h"
#include "diagnosis/stack_summary.h"
#include "fuzz_check.h"

namespace ddprun::diagnosis {
namespace {

using fuzz::Check;

constexpr std::string_view kSeparator = "#--rank--\n";
constexpr size_t kMaxRanks = 8;

bool OneLine(const std::string& s) { return s.find('\n') == std::string::npos; }

bool SamePosition(const RankPosition& a, const RankPosition& b) {
  return a.known == b.known && a.user.file == b.user.file &&
         a.user.line == b.user.line && a.user.function == b.user.function &&
         a.callee == b.callee && a.in_collective == b.in_collective &&
         a.native == b.native && a.step == b.step;
}

// Index of the innermost user frame of the rank's main thread (its
// frames' count when there is none).
size_t UserFrame(const std::vector<ThreadStack>& threads) {
  const ThreadStack* main = MainThread(threads);
  size_t user = 0;
  while (main != nullptr && user < main->frames.size() &&
         IsLibraryFrame(main->frames[user])) {
    ++user;
  }
  return user;
}

}  // namespace
}  // namespace ddprun::diagnosis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::diagnosis;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<RankStacks> ranks;
  std::vector<RankStacks> received;  // the same ranks through summaries
  size_t pos = 0;
  while (pos <= text.size() && ranks.size() < kMaxRanks) {
    size_t end = text.find(kSeparator, pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(pos, end - pos);
    pos = end + kSeparator.size();

    RankStacks r;
    r.rank = static_cast<int>(ranks.size());
    r.pid = 1000 + r.rank;
    r.threads = ParseFaulthandlerDump(part);
    r.native = ParseNativeDump(part);
    if (part.empty()) r.missing = "did not answer within 2 s";
    for (const ThreadStack& t : r.threads) {
      Check(OneLine(t.thread_id), "a thread id spans lines");
      for (const PyFrame& f : t.frames) {
        Check(OneLine(f.file) && OneLine(f.function), "a frame spans lines");
      }
    }
    Check(r.native.threads >= 0, "a negative native thread count");
    if (!r.native.present) {
      Check(r.native.activity.empty() && r.native.step == -1 &&
                r.native.threads == 0,
            "an absent native dump has fields");
    }

    // Across nodes: the summary a node sends, parsed where it arrives.
    const StackSummary summary = Summarize(r, /*group_rank=*/1, "host-b");
    RankStacks back = FromSummary(summary);
    Check(back.rank == r.rank && back.pid == r.pid, "the summary lost who");
    if (!r.threads.empty()) {
      Check(back.threads.size() == 1, "a summary is not one thread");
      if (UserFrame(r.threads) < kSummaryFrames) {
        Check(SamePosition(PositionOf(r.threads), PositionOf(back.threads)),
              "the summary moved the rank");
      }
    } else if (r.native.present) {
      Check(back.native.present && back.native.step == r.native.step &&
                back.native.activity == r.native.activity &&
                back.native.threads == r.native.threads,
            "the summary changed the native dump");
    }
    const std::string line = ConsoleLine(back, 12);
    Check(!line.empty() && line.back() == '\n', "a console line without end");
    Check(line.size() <= 2 * part.size() + 512, "a console line too long");
    if (UserFrame(r.threads) >= kSummaryFrames) back.threads = r.threads;
    back.node.clear();
    ranks.push_back(std::move(r));
    received.push_back(std::move(back));
  }
  const std::string local = DiagnoseHang(ranks);
  Check(!local.empty(), "no diagnosis for ranks");
  Check(local.size() <= 4 * size + 512 * ranks.size(), "a diagnosis too long");
  // The summaries keep what the diagnosis groups by.
  Check(DiagnoseHang(received) == local,
        "the summaries give another diagnosis");
  return 0;
}
