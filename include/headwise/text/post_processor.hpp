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

// ---- Definitions (detail/compiled.hpp: header-only, or src/text.cpp) ----
#if HEADWISE_TEXT_DEFINITIONS
#include <nlohmann/json.hpp>

namespace headwise::text {

HEADWISE_TEXT_INLINE PostProcessor PostProcessor::from_json(const nlohmann::json& post_processor, const std::string& where) {
  PostProcessor p;
  if (!post_processor.is_null()) p.add(post_processor, where);
  return p;
}

HEADWISE_TEXT_INLINE void PostProcessor::add(const nlohmann::json& step, const std::string& where) {
  const auto fail = [&](const std::string& what) { return detail::tokenizer_error(where, "post-processor " + what); };
  const std::string type = detail::type_of(step);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    if (!step.contains("processors") || !step.at("processors").is_array()) throw fail("Sequence has no \"processors\" list");
    for (const auto& p : step.at("processors")) add(p, where);
    return;
  }
  if (type != "TemplateProcessing")
    throw fail(step.dump().substr(0, 120) + " is not one headwise applies (TemplateProcessing, ByteLevel, Sequence)");
  if (!step.contains("single") || !step.at("single").is_array()) throw fail("TemplateProcessing has no \"single\" template");
  const nlohmann::json specials = step.contains("special_tokens") ? step.at("special_tokens") : nlohmann::json::object();
  Template t;
  bool sequence = false;
  for (const auto& piece : step.at("single")) {
    if (piece.contains("Sequence")) {
      if (sequence || detail::string_field(piece.at("Sequence"), "id", where, std::string()) != "A") throw fail("TemplateProcessing's single template has a sequence other than one A");
      sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece.at("SpecialToken").contains("id") || !piece.at("SpecialToken").at("id").is_string())
      throw fail("TemplateProcessing's piece " + piece.dump().substr(0, 80) + " is neither a SpecialToken nor the Sequence");
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    if (!specials.is_object() || !specials.contains(name) || !specials.at(name).contains("ids") || !specials.at(name).at("ids").is_array())
      throw fail("TemplateProcessing uses the special token \"" + name + "\", which its special_tokens do not give ids");
    for (const auto& id : specials.at(name).at("ids")) {
      if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= (std::uint64_t(1) << 31)) throw fail("special token \"" + name + "\" has the id " + id.dump());
      (sequence ? t.after : t.before).push_back(static_cast<Index>(id.get<std::uint64_t>()));
    }
  }
  if (!sequence) throw fail("TemplateProcessing's single template has no Sequence A");
  steps_.push_back(std::move(t));
}

HEADWISE_TEXT_INLINE std::vector<Index> PostProcessor::apply(const std::vector<Index>& ids) const {
  std::vector<Index> out = ids;
  for (const Template& t : steps_) {
    std::vector<Index> next = t.before;
    next.insert(next.end(), out.begin(), out.end());
    next.insert(next.end(), t.after.begin(), t.after.end());
    out = std::move(next);
  }
  return out;
}

}  // namespace headwise::text
#endif  // HEADWISE_TEXT_DEFINITIONS
