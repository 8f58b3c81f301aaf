// The definitions of headwise/text/normalizer.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/normalizer.hpp"

#include <nlohmann/json.hpp>

namespace headwise::text {
namespace detail {

/// A {"String": s} or {"Regex": r} pattern of a Replace or Split, as a Regex.
HEADWISE_TEXT_INLINE text::Regex pattern_of(const nlohmann::json& step, const std::string& where) {
  const auto bad = [&] { return detail::tokenizer_error(where, step.dump().substr(0, 120) + " has no {\"String\"} or {\"Regex\"} pattern"); };
  if (!step.contains("pattern") || !step.at("pattern").is_object()) throw bad();
  const nlohmann::json& p = step.at("pattern");
  if (p.contains("String") && p.at("String").is_string()) return text::Regex::literal(p.at("String").get<std::string>(), where);
  if (p.contains("Regex") && p.at("Regex").is_string()) return text::Regex(p.at("Regex").get<std::string>(), where);
  throw bad();
}

/// Replace every match of pattern in text with content.
HEADWISE_TEXT_INLINE std::string replace_all(std::string_view text, const text::Regex& pattern, const std::string& content) {
  std::string out;
  for (const Match& m : pattern.find_matches(text)) {
    if (m.matched) out += content;
    else out.append(text.substr(m.begin, m.end - m.begin));
  }
  return out;
}

/// Replace every occurrence of literal (not empty) in text with content, left to right.
HEADWISE_TEXT_INLINE std::string replace_literal(std::string_view text, const std::string& literal, const std::string& content) {
  std::string out;
  std::size_t at = 0;
  for (std::size_t found; (found = text.find(literal, at)) != std::string_view::npos; at = found + literal.size())
    out.append(text.substr(at, found - at)), out += content;
  out.append(text.substr(at));
  return out;
}

}  // namespace detail

HEADWISE_TEXT_INLINE Normalizer Normalizer::from_json(const nlohmann::json& normalizer, const std::string& where) {
  Normalizer n;
  if (!normalizer.is_null()) n.add(normalizer, where);
  return n;
}

HEADWISE_TEXT_INLINE void Normalizer::add(const nlohmann::json& step, const std::string& where) {
  const std::string type = detail::type_of(step);
  if (type == "Sequence") {
    if (!step.contains("normalizers") || !step.at("normalizers").is_array()) throw detail::tokenizer_error(where, "a Sequence normalizer without a \"normalizers\" list");
    for (const auto& s : step.at("normalizers")) add(s, where);
    return;
  }
  Step s;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    s.form = type == "NFC" ? NormalForm::nfc : type == "NFD" ? NormalForm::nfd : type == "NFKC" ? NormalForm::nfkc : NormalForm::nfkd;
  } else if (type == "Replace") {
    s.kind = Kind::replace, s.content = detail::string_field(step, "content", where);
    const nlohmann::json& p = step.contains("pattern") ? step.at("pattern") : step;
    if (p.contains("String") && p.at("String").is_string() && !p.at("String").get<std::string>().empty()) s.literal = p.at("String").get<std::string>();
    else s.pattern.push_back(detail::pattern_of(step, where));
  } else if (type == "Prepend") {
    s.kind = Kind::prepend, s.content = detail::string_field(step, "prepend", where);
  } else if (type == "Strip") {
    s.kind = Kind::strip, s.left = detail::flag_field(step, "strip_left", false, where), s.right = detail::flag_field(step, "strip_right", false, where);
  } else if (type == "Lowercase") {
    s.kind = Kind::lowercase;
  } else {
    throw detail::tokenizer_error(where, "normalizer " + step.dump().substr(0, 120) +
                         " is not one headwise applies (NFC, NFD, NFKC, NFKD, Replace, Prepend, Strip, Lowercase, Sequence)");
  }
  steps_.push_back(std::move(s));
}

HEADWISE_TEXT_INLINE std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::form: s = normalize(s, step.form); break;
      case Kind::replace: s = step.pattern.empty() ? detail::replace_literal(s, step.literal, step.content) : detail::replace_all(s, step.pattern.front(), step.content); break;
      case Kind::prepend: if (!s.empty()) s = step.content + s; break;
      case Kind::lowercase: s = lowercase(s); break;
      case Kind::strip: {
        std::size_t begin = 0, end = s.size();
        while (step.left && begin < end && is_white_space(code_point_at(s, begin).value)) begin += code_point_at(s, begin).length;
        while (step.right && end > begin) {
          std::size_t last = end - 1;
          while (last > begin && (static_cast<unsigned char>(s[last]) & 0xC0) == 0x80) --last;
          if (!is_white_space(code_point_at(s, last).value)) break;
          end = last;
        }
        s = s.substr(begin, end - begin);
        break;
      }
    }
  }
  return s;
}

}  // namespace headwise::text
