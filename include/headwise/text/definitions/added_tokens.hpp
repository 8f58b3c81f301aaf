// The definitions of headwise/text/added_tokens.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/added_tokens.hpp"

#include <algorithm>
#include <map>

namespace headwise::text {

HEADWISE_TEXT_INLINE AddedTokens::AddedTokens(std::vector<std::pair<AddedToken, std::string>> tokens, const std::string& where) {
  std::vector<std::pair<std::string, std::int32_t>> plain, normalized;
  for (auto& [token, pattern] : tokens) {
    if (pattern.empty()) throw detail::tokenizer_error(where, "added token " + std::to_string(token.id) + " has empty content");
    if (pattern.size() > max_length)
      throw detail::tokenizer_error(where, "added token " + std::to_string(token.id) + " is " + std::to_string(pattern.size()) +
                           " bytes long (at most " + std::to_string(max_length) + ")");
    (token.normalized ? normalized : plain).emplace_back(std::move(pattern), static_cast<std::int32_t>(tokens_.size()));
    by_id_[token.id] = tokens_.size();
    tokens_.push_back(std::move(token));
  }
  plain_.build(plain), normalized_.build(normalized);
}

HEADWISE_TEXT_INLINE void AddedTokens::Trie::build(const std::vector<std::pair<std::string, std::int32_t>>& patterns) {
  // A map-based trie first, then flattened: each node's edges one sorted range.
  struct Building {
    std::map<unsigned char, std::size_t> next;
    std::int32_t token = -1;
  };
  std::vector<Building> b(1);
  for (const auto& [pattern, token] : patterns) {
    std::size_t n = 0;
    for (const char c : pattern) {
      const auto byte = static_cast<unsigned char>(c);
      auto it = b[n].next.find(byte);
      if (it == b[n].next.end()) it = b[n].next.emplace(byte, b.size()).first, b.emplace_back();
      n = it->second;
    }
    b[n].token = token;  // (a second token of the same content: the later one, as a map keeps it)
  }
  nodes.assign(b.size(), Node{});
  edges.clear();
  for (std::size_t n = 0; n < b.size(); ++n) {
    nodes[n].first_child = static_cast<std::uint32_t>(edges.size()), nodes[n].children = static_cast<std::uint32_t>(b[n].next.size());
    nodes[n].token = b[n].token;
    for (const auto& [byte, child] : b[n].next) edges.push_back({byte, static_cast<std::uint32_t>(child)});
  }
  std::fill(std::begin(starts), std::end(starts), false);
  for (const auto& [byte, child] : b[0].next) starts[byte] = true;
}

HEADWISE_TEXT_INLINE std::pair<std::int32_t, std::size_t> AddedTokens::Trie::longest_at(std::string_view text, std::size_t at) const {
  std::pair<std::int32_t, std::size_t> found{-1, at};
  std::uint32_t n = 0;
  for (std::size_t i = at; i < text.size(); ++i) {
    const Node& node = nodes[n];
    const Edge* begin = edges.data() + node.first_child;
    const Edge* end = begin + node.children;
    const auto byte = static_cast<unsigned char>(text[i]);
    const Edge* e = std::lower_bound(begin, end, byte, [](const Edge& x, unsigned char v) { return x.byte < v; });
    if (e == end || e->byte != byte) break;
    n = e->node;
    if (nodes[n].token >= 0) found = {nodes[n].token, i + 1};
  }
  return found;
}

HEADWISE_TEXT_INLINE const AddedToken* AddedTokens::find(Index id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

HEADWISE_TEXT_INLINE std::vector<TextCut> AddedTokens::split(std::string_view text, bool normalized) const {
  return cuts(text, normalized ? normalized_ : plain_);
}

HEADWISE_TEXT_INLINE std::vector<TextCut> AddedTokens::cuts(std::string_view text, const Trie& trie) const {
  std::vector<TextCut> out;
  std::size_t kept = 0;  // the end of the last cut (Hugging Face's start_offset)
  const auto word_before = [&](std::size_t at) {
    if (at == 0) return false;
    std::size_t i = at - 1;
    while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
    return is_word_character(code_point_at(text, i).value);
  };
  const auto word_after = [&](std::size_t at) { return at < text.size() && is_word_character(code_point_at(text, at).value); };
  for (std::size_t at = 0; at < text.size();) {
    if (trie.edges.empty() || !trie.starts[static_cast<unsigned char>(text[at])]) {
      ++at;
      continue;
    }
    const auto [t, match_end] = trie.longest_at(text, at);
    if (t < 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<std::size_t>(t)];
    std::size_t begin = at, end = match_end;
    at = match_end;  // (the search goes on after the match, whatever single_word, lstrip and rstrip do)
    if (token.single_word && (word_before(begin) || word_after(end))) continue;
    if (token.lstrip) {
      std::size_t b = begin;
      while (b > 0) {
        std::size_t i = b - 1;
        while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
        if (!is_white_space(code_point_at(text, i).value)) break;
        b = i;
      }
      begin = std::max(b, kept);
    }
    if (token.rstrip)
      while (end < text.size() && is_white_space(code_point_at(text, end).value)) end += code_point_at(text, end).length;
    begin = std::max(begin, kept);  // (an rstrip that took the white space this token starts with)
    if (kept < begin) out.push_back({kept, begin, -1});
    out.push_back({begin, end, token.id});
    kept = end;
  }
  if (kept != text.size() || text.empty()) out.push_back({kept, text.size(), -1});
  return out;
}

}  // namespace headwise::text
