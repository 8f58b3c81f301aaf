// The definitions of headwise/text/pre_tokenizer.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/pre_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include "headwise/text/normalizer.hpp"  // (detail::pattern_of)

namespace headwise::text {
namespace detail {

/// GPT-2's pre-tokenizer regex (ByteLevel with use_regex true).
inline constexpr const char* gpt2_split_pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// The ranges a Split keeps, from the matches, as Hugging Face's NormalizedString::split.
HEADWISE_TEXT_INLINE std::vector<Match> by_behavior(const std::vector<Match>& matches, SplitBehavior behavior) {
  std::vector<Match> out;  // (matched: to be removed)
  bool previous = false;
  switch (behavior) {
    case SplitBehavior::removed: return matches;
    case SplitBehavior::isolated:
      for (const Match& m : matches) out.push_back({m.begin, m.end, false});
      return out;
    case SplitBehavior::contiguous:
    case SplitBehavior::merged_with_previous:
      for (const Match& m : matches) {
        const bool merge = behavior == SplitBehavior::contiguous ? m.matched == previous : m.matched && !previous;
        if (merge && !out.empty()) out.back().end = m.end;
        else out.push_back({m.begin, m.end, false});
        previous = m.matched;
      }
      return out;
    case SplitBehavior::merged_with_next:
      for (auto m = matches.rbegin(); m != matches.rend(); ++m) {
        if (m->matched && !previous && !out.empty()) out.back().begin = m->begin;
        else out.push_back({m->begin, m->end, false});
        previous = m->matched;
      }
      return {out.rbegin(), out.rend()};
  }
  return out;
}

/// Each character for which is_match holds as a match of its own (Hugging Face's Fn(char) pattern).
template <class IsMatch>
std::vector<Match> character_matches(const std::string& text, IsMatch is_match) {
  std::vector<Match> out;
  if (text.empty()) return {{0, 0, false}};
  std::size_t last = 0;
  for (std::size_t i = 0; i < text.size();) {
    const CodePoint c = code_point_at(text, i);
    if (is_match(c.value)) {
      if (last < i) out.push_back({last, i, false});
      out.push_back({i, i + c.length, true}), last = i + c.length;
    }
    i += c.length;
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
  return out;
}

HEADWISE_TEXT_INLINE SplitBehavior behavior_of(const nlohmann::json& step, const std::string& where) {
  const std::string b = detail::string_field(step, "behavior", where, std::string());
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  throw detail::tokenizer_error(where, "Split's behavior \"" + b +
                       "\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

}  // namespace detail

HEADWISE_TEXT_INLINE PreTokenizer PreTokenizer::from_json(const nlohmann::json& pre_tokenizer, const std::string& where) {
  PreTokenizer p;
  if (!pre_tokenizer.is_null()) p.add(pre_tokenizer, where);
  return p;
}

HEADWISE_TEXT_INLINE void PreTokenizer::add(const nlohmann::json& step, const std::string& where) {
  const std::string type = detail::type_of(step);
  Step s;
  if (type == "Sequence") {
    if (!step.contains("pretokenizers") || !step.at("pretokenizers").is_array()) throw detail::tokenizer_error(where, "a Sequence pre-tokenizer without a \"pretokenizers\" list");
    for (const auto& p : step.at("pretokenizers")) add(p, where);
    return;
  } else if (type == "Split") {
    s.pattern.push_back(detail::pattern_of(step, where)), s.behavior = detail::behavior_of(step, where), s.invert = detail::flag_field(step, "invert", false, where);
  } else if (type == "ByteLevel") {
    s.kind = Kind::byte_level, s.flag = detail::flag_field(step, "add_prefix_space", true, where);
    if (detail::flag_field(step, "use_regex", true, where)) s.pattern.emplace_back(detail::gpt2_split_pattern, where);
  } else if (type == "Metaspace") {
    s.kind = Kind::metaspace, s.replacement = detail::string_field(step, "replacement", where), s.flag = detail::flag_field(step, "split", true, where);
    if (first_invalid_utf8(s.replacement) != std::string::npos || s.replacement.empty() || code_point_at(s.replacement, 0).length != s.replacement.size())
      throw detail::tokenizer_error(where, "Metaspace's replacement is not one character");
    const bool add_prefix_space = detail::flag_field(step, "add_prefix_space", true, where);
    const std::string scheme = detail::string_field(step, "prepend_scheme", where, add_prefix_space ? "always" : "never");
    if (scheme != "always" && scheme != "first" && scheme != "never") throw detail::tokenizer_error(where, "Metaspace's prepend_scheme \"" + scheme + "\" is not always, first or never");
    s.prepend = scheme == "always" ? Step::Prepend::always : scheme == "first" ? Step::Prepend::first : Step::Prepend::never;
    s.pattern.push_back(Regex::literal(s.replacement, where));
  } else if (type == "Digits") {
    s.kind = Kind::digits, s.flag = detail::flag_field(step, "individual_digits", false, where);
  } else if (type == "Whitespace") {  // \w+|[^\w\s]+, the rest removed
    s.pattern.emplace_back(R"(\w+|[^\w\s]+)", where), s.behavior = SplitBehavior::removed, s.invert = true;
  } else if (type == "WhitespaceSplit") {
    s.kind = Kind::whitespace_split;
  } else {
    throw detail::tokenizer_error(where, "pre-tokenizer " + step.dump().substr(0, 120) +
                         " is not one headwise applies (Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, Sequence)");
  }
  steps_.push_back(std::move(s));
}

HEADWISE_TEXT_INLINE bool PreTokenizer::byte_level() const {
  for (const Step& s : steps_)
    if (s.kind == Kind::byte_level) return true;
  return false;
}

HEADWISE_TEXT_INLINE std::vector<Piece> PreTokenizer::apply(std::vector<Piece> pieces) const {
  for (const Step& step : steps_) {
    std::vector<Piece> next;
    next.reserve(pieces.size());
    for (const Piece& p : pieces) split_piece(step, p, next);
    pieces = std::move(next);
  }
  return pieces;
}

HEADWISE_TEXT_INLINE void PreTokenizer::split_piece(const Step& step, const Piece& piece, std::vector<Piece>& out) {
  std::string text = piece.text;
  std::vector<Match> matches;
  SplitBehavior behavior = step.behavior;
  switch (step.kind) {
    case Kind::split: matches = step.pattern.front().find_matches(text); break;
    case Kind::digits:
      matches = detail::character_matches(text, [](char32_t c) { return is_numeric(c); });
      behavior = step.flag ? SplitBehavior::isolated : SplitBehavior::contiguous;
      break;
    case Kind::whitespace_split:
      matches = detail::character_matches(text, [](char32_t c) { return is_white_space(c); }), behavior = SplitBehavior::removed;
      break;
    case Kind::metaspace: {
      text = detail::replace_literal(text, " ", step.replacement);
      const bool starts = text.compare(0, step.replacement.size(), step.replacement) == 0;
      if (!starts && (step.prepend == Step::Prepend::always || (step.prepend == Step::Prepend::first && piece.at_start))) text = step.replacement + text;
      if (!step.flag) matches = {{0, text.size(), false}};
      else matches = step.pattern.front().find_matches(text), behavior = SplitBehavior::merged_with_next;
      break;
    }
    case Kind::byte_level: {
      if (step.flag && text.compare(0, 1, " ") != 0) text = " " + text;
      matches = step.pattern.empty() ? std::vector<Match>{{0, text.size(), false}} : step.pattern.front().find_matches(text);
      behavior = SplitBehavior::isolated;
      break;
    }
  }
  if (step.invert)
    for (Match& m : matches) m.matched = !m.matched;
  const auto& chars = byte_characters();
  for (const Match& m : detail::by_behavior(matches, behavior)) {
    if (m.matched || m.begin == m.end) continue;
    Piece p{text.substr(m.begin, m.end - m.begin), piece.at_start && m.begin == 0};
    if (step.kind == Kind::byte_level) {
      std::string mapped;
      for (const char c : p.text) mapped += chars[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
    out.push_back(std::move(p));
  }
}

}  // namespace headwise::text
