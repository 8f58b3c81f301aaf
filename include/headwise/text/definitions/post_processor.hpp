// The definitions of headwise/text/post_processor.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/post_processor.hpp"

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
