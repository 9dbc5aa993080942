#include "examples/formats/vocabulary.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace ddprun::examples {

std::vector<std::string> Tokenize(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

Vocabulary Vocabulary::Build(const std::vector<std::string>& texts,
                             int min_count) {
  std::map<std::string, int> counts;
  for (const auto& t : texts) {
    for (const auto& w : Tokenize(t)) ++counts[w];
  }
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::stable_sort(
      sorted.begin(), sorted.end(),
      [](const auto& a, const auto& b) { return a.second > b.second; });
  Vocabulary v;
  for (const auto& [word, count] : sorted) {
    if (count < min_count) continue;
    v.ids_[word] = static_cast<int64_t>(v.words_.size()) + 2;
    v.words_.push_back(word);
  }
  return v;
}

int64_t Vocabulary::Id(const std::string& word) const {
  auto it = ids_.find(word);
  return it == ids_.end() ? kUnknown : it->second;
}

std::vector<int64_t> Vocabulary::Encode(const std::string& text,
                                        int64_t length) const {
  std::vector<int64_t> ids;
  for (const auto& w : Tokenize(text)) {
    if (static_cast<int64_t>(ids.size()) == length) break;
    ids.push_back(Id(w));
  }
  ids.resize(length, kPad);
  return ids;
}

LabelSet LabelSet::Build(const std::vector<std::string>& labels) {
  std::set<std::string> unique(labels.begin(), labels.end());
  LabelSet s;
  for (const auto& l : unique) {
    s.index_[l] = s.size();
    s.labels_.push_back(l);
  }
  return s;
}

int64_t LabelSet::Index(const std::string& label) const {
  auto it = index_.find(label);
  return it == index_.end() ? -1 : it->second;
}

}  // namespace ddprun::examples
