// A tokenizer.json's "post_processor": the special tokens an encoding gets around the text when
// they are asked for (add_special_tokens), as Hugging Face's TemplateProcessing writes them in its
// "single" template (Llama 3's <|begin_of_text|>, Gemma's <bos>, Mistral's <s>). ByteLevel changes
// only offsets, so it adds nothing; Sequence applies its steps in order. Any other type (Bert,
// Roberta) is refused by name.
//
//   auto p = headwise::text::PostProcessor::from_json(tokenizer_json.at("post_processor"), "tokenizer.json");
//   std::vector<headwise::Index> ids = p.apply({1437, 5866});   // Gemma 3's: {2, 1437, 5866}
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/text/json_fields.hpp"
#include "headwise/text/unicode.hpp"
#include "headwise/types.hpp"

namespace headwise::text {

class PostProcessor {
 public:
  /// Adds nothing (a null "post_processor").
  PostProcessor() = default;
  static PostProcessor from_json(const nlohmann::json& post_processor, const std::string& where);

  /// ids with the template's special tokens around them.
  std::vector<Index> apply(const std::vector<Index>& ids) const;

 private:
  /// One template: the ids before and after the sequence (several TemplateProcessing steps nest).
  struct Template {
    std::vector<Index> before, after;
  };
  void add(const nlohmann::json& step, const std::string& where);
  std::vector<Template> steps_;
};

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/post_processor.hpp")
