// Four hand-designed heads for teaching: previous-token, duplicate-token, induction and a
// first-token sink, each a scoring rule over a sentence's words (not learned weights), turned into
// a pattern by the library's own softmax, with or without the causal mask. The worked examples
// (examples/03_toy_heads.cpp) and the live toy in the browser (docs/toys/heads.html, through
// web/toys.cpp) compute with these.
#pragma once

#include <array>
#include <cctype>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/interpret/head_scores.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/softmax.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {
/// The code point at text[at] (UTF-8) and its length in bytes; anything that is not UTF-8 (a
/// stray continuation byte, a truncated or overlong sequence, a surrogate) is refused by name.
inline std::pair<char32_t, std::size_t> utf8_at(const std::string& text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return {lead, 1};
  const std::size_t length = lead >= 0xF5 ? 0 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
  if (length == 0 || at + length > text.size()) invalid("word_tokens", "byte ", at, " is not UTF-8");
  char32_t c = lead & (0x7F >> length);
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) invalid("word_tokens", "byte ", at + i, " is not UTF-8");
    c = (c << 6) | (byte(at + i) & 0x3F);
  }
  const char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < smallest[length] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
    invalid("word_tokens", "bytes ", at, " to ", at + length - 1, " are not UTF-8");
  return {c, length};
}

/// What a code point is to word_tokens: part of a word, white space, or a token of its own.
enum class CharacterKind { word, space, mark };
inline CharacterKind kind_of(char32_t c) {
  if (c < 0x80) {
    const unsigned char a = static_cast<unsigned char>(c);
    if (std::isalnum(a)) return CharacterKind::word;
    return std::isspace(a) || std::iscntrl(a) ? CharacterKind::space : CharacterKind::mark;  // controls separate, unseen
  }
  if (c <= 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200B) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
      c == 0x205F || c == 0x3000 || c == 0xFEFF)
    return CharacterKind::space;  // C1 controls, Unicode's spaces (the joiners U+200C, U+200D stay inside words)
  const bool latin1_sign = c >= 0xA1 && c <= 0xBF && c != 0xAA && c != 0xAD && c != 0xB2 && c != 0xB3 && c != 0xB5 &&
                           c != 0xB9 && c != 0xBA && !(c >= 0xBC && c <= 0xBE);  // not ª, soft hyphen, ² ³ µ ¹ º, ¼ ½ ¾
  if (latin1_sign || c == 0xD7 || c == 0xF7 || (c >= 0x2010 && c <= 0x2027) || (c >= 0x2030 && c <= 0x205E) ||
      (c >= 0x3001 && c <= 0x3003) || (c >= 0x3008 && c <= 0x301F) || (c >= 0xFF01 && c <= 0xFF0F) ||
      (c >= 0xFF1A && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65))
    return CharacterKind::mark;  // Latin-1's signs, general, CJK and fullwidth punctuation: “ ” — « » 。 ，！
  return CharacterKind::word;    // letters of every script, digits, joiners, emoji, and the rest
}
}  // namespace headwise::detail

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

/// The most bytes a toy sentence may have (checked before it is split).
inline constexpr std::size_t toy_max_bytes = 1 << 16;


/// A sentence's tokens (UTF-8): runs of letters and digits (of any script) are words, every
/// punctuation mark or sign a token of its own, white space separates. "John’s" is John, ’, s.
inline std::vector<std::string> word_tokens(const std::string& text) {
  std::vector<std::string> tokens;
  std::string word;
  for (std::size_t at = 0; at < text.size();) {
    const auto [c, length] = detail::utf8_at(text, at);
    const std::string character = text.substr(at, length);
    at += length;
    const detail::CharacterKind kind = detail::kind_of(c);
    if (kind == detail::CharacterKind::word) {
      word += character;
      continue;
    }
    if (!word.empty()) tokens.push_back(word), word.clear();
    if (kind == detail::CharacterKind::mark) tokens.push_back(character);
  }
  if (!word.empty()) tokens.push_back(word);
  return tokens;
}

/// Token ids for the head-type scores: each distinct token numbered by its first occurrence.
inline std::vector<Index> first_occurrence_ids(const std::vector<std::string>& tokens) {
  std::map<std::string, int> vocabulary;
  std::vector<Index> ids;
  for (const std::string& t : tokens) ids.push_back(vocabulary.emplace(t, static_cast<int>(vocabulary.size())).first->second);
  return ids;
}

/// The scores (n, n) of a toy head over tokens with these ids: toy_high_score where the head
/// looks, 0 elsewhere. The rules know nothing of order: the causal mask alone keeps a head from
/// looking ahead, so with the mask off the duplicate-token and induction heads also find later
/// copies, and rows with nothing to find spread over the whole sentence, future included.
inline Matrix<double> toy_head_scores(ToyHead head, const std::vector<Index>& ids) {
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
  std::vector<Index> ids;              ///< first_occurrence_ids(tokens)
  Matrix<double> weights;            ///< (n, n), each row a softmax of toy_head_scores
  RowStatistics<double> statistics;  ///< pattern_statistics(weights): each row's entropy (nats), largest weight, ...
};

/// The pattern of `head` over `text`, with the causal mask or without. A text with no tokens, more
/// than toy_max_tokens or more than toy_max_bytes, or not UTF-8, is refused by name.
inline ToyHeadPattern toy_head_pattern(ToyHead head, const std::string& text, bool causal) {
  if (text.size() > toy_max_bytes)
    detail::invalid("toy_head_pattern", "the sentence is ", text.size(), " bytes; a toy takes at most ", toy_max_bytes);
  ToyHeadPattern p;
  p.tokens = word_tokens(text);
  if (p.tokens.empty()) detail::invalid("toy_head_pattern", "the sentence has no tokens (no words or punctuation)");
  if (static_cast<Index>(p.tokens.size()) > toy_max_tokens)
    detail::invalid("toy_head_pattern", "the sentence has ", p.tokens.size(), " tokens; a toy takes at most ", toy_max_tokens);
  p.ids = first_occurrence_ids(p.tokens);
  p.weights = toy_head_scores(head, p.ids);
  softmax_rows(p.weights, causal);
  p.statistics = pattern_statistics(p.weights);
  return p;
}

}  // namespace headwise::interpret
