// A tokenizer.json's "normalizer": what is done to the text before it is split, in order. NFC,
// NFD, NFKC, NFKD, Replace (a string or a regex), Prepend, Strip, Lowercase and Sequence (empty
// included) as Hugging Face's Rust library applies them; any other type is refused by name.
//
//   auto n = headwise::text::Normalizer::from_json(tokenizer_json.at("normalizer"), "tokenizer.json");
//   std::string s = n.apply("hello world");   // Mistral's: "▁hello▁world"
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/text/json_fields.hpp"
#include "headwise/text/regex.hpp"
#include "headwise/text/unicode.hpp"

namespace headwise::text {

class Normalizer {
 public:
  /// No normalization (a null "normalizer").
  Normalizer() = default;
  static Normalizer from_json(const nlohmann::json& normalizer, const std::string& where);

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  enum class Kind { form, replace, prepend, strip, lowercase };
  struct Step {
    Kind kind = Kind::form;
    NormalForm form = NormalForm::nfc;
    std::string content;                    // Replace's replacement, Prepend's prefix
    std::string literal;                    // Replace's {"String"} pattern, or
    std::vector<Regex> pattern;             // its {"Regex"} pattern (one)
    bool left = false, right = false;       // Strip's sides
  };
  void add(const nlohmann::json& step, const std::string& where);
  std::vector<Step> steps_;
};

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/normalizer.hpp")
