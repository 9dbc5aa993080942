#include "diagnosis/stack_diagnosis.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

namespace ddprun::diagnosis {
namespace {

bool StartsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// `  File "path", line 12 in name`; false when the line is not a frame.
bool ParseFrame(std::string_view line, PyFrame* frame) {
  constexpr std::string_view kFile = "  File \"";
  if (!StartsWith(line, kFile)) return false;
  line.remove_prefix(kFile.size());
  // The path may itself contain '"': the frame's tail is `", line N in fn`.
  constexpr std::string_view kLine = "\", line ";
  size_t at = line.rfind(kLine);
  if (at == std::string_view::npos) return false;
  frame->file = std::string(line.substr(0, at));
  std::string_view rest = line.substr(at + kLine.size());
  size_t digits = 0;
  while (digits < rest.size() &&
         std::isdigit(static_cast<unsigned char>(rest[digits]))) {
    ++digits;
  }
  if (digits == 0 || digits > 9) return false;
  frame->line = std::stoi(std::string(rest.substr(0, digits)));
  rest.remove_prefix(digits);
  constexpr std::string_view kIn = " in ";
  frame->function =
      StartsWith(rest, kIn) ? std::string(rest.substr(kIn.size())) : "???";
  return true;
}

// Wrappers between user code and the function it called (torch 2.x's
// c10d_logger `wrapper`, functools-style decorators).
bool IsWrapperName(const std::string& name) {
  static const std::set<std::string> kWrappers = {
      "wrapper", "inner", "_fn", "wrapped", "decorate_context", "_wrapper"};
  return kWrappers.count(name) > 0;
}

std::string Where(const PyFrame& f) {
  return Basename(f.file) + ":" + std::to_string(f.line);
}

// How a group stands, as the paragraph words it.
std::string Describe(const RankPosition& p, bool plural) {
  if (p.native) {
    const std::string step = " (step " + std::to_string(p.step) + ")";
    if (p.callee.empty()) {
      return std::string(plural ? "are" : "is") + " in no collective" + step;
    }
    return std::string(plural ? "wait in " : "waits in ") + p.callee + step;
  }
  if (!p.callee.empty()) {
    return std::string(plural ? "wait in " : "waits in ") + p.callee + " (" +
           Where(p.user) + " in " + p.user.function + ")";
  }
  return std::string(plural ? "are in " : "is in ") + Where(p.user) + " in " +
         p.user.function;
}

std::string RanksWord(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + FormatRankList(ranks);
}

}  // namespace

std::vector<ThreadStack> ParseFaulthandlerDump(std::string_view text) {
  std::vector<ThreadStack> threads;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    bool current = StartsWith(line, "Current thread 0x");
    if (current || StartsWith(line, "Thread 0x")) {
      ThreadStack t;
      t.current = current;
      std::string_view id = line.substr(current ? 15 : 7);
      t.thread_id = std::string(id.substr(0, id.find(' ')));
      threads.push_back(std::move(t));
      continue;
    }
    // faulthandler without all_threads: one "Stack (most recent call
    // first):" block of the current thread.
    if (StartsWith(line, "Stack (most recent call first)")) {
      ThreadStack t;
      t.current = true;
      threads.push_back(std::move(t));
      continue;
    }
    PyFrame frame;
    if (!threads.empty() && ParseFrame(line, &frame)) {
      threads.back().frames.push_back(std::move(frame));
    }
  }
  return threads;
}

bool IsLibraryFrame(const PyFrame& frame) {
  const std::string& f = frame.file;
  if (f.empty() || f[0] == '<') return true;  // <frozen runpy>, <string>
  if (f.find("/site-packages/") != std::string::npos ||
      f.find("/dist-packages/") != std::string::npos) {
    return true;
  }
  // The standard library: .../lib/python3.11/threading.py (also lib64).
  for (const char* lib : {"/lib/python", "/lib64/python"}) {
    size_t at = f.find(lib);
    if (at == std::string::npos) continue;
    size_t v = at + std::string_view(lib).size();
    if (v < f.size() && std::isdigit(static_cast<unsigned char>(f[v]))) {
      return true;
    }
  }
  return false;
}

const ThreadStack* MainThread(const std::vector<ThreadStack>& threads) {
  if (threads.empty()) return nullptr;
  for (const ThreadStack& t : threads) {
    for (const PyFrame& f : t.frames) {
      if (f.function == "<module>" && !IsLibraryFrame(f)) return &t;
    }
  }
  for (const ThreadStack& t : threads) {
    if (t.current) return &t;
  }
  return &threads.front();
}

RankPosition PositionOf(const std::vector<ThreadStack>& threads) {
  RankPosition p;
  const ThreadStack* main = MainThread(threads);
  if (main == nullptr || main->frames.empty()) return p;
  const std::vector<PyFrame>& frames = main->frames;
  size_t user = 0;
  while (user < frames.size() && IsLibraryFrame(frames[user])) ++user;
  if (user == frames.size()) {
    // No user code at all (a library's own main): stand at the innermost.
    p.known = true;
    p.user = frames.front();
    return p;
  }
  p.known = true;
  p.user = frames[user];
  if (user > 0) {
    // The frame user code called, past wrappers.
    size_t callee = user - 1;
    while (callee > 0 && IsWrapperName(frames[callee].function)) --callee;
    p.callee = frames[callee].function;
    p.in_collective =
        frames[callee].file.find("torch/distributed/") != std::string::npos;
  }
  return p;
}

NativeDump ParseNativeDump(std::string_view text) {
  NativeDump d;
  size_t at = text.rfind(kNativeHeader);
  if (at == std::string_view::npos) return d;
  d.present = true;
  std::string_view rest = text.substr(at);
  std::string_view header = rest.substr(0, rest.find('\n'));
  constexpr std::string_view kDoing = ", doing ";
  constexpr std::string_view kStep = ", step ";
  size_t doing = header.find(kDoing);
  size_t step = header.rfind(kStep);
  if (doing != std::string_view::npos && step != std::string_view::npos &&
      step > doing) {
    d.activity = std::string(
        header.substr(doing + kDoing.size(), step - doing - kDoing.size()));
    if (d.activity == "no collective") d.activity.clear();
    d.step = std::strtoll(
        std::string(header.substr(step + kStep.size())).c_str(), nullptr, 10);
  }
  for (size_t line = rest.find("\nThread "); line != std::string_view::npos;
       line = rest.find("\nThread ", line + 1)) {
    ++d.threads;
  }
  return d;
}

RankPosition PositionOf(const NativeDump& native) {
  RankPosition p;
  if (!native.present) return p;
  p.known = true;
  p.native = true;
  p.callee = native.activity;
  p.in_collective = !native.activity.empty();
  p.step = native.step;
  return p;
}

std::string RankLabel(int rank, int pid, const std::string& node) {
  return "rank " + std::to_string(rank) + " (" +
         (node.empty() ? "" : node + ", ") + "pid " + std::to_string(pid) + ")";
}

std::string FormatRankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
    } else {
      for (size_t k = i; k <= j; ++k) {
        if (k > i) out += ",";
        out += std::to_string(ranks[k]);
      }
    }
    i = j + 1;
  }
  return out;
}

std::string OneLineStack(const ThreadStack& thread, size_t max_frames) {
  std::string out;
  for (size_t i = 0; i < thread.frames.size() && i < max_frames; ++i) {
    if (i > 0) out += " <- ";
    out += Where(thread.frames[i]) + " in " + thread.frames[i].function;
  }
  if (thread.frames.size() > max_frames) out += " <- ...";
  if (out.empty()) out = "<no Python frame>";
  return out;
}

std::string DiagnoseHang(const std::vector<RankStacks>& ranks) {
  if (ranks.empty()) return "";
  // Group by position: (file, line, function, callee).
  using Key = std::tuple<std::string, int, std::string, std::string>;
  struct Group {
    RankPosition position;
    std::vector<int> ranks;
    std::vector<int> pids;
    std::vector<std::string> nodes;
  };
  std::map<Key, Group> groups;
  std::vector<const RankStacks*> missing;
  for (const RankStacks& r : ranks) {
    RankPosition p =
        r.threads.empty() ? PositionOf(r.native) : PositionOf(r.threads);
    if (!p.known) {
      missing.push_back(&r);
      continue;
    }
    Key key{p.native ? "native step " + std::to_string(p.step) : p.user.file,
            p.user.line, p.user.function, p.callee};
    Group& g = groups[key];
    g.position = p;
    g.ranks.push_back(r.rank);
    g.pids.push_back(r.pid);
    g.nodes.push_back(r.node);
  }
  auto missing_text = [](const RankStacks& r) {
    return RankLabel(r.rank, r.pid, r.node) + " gave no stack (" +
           (r.missing.empty() ? std::string("no Python frames") : r.missing) +
           ")";
  };
  std::vector<std::string> odd;
  for (const RankStacks* r : missing) odd.push_back(missing_text(*r));
  const Group* majority = nullptr;
  for (const auto& [key, g] : groups) {
    if (majority == nullptr || g.ranks.size() > majority->ranks.size() ||
        (g.ranks.size() == majority->ranks.size() && g.position.in_collective &&
         !majority->position.in_collective)) {
      majority = &g;
    }
  }
  std::string out;
  if (majority != nullptr && groups.size() == 1 && missing.empty()) {
    if (majority->ranks.size() == 1) {
      return RankLabel(majority->ranks[0], majority->pids[0],
                       majority->nodes[0]) +
             " " + Describe(majority->position, false);
    }
    return "all " + std::to_string(majority->ranks.size()) + " ranks (" +
           FormatRankList(majority->ranks) + ") " +
           Describe(majority->position, true) +
           "; no rank stands apart (a hang would be inside that call, or "
           "on another node)";
  }
  // Odd groups: smallest first, then by their lowest rank.
  std::vector<const Group*> others;
  for (const auto& [key, g] : groups) {
    if (&g != majority) others.push_back(&g);
  }
  std::sort(others.begin(), others.end(), [](const Group* a, const Group* b) {
    if (a->ranks.size() != b->ranks.size()) {
      return a->ranks.size() < b->ranks.size();
    }
    return *std::min_element(a->ranks.begin(), a->ranks.end()) <
           *std::min_element(b->ranks.begin(), b->ranks.end());
  });
  std::vector<std::string> parts;
  for (const Group* g : others) {
    std::string who;
    if (g->ranks.size() == 1) {
      who = RankLabel(g->ranks[0], g->pids[0], g->nodes[0]);
    } else {
      who = RanksWord(g->ranks);
    }
    parts.push_back(who + " " + Describe(g->position, g->ranks.size() > 1));
  }
  for (const std::string& m : odd) parts.push_back(m);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += (i + 1 == parts.size()) ? " and " : ", ";
    out += parts[i];
  }
  if (majority != nullptr) {
    out += (out.empty() ? "" : " while ") + RanksWord(majority->ranks) + " " +
           Describe(majority->position, majority->ranks.size() > 1);
  }
  return out;
}

}  // namespace ddprun::diagnosis
