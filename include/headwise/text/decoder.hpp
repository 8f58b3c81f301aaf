// A tokenizer.json's "decoder": how the token strings of ids become text again. ByteLevel (GPT-2's
// byte characters back to bytes), Replace, ByteFallback (<0xXX> tokens back to bytes), Fuse,
// Strip, Metaspace and Sequence, each a step over the list of token strings as in Hugging Face's
// Rust library (bytes that do not form UTF-8 become U+FFFD, as it does); any other type is
// refused by name.
//
//   auto d = headwise::text::Decoder::from_json(tokenizer_json.at("decoder"), "tokenizer.json");
//   std::string text = d.apply({"▁the", "▁cat"});   // Mistral's: "the cat"
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/text/unicode.hpp"

namespace headwise::text {

class Decoder {
 public:
  /// No decoder: tokens joined with a space between them (Hugging Face's behaviour without one).
  Decoder() = default;
  static Decoder from_json(const nlohmann::json& decoder, const std::string& where);

  std::string apply(std::vector<std::string> tokens) const;

 private:
  // The steps, one type each (as Hugging Face's decoders are): each maps the token strings to new ones.
  struct ByteLevel {  // GPT-2's byte characters back to bytes, one string
    std::vector<std::string> operator()(std::vector<std::string> tokens) const;
  };
  struct Replace {  // a string pattern replaced by content, in each token
    std::string pattern, content;
    std::vector<std::string> operator()(std::vector<std::string> tokens) const;
  };
  struct ByteFallback {  // runs of <0xXX> tokens back to bytes (U+FFFD each if they are not UTF-8)
    std::vector<std::string> operator()(std::vector<std::string> tokens) const;
  };
  struct Fuse {  // one string
    std::vector<std::string> operator()(std::vector<std::string> tokens) const;
  };
  struct Strip {  // up to start copies of one character off each token's front, stop off its end
    std::string content;
    std::size_t start = 0, stop = 0;
    std::vector<std::string> operator()(std::vector<std::string> tokens) const;
  };
  struct Metaspace {  // the replacement character back to a space (dropped at the start with prepend)
    std::string replacement;
    bool prepend = true;  // a prepend_scheme other than never
    std::vector<std::string> operator()(std::vector<std::string> tokens) const;
  };
  using Step = std::variant<ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace>;

  void add(const nlohmann::json& step, const std::string& where);
  static Strip strip_of(const nlohmann::json& step, const std::string& where);
  std::vector<Step> steps_;
};

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/decoder.hpp")
