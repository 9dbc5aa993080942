#include "ddprun/worker/run_main.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sstream>
#include <typeinfo>

#include <c10/util/Exception.h>

#include "common/file_util.h"
#include "ddprun/worker/cpu_convolution_check.h"
#include "worker/src/standby.h"

namespace ddprun::worker {
namespace {

std::string JsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 16);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string Demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d != nullptr) ? d : name;
  std::free(d);
  return out;
}

// Torch/Gloo report a dead peer or an expired deadline with these phrases;
// such failures are restartable (the launcher should restart the group).
bool LooksLikeCollectiveFailure(const std::string& msg) {
  static const char* kPhrases[] = {
      "Connection closed by peer",
      "Connection reset by peer",
      "Broken pipe",
      "Timed out",
      "timed out",
      "Socket Timeout",
      "Gloo connectFullMesh failed",
      "NCCL error",
      "ProcessGroupGloo",
      "Connection refused",
      "gloo/transport",
  };
  for (const char* p : kPhrases) {
    if (msg.find(p) != std::string::npos) return true;
  }
  return false;
}

std::string ProcessContext() {
  std::ostringstream os;
  const char* rank = std::getenv("RANK");
  const char* local = std::getenv("LOCAL_RANK");
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  os << "C++ worker (no Python traceback): rank " << (rank ? rank : "0")
     << " (local_rank " << (local ? local : "0") << "), pid " << getpid()
     << ", host " << host;
  return os.str();
}

}  // namespace

ErrorReport DescribeException(std::exception_ptr e) {
  ErrorReport r;
  r.context = ProcessContext();
  try {
    std::rethrow_exception(e);
  } catch (const WorkerError& ex) {
    r.type = ex.type_name();
    r.message = ex.what();
    r.exit_code = ex.exit_code();
  } catch (const c10::Error& ex) {
    r.type = Demangle(typeid(ex).name());
    r.message = ex.what_without_backtrace();
    r.context += "\n" + std::string(ex.what());
    r.exit_code =
        LooksLikeCollectiveFailure(ex.what()) ? kExitCollective : kExitFailure;
  } catch (const std::bad_alloc& ex) {
    r.type = "std::bad_alloc";
    r.message = ex.what();
  } catch (const std::exception& ex) {
    r.type = Demangle(typeid(ex).name());
    r.message = ex.what();
    r.exit_code =
        LooksLikeCollectiveFailure(ex.what()) ? kExitCollective : kExitFailure;
  } catch (...) {
    r.type = "UnknownException";
    r.message = "a non-std exception escaped the trainer";
  }
  return r;
}

std::string ErrorFileJson(const ErrorReport& report, long long epoch_seconds) {
  std::ostringstream os;
  os << "{\"message\": {\"message\": \""
     << JsonEscape(report.type + ": " + report.message)
     << "\", \"extraInfo\": {\"py_callstack\": \"" << JsonEscape(report.context)
     << "\", \"timestamp\": \"" << epoch_seconds << "\"}}}\n";
  return os.str();
}

bool WriteErrorFile(const std::string& path, const ErrorReport& report) {
  long long now = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::string text = ErrorFileJson(report, now);
  Status written = WriteFileAtomically(path, {text});
  if (!written.ok()) {
    const std::string line =
        "cannot write error file " + path + ": " + written.message() + "\n";
    (void)WriteFully(2, line);
    return false;
  }
  return true;
}

int RunMain(const std::function<int()>& fn) {
  // A standby (--standby_workers) waits here, its libraries loaded, until
  // its agent hands it a rank's environment: nothing before this line may
  // read the environment.
  BecomeRankIfStandby();
  try {
    EnsureCpuConvolutionsAgree();
    return fn();
  } catch (...) {
    ErrorReport report = DescribeException(std::current_exception());
    const char* rank = std::getenv("RANK");
    std::string line = "[rank " + std::string(rank ? rank : "0") + "] " +
                       report.type + ": " + report.message + "\n";
    (void)WriteFully(2, line);
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (path != nullptr && *path != '\0') WriteErrorFile(path, report);
    return report.exit_code;
  }
}

}  // namespace ddprun::worker
