#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

namespace ddprun::agent {

// The bytes one agent store connection owes its client, in order. Small
// replies (integers, lengths) are copied; a value is shared with the key
// store (KeyStore::Value), so answering a GET of a large value costs no
// copy and a thousand GETs of it a thousand references, not a thousand
// copies. Memory: the copied bytes plus, for each shared value still
// queued, one reference (the value lives while it is queued, even if the
// store replaces it).
//
// Threading: not thread-safe (one connection's).
class ReplyQueue {
 public:
  void PutU8(uint8_t v) { PutInt(v); }
  void PutU32(uint32_t v) { PutInt(v); }
  void PutI64(int64_t v) { PutInt(static_cast<uint64_t>(v)); }
  // A byte vector: its length (uint64), then its bytes.
  void PutBytes(std::shared_ptr<const std::string> value);
  void PutBytes(const std::string& value);

  // Bytes queued and not yet consumed.
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Describes up to `max` pieces from the front (for writev); returns how
  // many.
  int Peek(iovec* iov, int max) const;
  // Drops the first `n` (<= size()) bytes: they were sent.
  void Consume(size_t n);

 private:
  struct Piece {
    std::shared_ptr<const std::string> shared;  // or, when null:
    std::string owned;
    size_t offset = 0;  // bytes of it already consumed
    const std::string& bytes() const { return shared ? *shared : owned; }
  };
  template <typename T>
  void PutInt(T v) {
    char b[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) {
      b[i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
    }
    PutRaw(b, sizeof(T));
  }
  void PutRaw(const char* data, size_t n);

  std::deque<Piece> pieces_;
  size_t size_ = 0;
};

}  // namespace ddprun::agent
