#include "agent/elastic/failure_report.h"

#include <netdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agent/process/signal_names.h"
#include "common/file_util.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

using nlohmann::json;

const char kDocsLine[] =
    "To enable traceback see: "
    "https://pytorch.org/docs/stable/elastic/errors.html";

// Python's int() of a JSON number or numeric string; false when neither,
// or when it is beyond what a time_t of seconds holds.
bool ToTimestamp(const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return false;
    }
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number()) {
    const double d = v.get<double>();
    // 2^63: the first double an int64_t cannot hold.
    if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0)) {
      return false;
    }
    *out = static_cast<int64_t>(d);
    return true;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    long long n = std::strtoll(s.c_str(), &end, 10);
    if (errno != 0 || end == s.c_str() || *end != '\0') return false;
    *out = n;
    return true;
  }
  return false;
}

std::string Indent(std::string s) {
  std::string out;
  for (char c : s) {
    out.push_back(c);
    if (c == '\n') out += "  ";
  }
  return out;
}

// Fills traceback and timestamp from a parsed error file; false when the
// content does not follow either of torchrun's forms.
bool ParseErrorData(const json& data, ProcessFailure* f) {
  if (!data.is_object() || !data.contains("message")) return false;
  const json& message = data["message"];
  if (message.is_string()) {
    f->traceback = message.get<std::string>();
    f->timestamp = 0;
    if (data.contains("timestamp") &&
        !ToTimestamp(data["timestamp"], &f->timestamp)) {
      return false;
    }
    return true;
  }
  if (!message.is_object()) return false;
  const json* extra =
      message.contains("extraInfo") ? &message["extraInfo"] : nullptr;
  if (extra == nullptr || !extra->is_object() ||
      !extra->contains("timestamp") ||
      !ToTimestamp((*extra)["timestamp"], &f->timestamp)) {
    return false;
  }
  std::string text = kNotAvailable;
  if (extra->contains("py_callstack") && (*extra)["py_callstack"].is_string()) {
    text = (*extra)["py_callstack"].get<std::string>();
  } else if (message.contains("message") && message["message"].is_string()) {
    text = message["message"].get<std::string>();
  }
  f->traceback = Indent(text);
  return true;
}

std::string LocalIsoTime(int64_t ts) {
  time_t t = static_cast<time_t>(ts);
  struct tm tm {};
  if (localtime_r(&t, &tm) == nullptr) return std::to_string(ts);
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

}  // namespace

bool ParseErrorFile(const std::string& text, ProcessFailure* f) {
  bool too_deep = false;
  json::parser_callback_t depth_check =
      [&too_deep](int depth, json::parse_event_t, json&) {
        if (depth > kMaxErrorFileDepth) too_deep = true;
        return !too_deep;
      };
  json data = json::parse(text, depth_check, /*allow_exceptions=*/false);
  return !too_deep && !data.is_discarded() && ParseErrorData(data, f);
}

ProcessFailure MakeProcessFailure(int local_rank, int global_rank, int pid,
                                  int exitcode, const std::string& error_file,
                                  double now_wall) {
  ProcessFailure f;
  f.local_rank = local_rank;
  f.global_rank = global_rank;
  f.pid = pid;
  f.exitcode = exitcode;
  f.error_file = error_file;
  bool parsed = false;
  struct stat st;
  if (!error_file.empty() && ::stat(error_file.c_str(), &st) == 0) {
    // Read without trusting the worker: a FIFO put there would block the
    // agent's loop, a huge file exhaust its memory.
    StatusOr<std::string> text = ReadRegularFile(error_file, kMaxErrorFile);
    if (!text.ok()) {
      DDP_LOG(WARNING) << "ignoring error file " << text.status().message();
    } else {
      f.error_json = std::move(text).value();
      parsed = ParseErrorFile(f.error_json, &f);
      if (!parsed) {
        DDP_LOG(WARNING) << "ignoring malformed error file " << error_file;
      }
    }
  }
  if (!parsed) {
    f.error_file = kNotAvailable;
    f.error_json.clear();
    f.timestamp = static_cast<int64_t>(now_wall);
    if (exitcode < 0) {
      f.traceback = "Signal " + std::to_string(-exitcode) + " (" +
                    SignalName(-exitcode) + ") received by PID " +
                    std::to_string(pid);
    } else {
      f.traceback = kDocsLine;
    }
  }
  return f;
}

size_t RootCauseIndex(const std::vector<ProcessFailure>& failures) {
  size_t best = 0;
  for (size_t i = 1; i < failures.size(); ++i) {
    if (failures[i].timestamp < failures[best].timestamp) best = i;
  }
  return best;
}

std::string FormatFailureTable(const std::string& name,
                               const std::vector<ProcessFailure>& failures,
                               const std::string& hostname) {
  std::string title = name + " FAILED";
  size_t root = failures.empty() ? 0 : RootCauseIndex(failures);
  size_t width = title.size();
  std::string root_fmt;
  std::vector<std::string> others;
  for (size_t i = 0; i < failures.size(); ++i) {
    const ProcessFailure& f = failures[i];
    std::string fmt = "[" + std::to_string(i) + "]:\n" +
                      "  time      : " + LocalIsoTime(f.timestamp) + "\n" +
                      "  host      : " + hostname + "\n" +
                      "  rank      : " + std::to_string(f.global_rank) +
                      " (local_rank: " + std::to_string(f.local_rank) + ")\n" +
                      "  exitcode  : " + std::to_string(f.exitcode) +
                      " (pid: " + std::to_string(f.pid) + ")\n" +
                      "  error_file: " + f.error_file + "\n" +
                      "  traceback : " + f.traceback;
    size_t start = 0;
    while (start <= fmt.size()) {
      size_t end = fmt.find('\n', start);
      if (end == std::string::npos) end = fmt.size();
      width = std::max(width, end - start);
      start = end + 1;
    }
    if (i == root) {
      root_fmt = fmt;
    } else {
      others.push_back(fmt);
    }
  }
  width = std::min<size_t>(width, 60);
  std::string border(width, '=');
  std::string section(width, '-');
  std::string other_text;
  if (others.empty()) others.push_back("  <NO_OTHER_FAILURES>");
  for (size_t i = 0; i < others.size(); ++i) {
    if (i > 0) other_text += "\n";
    other_text += others[i];
  }
  return "\n" + border + "\n" + title + "\n" + section + "\nFailures:\n" +
         other_text + "\n" + section +
         "\nRoot Cause (first observed failure):\n" + root_fmt + "\n" + border;
}

Status DumpRootCauseErrorFile(const ProcessFailure& root,
                              const std::string& dest) {
  if (dest.empty() || root.error_json.empty()) return Status::Ok();
  json data = json::parse(root.error_json, nullptr, false);
  if (data.is_discarded())
    return InternalError("unparsable " + root.error_file);
  if (root.exitcode != 0 && data.is_object() && data.contains("message") &&
      data["message"].is_object()) {
    data["message"]["errorCode"] = root.exitcode;
  }
  ::unlink(dest.c_str());
  std::ofstream out(dest, std::ios::trunc);
  out << data.dump();
  out.close();
  if (!out) return ErrnoStatus("cannot write " + dest, errno);
  return Status::Ok();
}

std::string FullyQualifiedHostname() {
  // Python's getfqdn(): gethostbyaddr(gethostname()), then the first of the
  // primary name and its aliases that contains a '.', else the primary name.
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  struct addrinfo* res = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &res) != 0 || res == nullptr) {
    return name;
  }
  char host[NI_MAXHOST] = {0};
  int rc = ::getnameinfo(res->ai_addr, res->ai_addrlen, host, sizeof(host),
                         nullptr, 0, NI_NAMEREQD);
  ::freeaddrinfo(res);
  if (rc != 0) return name;
  std::string primary = host;
  struct hostent* he = ::gethostbyname(primary.c_str());
  if (primary.find('.') == std::string::npos && he != nullptr) {
    for (char** alias = he->h_aliases; alias && *alias; ++alias) {
      if (std::strchr(*alias, '.') != nullptr) return *alias;
    }
  }
  return primary;
}

}  // namespace ddprun::agent
