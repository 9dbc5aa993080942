#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace ddprun::agent {

// Where the agent writes worker lines and its own reports; injected so tests
// capture output. Each Write is atomic with respect to other Writes.
class Console {
 public:
  enum class Stream { kOut, kErr };
  virtual ~Console() = default;
  virtual void Write(Stream stream, std::string_view text) = 0;
  // Whether `stream` is a terminal: worker output is then shown live (a
  // line redrawn with '\r' as it is redrawn, not when it ends). Default no.
  virtual bool IsTerminal(Stream /*stream*/) const { return false; }
  // The terminal's window size (rows, columns); {0, 0} when unknown.
  virtual std::pair<unsigned short, unsigned short> TerminalSize() const {
    return {0, 0};
  }

  // Live output (agent loop thread only). The console line is "open" while
  // the last live text did not end in '\n'; its owner is the writer of that
  // text. WriteLive writes `text` of `owner`, first ending another owner's
  // open line with '\n', so two writers never share a line.
  void WriteLive(Stream stream, const void* owner, std::string_view text);
  bool OwnsOpenLine(const void* owner) const {
    return owner != nullptr && open_owner_ == owner;
  }

 private:
  const void* open_owner_ = nullptr;
};

// Writes to the agent's fd 1 / fd 2 with whole-buffer write(2) loops
// (common/file_util.h WriteFully); gives up silently on errors (a closed
// console must not stop the agent).
class FdConsole : public Console {
 public:
  void Write(Stream stream, std::string_view text) override;
  // isatty(2) of fd 1 / fd 2.
  bool IsTerminal(Stream stream) const override;
  // TIOCGWINSZ of fd 1, else fd 2.
  std::pair<unsigned short, unsigned short> TerminalSize() const override;
};

}  // namespace ddprun::agent
