#include "agent/hosting/key_store.h"

#include <cerrno>
#include <cstdlib>

#include "agent/hosting/store_protocol.h"

namespace ddprun::agent {
namespace {

std::string Quote(const std::string& key) { return QuoteStoreKey(key); }

// The integer an ADD increments (torch stores it as decimal text).
bool ParseInt64(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return false;
  }
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0) return false;
  *v = x;
  return true;
}

}  // namespace

KeyStore::KeyStore(Limits limits, std::function<void(WaiterId)> on_wait_done)
    : limits_(limits), on_wait_done_(std::move(on_wait_done)) {}

KeyStore::Value KeyStore::Get(const std::string& key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : Value(it->second);
}

bool KeyStore::Contains(const std::string& key) const {
  return keys_.count(key) > 0;
}

Status KeyStore::Admit(const std::string& key, size_t value_bytes,
                       const char* op) const {
  if (value_bytes > limits_.max_value_bytes) {
    return ResourceExhaustedError(
        std::string(op) + " of key " + Quote(key) + ": a value of " +
        std::to_string(value_bytes) + " bytes (limit " +
        std::to_string(limits_.max_value_bytes) + ")");
  }
  auto it = keys_.find(key);
  const size_t old = it == keys_.end() ? 0 : Cost(key, it->second->size());
  const size_t total = total_bytes_ - old + Cost(key, value_bytes);
  if (total > limits_.max_total_bytes) {
    return ResourceExhaustedError(
        std::string(op) + " of key " + Quote(key) +
        " would take the store to " + std::to_string(total) + " bytes (limit " +
        std::to_string(limits_.max_total_bytes) + ")");
  }
  return Status::Ok();
}

void KeyStore::Put(const std::string& key, std::shared_ptr<std::string> value) {
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    const size_t cost = Cost(key, value->size());
    keys_.emplace(key, std::move(value));
    total_bytes_ += cost;
  } else {
    total_bytes_ = total_bytes_ - it->second->size() + value->size();
    it->second = std::move(value);
  }
  Wake(key);
}

void KeyStore::Wake(const std::string& key) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  std::vector<WaiterId> done;
  for (WaiterId id : w->second) {
    auto it = waits_.find(id);
    it->second.erase(key);
    if (it->second.empty()) {
      waits_.erase(it);
      done.push_back(id);
    }
  }
  waiters_.erase(w);
  for (WaiterId id : done) on_wait_done_(id);
}

Status KeyStore::Set(const std::string& key, std::string value) {
  DDP_RETURN_IF_ERROR(Admit(key, value.size(), "SET"));
  Put(key, std::make_shared<std::string>(std::move(value)));
  return Status::Ok();
}

Status KeyStore::MultiSet(std::vector<std::string> keys,
                          std::vector<std::string> values) {
  // The total once every pair is in (a key set twice keeps its last value).
  std::map<std::string, size_t> final_size;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (values[i].size() > limits_.max_value_bytes) {
      return Admit(keys[i], values[i].size(), "MULTI_SET");
    }
    final_size[keys[i]] = values[i].size();
  }
  size_t total = total_bytes_;
  for (const auto& [key, size] : final_size) {
    auto it = keys_.find(key);
    if (it != keys_.end()) total -= Cost(key, it->second->size());
    total += Cost(key, size);
  }
  if (total > limits_.max_total_bytes) {
    return ResourceExhaustedError(
        "MULTI_SET of " + std::to_string(keys.size()) +
        " keys would take the store to " + std::to_string(total) +
        " bytes (limit " + std::to_string(limits_.max_total_bytes) + ")");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    Put(keys[i], std::make_shared<std::string>(std::move(values[i])));
  }
  return Status::Ok();
}

StatusOr<KeyStore::Value> KeyStore::CompareSet(const std::string& key,
                                               const std::string& expected,
                                               std::string desired) {
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    if (!expected.empty())
      return Value(std::make_shared<std::string>(expected));
    DDP_RETURN_IF_ERROR(Admit(key, desired.size(), "COMPARE_SET"));
    auto v = std::make_shared<std::string>(std::move(desired));
    Put(key, v);
    return Value(v);
  }
  if (*it->second == expected) {
    DDP_RETURN_IF_ERROR(Admit(key, desired.size(), "COMPARE_SET"));
    auto v = std::make_shared<std::string>(std::move(desired));
    total_bytes_ = total_bytes_ - it->second->size() + v->size();
    it->second = v;  // the key exists: nobody waits on it
  }
  return Value(it->second);
}

StatusOr<int64_t> KeyStore::Add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  auto it = keys_.find(key);
  if (it != keys_.end() && !ParseInt64(*it->second, &v)) {
    return FailedPreconditionError("ADD to key " + Quote(key) +
                                   ", whose value is not an integer");
  }
  v = static_cast<int64_t>(static_cast<uint64_t>(v) +
                           static_cast<uint64_t>(delta));
  std::string text = std::to_string(v);
  DDP_RETURN_IF_ERROR(Admit(key, text.size(), "ADD"));
  Put(key, std::make_shared<std::string>(std::move(text)));
  return v;
}

Status KeyStore::Append(const std::string& key, const std::string& tail) {
  auto it = keys_.find(key);
  const size_t old = it == keys_.end() ? 0 : it->second->size();
  // Both are at most max_value_bytes (the decoder's limit): no overflow.
  DDP_RETURN_IF_ERROR(Admit(key, old + tail.size(), "APPEND"));
  if (it != keys_.end() && it->second.use_count() == 1) {
    // Not queued in any reply: grow it in place (no copy per APPEND).
    it->second->append(tail);
    total_bytes_ += tail.size();
    Wake(key);
    return Status::Ok();
  }
  auto v = std::make_shared<std::string>();
  v->reserve(old + tail.size());
  if (it != keys_.end()) v->append(*it->second);
  v->append(tail);
  Put(key, std::move(v));
  return Status::Ok();
}

bool KeyStore::Delete(const std::string& key) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return false;
  total_bytes_ -= Cost(key, it->second->size());
  keys_.erase(it);
  return true;
}

bool KeyStore::Wait(WaiterId waiter, const std::vector<std::string>& keys) {
  CancelWait(waiter);
  std::set<std::string> missing;
  for (const std::string& k : keys) {
    if (keys_.count(k) == 0) missing.insert(k);
  }
  if (missing.empty()) return true;
  for (const std::string& k : missing) waiters_[k].insert(waiter);
  waits_[waiter] = std::move(missing);
  return false;
}

void KeyStore::CancelWait(WaiterId waiter) {
  auto it = waits_.find(waiter);
  if (it == waits_.end()) return;
  for (const std::string& k : it->second) {
    auto w = waiters_.find(k);
    if (w == waiters_.end()) continue;
    w->second.erase(waiter);
    if (w->second.empty()) waiters_.erase(w);
  }
  waits_.erase(it);
}

size_t KeyStore::Clear() {
  const size_t n = keys_.size();
  keys_.clear();
  total_bytes_ = 0;
  waits_.clear();
  waiters_.clear();
  return n;
}

void KeyStore::ForEach(
    const std::function<void(const std::string&, const std::string&)>& fn)
    const {
  for (const auto& [key, value] : keys_) fn(key, *value);
}

std::string KeyStore::CheckInvariants() const {
  size_t total = 0;
  for (const auto& [key, value] : keys_) {
    if (!value) return "key " + Quote(key) + " has no value";
    if (value->size() > limits_.max_value_bytes) {
      return "key " + Quote(key) + " holds a value over the limit";
    }
    total += Cost(key, value->size());
  }
  if (total != total_bytes_) {
    return "size accounting says " + std::to_string(total_bytes_) +
           " bytes, the contents are " + std::to_string(total);
  }
  if (total > limits_.max_total_bytes) return "the store is over its limit";
  size_t parked = 0;
  for (const auto& [id, missing] : waits_) {
    if (missing.empty()) return "a wait with no missing key";
    for (const std::string& k : missing) {
      if (keys_.count(k) > 0) {
        return "a wait parked on key " + Quote(k) + ", which exists";
      }
      auto w = waiters_.find(k);
      if (w == waiters_.end() || w->second.count(id) == 0) {
        return "the wait index lacks a parked key";
      }
    }
    parked += missing.size();
  }
  size_t indexed = 0;
  for (const auto& [k, ids] : waiters_) {
    if (ids.empty()) return "an empty wait index entry";
    indexed += ids.size();
  }
  if (indexed != parked) return "the wait index has stale entries";
  return "";
}

}  // namespace ddprun::agent
