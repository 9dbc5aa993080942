#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ddprun::examples {

// Lower-cases `text` and splits it into words of letters and digits
// ("Lesion in the upper-left?" -> lesion, in, the, upper, left).
std::vector<std::string> Tokenize(const std::string& text);

// Word vocabulary built from training texts. Id 0 is padding, 1 is unknown;
// words get ids from 2 in order of decreasing count, then alphabetically, so
// every rank that sees the same texts builds the same vocabulary.
class Vocabulary {
 public:
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kUnknown = 1;

  static Vocabulary Build(const std::vector<std::string>& texts,
                          int min_count = 1);

  // Ids in use: the words plus padding and unknown.
  int64_t size() const { return num_words() + 2; }
  int64_t num_words() const { return static_cast<int64_t>(words_.size()); }
  int64_t Id(const std::string& word) const;
  // Token ids of `text`, truncated or padded with kPad to `length`.
  std::vector<int64_t> Encode(const std::string& text, int64_t length) const;

 private:
  std::vector<std::string> words_;
  std::map<std::string, int64_t> ids_;
};

// Closed label set (answers): sorted unique strings; Index() is -1 for a
// label not in the set.
class LabelSet {
 public:
  static LabelSet Build(const std::vector<std::string>& labels);
  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  int64_t Index(const std::string& label) const;
  const std::string& Label(int64_t index) const { return labels_.at(index); }

 private:
  std::vector<std::string> labels_;
  std::map<std::string, int64_t> index_;
};

}  // namespace ddprun::examples
