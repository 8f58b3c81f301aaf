// Four hand-designed heads for teaching: previous-token, duplicate-token, induction and a
// first-token sink, each a scoring rule over a sentence's words (not learned weights), turned into
// a pattern by the library's own softmax, with or without the causal mask. The worked examples
// (examples/03_toy_heads.cpp) and the live toy in the browser (docs/toys/heads.html, through
// web/toys.cpp) compute with these.
#pragma once

#include <array>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/interpret/head_scores.hpp"
#include "headwise/softmax.hpp"
#include "headwise/types.hpp"

namespace headwise::interpret {

/// The four toy heads.
enum class ToyHead { previous_token, duplicate_token, induction, first_token_sink };

/// A toy head's names: `name` for people ("duplicate token"), `id` for files and pages
/// ("duplicate-token").
struct ToyHeadName {
  ToyHead head;
  const char* name;
  const char* id;
};

/// The four heads in their teaching order.
inline const std::array<ToyHeadName, 4>& toy_heads() {
  static const std::array<ToyHeadName, 4> heads = {{{ToyHead::previous_token, "previous token", "previous-token"},
                                                    {ToyHead::duplicate_token, "duplicate token", "duplicate-token"},
                                                    {ToyHead::induction, "induction", "induction"},
                                                    {ToyHead::first_token_sink, "first-token sink", "first-token-sink"}}};
  return heads;
}

/// The head whose id is `id`; an id that is none of the four is refused by name.
inline ToyHead toy_head_named(const std::string& id) {
  for (const ToyHeadName& h : toy_heads())
    if (id == h.id) return h.head;
  detail::invalid("toy_head_named", "no toy head is called \"", id,
                  "\" (previous-token, duplicate-token, induction, first-token-sink)");
}

/// The most tokens a toy sentence may have: its pattern is n x n, drawn whole.
inline constexpr Index toy_max_tokens = 256;
/// The score a toy head gives where it looks (0 elsewhere): e^10 outweighs any sentence here.
inline constexpr double toy_high_score = 10.0;

/// A sentence's tokens: runs of letters and digits are words, every other visible character a
/// token of its own, white space separates.
inline std::vector<std::string> word_tokens(const std::string& text) {
  std::vector<std::string> tokens;
  std::string word;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += c;
      continue;
    }
    if (!word.empty()) tokens.push_back(word), word.clear();
    if (!std::isspace(static_cast<unsigned char>(c))) tokens.emplace_back(1, c);
  }
  if (!word.empty()) tokens.push_back(word);
  return tokens;
}

/// Token ids for the head-type scores: each distinct token numbered by its first occurrence.
inline std::vector<int> first_occurrence_ids(const std::vector<std::string>& tokens) {
  std::map<std::string, int> vocabulary;
  std::vector<int> ids;
  for (const std::string& t : tokens) ids.push_back(vocabulary.emplace(t, static_cast<int>(vocabulary.size())).first->second);
  return ids;
}

/// The scores (n, n) of a toy head over tokens with these ids: toy_high_score where the head
/// looks, 0 elsewhere. The rules know nothing of order: the causal mask alone keeps a head from
/// looking ahead, so with the mask off the duplicate-token and induction heads also find later
/// copies, and rows with nothing to find spread over the whole sentence, future included.
inline Matrix<double> toy_head_scores(ToyHead head, const std::vector<int>& ids) {
  const Index n = static_cast<Index>(ids.size());
  const auto id = [&](Index i) { return ids[static_cast<std::size_t>(i)]; };
  Matrix<double> scores = Matrix<double>::Zero(n, n);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < n; ++j) {
      bool looks = false;
      switch (head) {
        case ToyHead::previous_token: looks = j == i - 1; break;
        case ToyHead::duplicate_token: looks = j != i && id(j) == id(i); break;             // another copy of this token
        case ToyHead::induction: looks = j >= 1 && j - 1 != i && id(j - 1) == id(i); break;  // [A][B] ... [A] -> [B]
        case ToyHead::first_token_sink: looks = j == 0; break;
      }
      if (looks) scores(i, j) = toy_high_score;
    }
  return scores;
}

/// A toy head's pattern over a sentence, with what the toys show of it.
struct ToyHeadPattern {
  std::vector<std::string> tokens;
  std::vector<int> ids;       ///< first_occurrence_ids(tokens)
  Matrix<double> weights;     ///< (n, n), each row a softmax of toy_head_scores
  Vector<double> entropy;     ///< each row's entropy (nats)
};

/// The pattern of `head` over `text`, with the causal mask or without. A text with no tokens, or
/// more than toy_max_tokens, is refused by name.
inline ToyHeadPattern toy_head_pattern(ToyHead head, const std::string& text, bool causal) {
  ToyHeadPattern p;
  p.tokens = word_tokens(text);
  if (p.tokens.empty()) detail::invalid("toy_head_pattern", "the sentence has no tokens (no words or punctuation)");
  if (static_cast<Index>(p.tokens.size()) > toy_max_tokens)
    detail::invalid("toy_head_pattern", "the sentence has ", p.tokens.size(), " tokens; a toy takes at most ", toy_max_tokens);
  p.ids = first_occurrence_ids(p.tokens);
  p.weights = toy_head_scores(head, p.ids);
  softmax_rows(p.weights, causal);
  p.entropy = row_entropies(p.weights);
  return p;
}

}  // namespace headwise::interpret
