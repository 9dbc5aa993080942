#include "agent/process/worker_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_util.h"

namespace ddprun::agent {
WorkerOutput::WorkerOutput(Options options, Console* console)
    : options_(std::move(options)), console_(console) {}

WorkerOutput::~WorkerOutput() {
  if (fd_ >= 0) ::close(fd_);
}

Status WorkerOutput::Open() {
  if (options_.file_path.empty()) return Status::Ok();
  fd_ = ::open(options_.file_path.c_str(),
               O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return ErrnoStatus("cannot create " + options_.file_path, errno);
  return Status::Ok();
}

Status WorkerOutput::Reopen() {
  if (options_.file_path.empty() || fd_ >= 0) return Status::Ok();
  fd_ = ::open(options_.file_path.c_str(),
               O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return ErrnoStatus("cannot open " + options_.file_path, errno);
  return Status::Ok();
}

namespace {

// Bytes at the end of `s` that start a UTF-8 character not yet complete.
std::size_t IncompleteUtf8Tail(const std::string& s) {
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const std::size_t need = (c & 0xE0) == 0xC0   ? 2
                             : (c & 0xF0) == 0xE0 ? 3
                             : (c & 0xF8) == 0xF0 ? 4
                                                  : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

void WorkerOutput::OfferLines(const std::string& lines) {
  std::string::size_type start = 0;
  while (start < lines.size()) {
    const auto end = lines.find('\n', start);
    const auto stop = end == std::string::npos ? lines.size() : end + 1;
    options_.filtered->Offer(
        options_.prefix, std::string_view(lines).substr(start, stop - start));
    start = stop;
  }
}

void WorkerOutput::OnChunk(std::string_view chunk) {
  // A full disk must not stop the agent: the console still gets the line.
  if (fd_ >= 0) (void)WriteFully(fd_, chunk);
  if (options_.filtered != nullptr)
    OfferLines(filter_splitter_.Feed(chunk, ""));
  if (!options_.to_console) return;
  if (options_.live) {
    std::string bytes = std::move(pending_);
    bytes.append(chunk);
    // A line being redrawn ('\r' in it) goes out now (less an incomplete
    // UTF-8 character); a plain partial line waits for its end, as without
    // a terminal, so busy ranks do not cut each other's lines.
    const auto newline = bytes.rfind('\n');
    const std::size_t line = newline == std::string::npos ? 0 : newline + 1;
    const std::size_t keep = bytes.find('\r', line) == std::string::npos
                                 ? line
                                 : bytes.size() - IncompleteUtf8Tail(bytes);
    pending_ = bytes.substr(keep);
    bytes.resize(keep);
    WriteLive(bytes);
    return;
  }
  std::string lines = splitter_.Feed(chunk, options_.prefix);
  if (!lines.empty()) console_->Write(options_.stream, lines);
}

void WorkerOutput::WriteLive(std::string_view bytes) {
  // Another worker ended our unfinished line: continue on a new one.
  if (!at_line_start_ && !console_->OwnsOpenLine(this)) at_line_start_ = true;
  std::string out;
  for (char c : bytes) {
    if (at_line_start_ && c != '\r') {
      out += options_.prefix;
      at_line_start_ = false;
    }
    out += c;
    if (c == '\n' || c == '\r') at_line_start_ = true;
  }
  console_->WriteLive(options_.stream, this, out);
}

void WorkerOutput::OnEof() {
  if (options_.filtered != nullptr) OfferLines(filter_splitter_.Flush(""));
  if (options_.to_console && options_.live) {
    WriteLive(pending_);
    pending_.clear();
    if (console_->OwnsOpenLine(this)) {
      console_->WriteLive(options_.stream, this, "\n");
    }
  } else if (options_.to_console) {
    std::string rest = splitter_.Flush(options_.prefix);
    if (!rest.empty()) console_->Write(options_.stream, rest);
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace ddprun::agent
