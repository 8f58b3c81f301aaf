// A tokenizer.json's "added_tokens": tokens found in the text as they are written (special tokens
// such as <|im_start|>, and others), cut out before the model sees the text, as Hugging Face's
// AddedVocabulary does: the leftmost match first, the longest there, with single_word, lstrip and
// rstrip applied as it applies them. All the tokens are searched for in one pass over the text (a
// byte trie walked from each position, so the cost is at most the text's length times the longest
// token's, which is bounded). Tokens marked `normalized` are searched for in the normalized text,
// the others in the text as given.
//
//   headwise::text::AddedTokens added = ...;
//   for (const auto& cut : added.split("a<|im_start|>b", /*normalized=*/false)) ...  // "a", 151644, "b"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "headwise/text/unicode.hpp"
#include "headwise/types.hpp"

namespace headwise::text {

/// One added token as tokenizer.json describes it.
struct AddedToken {
  std::string content;
  Index id;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

/// A range of a text: an added token (id ≥ 0) or text between them (id -1).
struct TextCut {
  std::size_t begin, end;
  Index id;
};

class AddedTokens {
 public:
  /// Contents longer than this are refused (the search costs up to the longest token's length per byte).
  static constexpr std::size_t max_length = 4096;
  AddedTokens() = default;
  /// Each token with the text searched for: its content, or for a `normalized` token the normalized
  /// content. Refuses an empty or over-long pattern, naming the token.
  AddedTokens(std::vector<std::pair<AddedToken, std::string>> tokens, const std::string& where);

  bool empty() const { return tokens_.empty(); }
  /// text cut into added tokens and the text between them; normalized selects which tokens are
  /// searched for (those marked normalized, in normalized text, or the others).
  std::vector<TextCut> split(std::string_view text, bool normalized) const;

  const AddedToken* find(Index id) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Trie {
    struct Node {
      std::uint32_t first_child = 0, children = 0;  // a range of edges_, sorted by byte
      std::int32_t token = -1;                       // the index in tokens_ of the token ending here
    };
    struct Edge {
      unsigned char byte;
      std::uint32_t node;
    };
    std::vector<Node> nodes{Node{}};
    std::vector<Edge> edges;
    bool starts[256] = {};  // the bytes a pattern starts with
    void build(const std::vector<std::pair<std::string, std::int32_t>>& patterns);
    /// The longest match at text[at]: the token's index in tokens_ (-1 if none) and where it ends.
    std::pair<std::int32_t, std::size_t> longest_at(std::string_view text, std::size_t at) const;
  };
  std::vector<TextCut> cuts(std::string_view text, const Trie& trie) const;
  std::vector<AddedToken> tokens_;
  std::unordered_map<Index, std::size_t> by_id_;
  Trie plain_, normalized_;
};

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/added_tokens.hpp")
