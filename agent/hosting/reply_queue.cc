#include "agent/hosting/reply_queue.h"

namespace ddprun::agent {
namespace {

// Copied bytes go into pieces of about this size: large enough for few
// system calls, small enough that a sent piece gives its memory back soon.
constexpr size_t kOwnedPieceBytes = 64 << 10;
// A value at most this long is copied rather than shared.
constexpr size_t kCopyBelow = 256;

}  // namespace

void ReplyQueue::PutRaw(const char* data, size_t n) {
  if (n == 0) return;
  if (pieces_.empty() || pieces_.back().shared ||
      pieces_.back().owned.size() >= kOwnedPieceBytes) {
    pieces_.emplace_back();
  }
  pieces_.back().owned.append(data, n);
  size_ += n;
}

void ReplyQueue::PutBytes(std::shared_ptr<const std::string> value) {
  PutInt<uint64_t>(value->size());
  if (value->size() < kCopyBelow) {
    PutRaw(value->data(), value->size());
    return;
  }
  size_ += value->size();
  Piece p;
  p.shared = std::move(value);
  pieces_.push_back(std::move(p));
}

void ReplyQueue::PutBytes(const std::string& value) {
  PutInt<uint64_t>(value.size());
  PutRaw(value.data(), value.size());
}

int ReplyQueue::Peek(iovec* iov, int max) const {
  int n = 0;
  for (auto it = pieces_.begin(); it != pieces_.end() && n < max; ++it) {
    const std::string& b = it->bytes();
    iov[n].iov_base = const_cast<char*>(b.data() + it->offset);
    iov[n].iov_len = b.size() - it->offset;
    ++n;
  }
  return n;
}

void ReplyQueue::Consume(size_t n) {
  size_ -= n;
  while (n > 0) {
    Piece& front = pieces_.front();
    const size_t left = front.bytes().size() - front.offset;
    if (n < left) {
      front.offset += n;
      return;
    }
    n -= left;
    pieces_.pop_front();
  }
}

}  // namespace ddprun::agent
