// A tokenizer.json's "pre_tokenizer": how normalized text is cut into the pieces (words) the
// model merges inside. Split (a string or regex pattern; Isolated, MergedWithPrevious,
// MergedWithNext, Removed or Contiguous; inverted or not), ByteLevel (with or without GPT-2's
// regex: bytes become GPT-2's byte characters), Metaspace, Digits, Whitespace, WhitespaceSplit
// and Sequence, as Hugging Face's Rust library applies them; any other type is refused by name.
//
//   auto p = headwise::text::PreTokenizer::from_json(tokenizer_json.at("pre_tokenizer"), "tokenizer.json");
//   std::vector<headwise::text::Piece> words = p.apply({{"the cat", true}});  // "the", "Ġcat" (GPT-2)
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/text/regex.hpp"

namespace headwise::text {

/// A piece of text on its way to the model; at_start: it begins at the start of the whole text
/// (Metaspace's prepend_scheme "first" asks).
struct Piece {
  std::string text;
  bool at_start;
};

/// What Split does with the matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

class PreTokenizer {
 public:
  /// No pre-tokenization: each piece goes to the model whole (a null "pre_tokenizer").
  PreTokenizer() = default;
  static PreTokenizer from_json(const nlohmann::json& pre_tokenizer, const std::string& where);

  std::vector<Piece> apply(std::vector<Piece> pieces) const;
  /// Whether a ByteLevel step maps bytes to GPT-2's byte characters.
  bool byte_level() const;

 private:
  enum class Kind { split, byte_level, metaspace, digits, whitespace_split };
  struct Step {
    Kind kind = Kind::split;
    std::vector<Regex> pattern;  // Split's (and ByteLevel's, Whitespace's) pattern, when it has one
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
    bool flag = false;           // ByteLevel: add_prefix_space; Metaspace: split; Digits: individual_digits
    std::string replacement;     // Metaspace's
    enum class Prepend { always, first, never } prepend = Prepend::always;
  };
  void add(const nlohmann::json& step, const std::string& where);
  static void split_piece(const Step& step, const Piece& piece, std::vector<Piece>& out);
  std::vector<Step> steps_;
};

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/pre_tokenizer.hpp")
