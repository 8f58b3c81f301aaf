// The definitions of headwise/text/bpe_model.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/bpe_model.hpp"

#include <cstdio>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

namespace headwise::text {

HEADWISE_TEXT_INLINE void BpeModel::fail(const std::string& what) const { throw detail::tokenizer_error(where_, what); }

HEADWISE_TEXT_INLINE Index BpeModel::id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

HEADWISE_TEXT_INLINE BpeModel BpeModel::from_json(const nlohmann::json& model, const std::string& where) {
  BpeModel m(where);
  // The model's type named first: the dump of a whole model shows its keys sorted, "type" after "merges".
  const std::string types = " is not one headwise reads (BPE; Unigram, WordPiece and WordLevel are not)";
  if (!model.is_object()) m.fail("model " + model.dump().substr(0, 80) + types);
  if (model.contains("type") && detail::type_of(model) != "BPE") m.fail("model type " + model.at("type").dump().substr(0, 80) + types);
  const auto string_or_null = [&](const char* key) {
    if (!model.contains(key) || model.at(key).is_null()) return std::string();
    if (!model.at(key).is_string()) m.fail(std::string("the BPE model's \"") + key + "\" is neither a string nor null");
    return model.at(key).get<std::string>();
  };
  if (model.contains("dropout") && !model.at("dropout").is_null() && !(model.at("dropout").is_number() && model.at("dropout").get<double>() == 0.0))
    m.fail("the BPE model's \"dropout\" = " + model.at("dropout").dump() + " (random merges) is not one headwise applies (null or 0)");
  m.prefix_ = string_or_null("continuing_subword_prefix"), m.suffix_ = string_or_null("end_of_word_suffix"), m.unk_ = string_or_null("unk_token");
  const auto flag = [&](const char* key) {
    if (!model.contains(key) || model.at(key).is_null()) return false;
    if (!model.at(key).is_boolean()) m.fail(std::string("the BPE model's \"") + key + "\" is not true or false");
    return model.at(key).get<bool>();
  };
  m.byte_fallback_ = flag("byte_fallback"), m.fuse_unk_ = flag("fuse_unk"), m.ignore_merges_ = flag("ignore_merges");
  if (!model.contains("vocab")) m.fail("the BPE model has no \"vocab\"");
  m.read_vocab(model.at("vocab"));
  if (!model.contains("merges") || !model.at("merges").is_array()) m.fail("the BPE model has no \"merges\" list");
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(model.at("merges").size());
  for (const auto& p : model.at("merges")) {
    if (p.is_string()) {  // "left right"
      const std::string s = p.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) m.fail("merge \"" + s + "\" is not \"left right\"");
      pairs.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_string()) {  // ["left", "right"]
      pairs.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
    } else {
      m.fail("merge " + p.dump().substr(0, 60) + " is neither \"left right\" nor [\"left\", \"right\"]");
    }
  }
  m.read_merges(pairs);
  m.find_word_starts();
  return m;
}

HEADWISE_TEXT_INLINE BpeModel BpeModel::from_files(const std::string& vocab_json_text, const std::string& merges_txt_text, const std::string& where) {
  BpeModel m(where);
  const nlohmann::json vocab = nlohmann::json::parse(vocab_json_text, nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded()) m.fail("vocab.json is not JSON");
  m.read_vocab(vocab);
  std::istringstream merges(merges_txt_text);
  std::string line;
  std::vector<std::pair<std::string, std::string>> pairs;
  for (Index n = 1; std::getline(merges, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      m.fail("merges.txt: line " + std::to_string(n) + " is not \"left right\"");
    pairs.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  m.read_merges(pairs);
  return m;
}

HEADWISE_TEXT_INLINE void BpeModel::read_vocab(const nlohmann::json& vocab) {
  if (!vocab.is_object()) fail("the vocabulary is not a {token: id} object");
  std::uint64_t largest = 0;
  for (const auto& item : vocab.items()) {
    const auto& v = item.value();
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() >= (std::uint64_t(1) << 31))
      fail("the vocabulary gives \"" + item.key().substr(0, 40) + "\" the id " + v.dump() + ", not an integer in [0, 2^31)");
    largest = std::max(largest, v.get<std::uint64_t>());
  }
  // (ids index a table: one as far past the count as 2147483647 past 3 tokens is refused, not allocated)
  if (largest >= 4 * std::uint64_t(vocab.size()) + 4096)
    fail("the vocabulary's largest id is " + std::to_string(largest) + " for " + std::to_string(vocab.size()) +
         " tokens: ids must lie below 4 x the count + 4096");
  tokens_.resize(vocab.empty() ? 0 : largest + 1), present_.resize(tokens_.size());
  ids_.reserve(vocab.size());
  for (const auto& item : vocab.items()) {
    const auto i = static_cast<std::size_t>(item.value().get<std::uint64_t>());
    if (present_[i]) fail("id " + std::to_string(i) + " is given to two tokens");
    tokens_[i] = item.key(), present_[i] = true, ids_.emplace(item.key(), Index(i));
  }
  single_.assign(0x10000, -1);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    if (present_[i] && !t.empty() && first_invalid_utf8(t) == std::string::npos && utf8_length(static_cast<unsigned char>(t[0])) == t.size() &&
        code_point_at(t, 0).value < 0x10000)
      single_[code_point_at(t, 0).value] = static_cast<std::int32_t>(i);
  }
  if (!unk_.empty() && (unk_id_ = id(unk_)) < 0) fail("the unknown token \"" + unk_ + "\" is not in the vocabulary");
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_ids_[b] = id(name);
    }
  }
}

HEADWISE_TEXT_INLINE void BpeModel::MergeTable::reserve(std::size_t count) {
  std::size_t size = 16;
  shift_ = 60;
  while (size < 2 * count) size *= 2, --shift_;
  slots_.assign(size, Slot{empty, Merge{0, 0}}), mask_ = size - 1, count_ = 0;
}

HEADWISE_TEXT_INLINE void BpeModel::MergeTable::set(Index a, Index b, Merge m) {
  if (2 * (count_ + 1) > slots_.size()) {  // grow: half full at most
    const std::vector<Slot> old = std::move(slots_);
    reserve(std::max<std::size_t>(16, old.size()));
    for (const Slot& o : old)
      if (o.key != empty) set(Index(o.key >> 32), Index(o.key & 0xFFFFFFFFu), o.merge);
  }
  const std::uint64_t k = key(a, b);
  std::size_t i = slot(k);
  while (slots_[i].key != empty && slots_[i].key != k) i = (i + 1) & mask_;
  if (slots_[i].key == empty) ++count_;
  slots_[i] = Slot{k, m};
}

HEADWISE_TEXT_INLINE void BpeModel::read_merges(const std::vector<std::pair<std::string, std::string>>& pairs) {
  merges_.reserve(pairs.size());
  for (std::size_t r = 0; r < pairs.size(); ++r) {
    const std::string& left = pairs[r].first;
    const std::string right = pairs[r].second.substr(std::min(prefix_.size(), pairs[r].second.compare(0, prefix_.size(), prefix_) == 0 ? prefix_.size() : 0));
    const Index a = id(left), b = id(pairs[r].second), merged = id(left + right);
    if (a < 0 || b < 0 || merged < 0)
      fail("merge " + std::to_string(r) + " (\"" + left + " " + pairs[r].second + "\") joins tokens the vocabulary lacks");
    merges_.set(a, b, Merge{static_cast<std::int32_t>(r), static_cast<std::int32_t>(merged)});  // (a repeated pair: the last rank, as Hugging Face)
  }
}

HEADWISE_TEXT_INLINE Index BpeModel::character_id(std::string_view character) const {
  if (utf8_length(static_cast<unsigned char>(character[0])) == character.size() && character.size() < 4)
    return single_[code_point_at(character, 0).value];
  return id(character);
}

HEADWISE_TEXT_INLINE void BpeModel::characters(std::string_view piece, std::vector<Index>& symbols) const {
  Index unk = -1;  // a pending unknown token (Hugging Face adds it when the next known character comes)
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t n = utf8_length(static_cast<unsigned char>(piece[i]));
    const bool first = i == 0, last = i + n >= piece.size();
    std::string_view c = piece.substr(i, n);
    std::string affixed;
    if ((!first && !prefix_.empty()) || (last && !suffix_.empty()))
      affixed = (first ? std::string() : prefix_) + std::string(c) + (last ? suffix_ : std::string()), c = affixed;
    i += n;
    const Index found = character_id(c);
    if (found >= 0) {
      if (unk >= 0) symbols.push_back(unk), unk = -1;
      symbols.push_back(found);
      continue;
    }
    bool bytes = byte_fallback_;
    for (const char b : c) bytes = bytes && byte_ids_[static_cast<unsigned char>(b)] >= 0;
    if (bytes) {
      for (const char b : c) symbols.push_back(byte_ids_[static_cast<unsigned char>(b)]);
      continue;
    }
    if (unk_id_ < 0) fail("the vocabulary has no token for the character \"" + std::string(c) + "\" (no byte_fallback, no unk_token)");
    if (unk >= 0 && !fuse_unk_) symbols.push_back(unk);
    unk = unk_id_;
  }
  if (unk >= 0) symbols.push_back(unk);
}

HEADWISE_TEXT_INLINE void BpeModel::tokenize(std::string_view piece, std::vector<Index>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const Index whole = id(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  std::vector<Index> symbols;
  characters(piece, symbols);
  std::size_t begin = 0;
  for (std::size_t i = 1; i < symbols.size(); ++i)
    if (separate(symbols[i - 1], symbols[i])) merge(symbols, begin, i, out), begin = i;
  merge(symbols, begin, symbols.size(), out);
}

HEADWISE_TEXT_INLINE void BpeModel::find_word_starts() {
  static const std::string marker = "\xE2\x96\x81";  // U+2581
  if (id(marker) < 0) return;
  // The last characters of the text before a "▁" inside some token (">" in Gemma 3's ">▁</").
  std::unordered_map<std::string, bool> before_marker;
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    for (std::size_t at = t.find(marker, 1); present_[i] && at != std::string::npos; at = t.find(marker, at + 1)) {
      std::size_t c = at - 1;
      while (c > 0 && (static_cast<unsigned char>(t[c]) & 0xC0) == 0x80) --c;
      if (t.compare(c, at - c, marker) != 0) before_marker[t.substr(c, at - c)] = true;
    }
  }
  word_starts_.assign(tokens_.size(), false), word_ends_.assign(tokens_.size(), false);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    if (!present_[i] || t.empty()) continue;
    word_starts_[i] = t.compare(0, marker.size(), marker) == 0;
    std::size_t c = t.size() - 1;
    while (c > 0 && (static_cast<unsigned char>(t[c]) & 0xC0) == 0x80) --c;
    const std::string last = t.substr(c);
    word_ends_[i] = last != marker && !before_marker.count(last);
  }
}

HEADWISE_TEXT_INLINE void BpeModel::merge(const std::vector<Index>& symbols, std::size_t begin, std::size_t end, std::vector<Index>& out) const {
  if (end - begin < 2) {
    out.insert(out.end(), symbols.begin() + std::ptrdiff_t(begin), symbols.begin() + std::ptrdiff_t(end));
    return;
  }
  struct Symbol {
    std::int32_t id, prev, next;
  };
  std::vector<Symbol> s(end - begin);
  for (std::size_t p = 0; p < s.size(); ++p)
    s[p] = {std::int32_t(symbols[begin + p]), std::int32_t(p) - 1, p + 1 < s.size() ? std::int32_t(p) + 1 : -1};
  // Candidates as rank << 32 | position: the smallest is the lowest rank, leftmost among equals. A
  // popped candidate is stale if the pair at its position now has another merge: the pair at a
  // position only changes by growing to the right, so another pair there is another rank.
  std::vector<std::uint64_t> storage;
  storage.reserve(s.size());
  std::priority_queue<std::uint64_t, std::vector<std::uint64_t>, std::greater<std::uint64_t>> heap(std::greater<std::uint64_t>(), std::move(storage));
  const auto offer = [&](std::int32_t pos) {
    if (pos < 0 || s[static_cast<std::size_t>(pos)].next < 0) return;
    const Symbol& left = s[static_cast<std::size_t>(pos)];
    if (const Merge* m = merges_.find(left.id, s[static_cast<std::size_t>(left.next)].id))
      heap.push((std::uint64_t(std::uint32_t(m->rank)) << 32) | std::uint32_t(pos));
  };
  for (std::int32_t p = 0; p < std::int32_t(s.size()); ++p) offer(p);
  while (!heap.empty()) {
    const std::uint64_t c = heap.top();
    heap.pop();
    const auto pos = static_cast<std::int32_t>(c & 0xFFFFFFFFu);
    Symbol& left = s[static_cast<std::size_t>(pos)];
    if (left.id < 0 || left.next < 0) continue;  // merged away, or now the last
    const Merge* m = merges_.find(left.id, s[static_cast<std::size_t>(left.next)].id);
    if (!m || std::uint32_t(m->rank) != (c >> 32)) continue;  // a side changed since
    Symbol& right = s[static_cast<std::size_t>(left.next)];
    left.id = m->merged, left.next = right.next, right.id = -1;
    if (left.next >= 0) s[static_cast<std::size_t>(left.next)].prev = pos;
    offer(left.prev), offer(pos);
  }
  for (std::int32_t p = 0; p >= 0; p = s[static_cast<std::size_t>(p)].next) out.push_back(s[static_cast<std::size_t>(p)].id);
}

}  // namespace headwise::text
