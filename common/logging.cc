#include "common/logging.h"

#include <unistd.h>

#include <sys/time.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "common/file_util.h"
#include "common/mutex.h"

namespace ddprun {
namespace {

LogLevel ParseLevel(const char* s, LogLevel fallback) {
  if (s == nullptr || *s == '\0') return fallback;
  std::string v(s);
  for (auto& c : v) c = static_cast<char>(toupper(c));
  if (v == "DEBUG") return LogLevel::kDebug;
  if (v == "INFO") return LogLevel::kInfo;
  if (v == "WARNING" || v == "WARN") return LogLevel::kWarning;
  if (v == "ERROR" || v == "CRITICAL") return LogLevel::kError;
  return fallback;
}

std::atomic<int>& LevelStorage() {
  static std::atomic<int> level{[] {
    const char* own = std::getenv("DDPRUN_LOG_LEVEL");
    const char* torch = std::getenv("LOGLEVEL");
    return static_cast<int>(
        ParseLevel(own, ParseLevel(torch, LogLevel::kInfo)));
  }()};
  return level;
}

// The tag every line carries; set once at start, read by every line.
struct LogTag {
  Mutex mu;
  std::string tag GUARDED_BY(mu) = "ddprun";
};
LogTag& TheTag() {
  static LogTag* tag = new LogTag();  // never destroyed: logs may run late
  return *tag;
}

char LevelLetter(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return 'D';
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}

}  // namespace

std::string EscapeControlChars(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c != 0x7f) {
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

LogLevel MinLogLevel() { return static_cast<LogLevel>(LevelStorage().load()); }
void SetMinLogLevel(LogLevel level) {
  LevelStorage().store(static_cast<int>(level));
}
void SetLogTag(const std::string& tag) {
  LogTag& t = TheTag();
  MutexLock lock(&t.mu);
  t.tag = tag;
}

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm parts;
  localtime_r(&tv.tv_sec, &parts);
  char when[32];
  std::snprintf(when, sizeof(when), "%02d:%02d:%02d.%03d", parts.tm_hour,
                parts.tm_min, parts.tm_sec,
                static_cast<int>(tv.tv_usec / 1000));
  const char* base = std::strrchr(file, '/');
  std::string tag;
  {
    LogTag& t = TheTag();
    MutexLock lock(&t.mu);
    tag = t.tag;
  }
  stream_ << '[' << tag << ' ' << LevelLetter(level_) << ' ' << when << ' '
          << (base ? base + 1 : file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  const std::string s = EscapeControlChars(stream_.str()) + '\n';
  // stderr gone: nothing better to do with a log line.
  (void)WriteFully(STDERR_FILENO, s);
}

}  // namespace ddprun
