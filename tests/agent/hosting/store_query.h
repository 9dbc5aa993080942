#pragma once

// The bytes of torch's TCPStore queries (store_protocol.h: both dialects'
// numbers, little-endian framing), for the agent store's tests and its
// fuzz target's seeds. Test code only.

#include <cstdint>
#include <string>

namespace ddprun::agent::store_test {

// Modern (torch >= 2.2) and legacy (1.13) query numbers.
enum Modern : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kNumKeys = 7,
  kDelete = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
};
enum Legacy : uint8_t {
  kLSet = 0,
  kLGet = 2,
  kLAdd = 3,
  kLWait = 5,
  kLWatchKey = 7,
};

// Appends a query's parts to buf_; `Self` (CRTP) is what the calls chain on.
template <typename Self>
class StoreQueryBuilder {
 public:
  Self& Type(uint8_t t) {
    buf_.push_back(static_cast<char>(t));
    return self();
  }
  template <typename T>
  Self& Int(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) {
      buf_.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i))));
    }
    return self();
  }
  // A string: its length (uint64), then its bytes.
  Self& Str(const std::string& s) {
    Int<uint64_t>(s.size());
    buf_ += s;
    return self();
  }
  Self& Raw(const std::string& s) {
    buf_ += s;
    return self();
  }
  // VALIDATE with torch >= 2.2's magic.
  Self& ValidateQuery() { return Type(kValidate).template Int<uint32_t>(0x3C85F7CE); }
  const std::string& bytes() const { return buf_; }

 protected:
  std::string buf_;

 private:
  Self& self() { return static_cast<Self&>(*this); }
};

// A query's bytes on their own.
class Query : public StoreQueryBuilder<Query> {
 public:
  explicit Query(uint8_t type) { Type(type); }
};

}  // namespace ddprun::agent::store_test
