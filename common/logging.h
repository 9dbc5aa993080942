#pragma once

#include <sstream>
#include <string>

namespace ddprun {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Minimum level printed. Initialised from DDPRUN_LOG_LEVEL or LOGLEVEL
// (DEBUG|INFO|WARNING|ERROR, torchrun's variable) on first use; INFO if unset.
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);

// Tag printed in every line, e.g. "ddprun" or "rdzv"; default "ddprun".
void SetLogTag(const std::string& tag);

// `text` with every control character (below 0x20, and 0x7f) written as an
// escape (\n, \r, \t, \x1b ...): text from the network (a job id, a
// reason) cannot forge log lines or drive the terminal.
std::string EscapeControlChars(const std::string& text);

// One log line. The destructor writes the whole line to stderr with a single
// write(2), so lines from different threads or processes never interleave.
// Control characters in the message are escaped (EscapeControlChars): a line
// is always exactly one line.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Swallows a stream expression when the level is disabled.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace ddprun

#define DDP_LOG_LEVEL_DEBUG ::ddprun::LogLevel::kDebug
#define DDP_LOG_LEVEL_INFO ::ddprun::LogLevel::kInfo
#define DDP_LOG_LEVEL_WARNING ::ddprun::LogLevel::kWarning
#define DDP_LOG_LEVEL_ERROR ::ddprun::LogLevel::kError

// DDP_LOG(INFO) << "started " << n << " workers";
#define DDP_LOG(level)                                                      \
  (DDP_LOG_LEVEL_##level < ::ddprun::MinLogLevel())                         \
      ? (void)0                                                             \
      : ::ddprun::LogVoidify() &                                            \
            ::ddprun::LogMessage(DDP_LOG_LEVEL_##level, __FILE__, __LINE__) \
                .stream()
