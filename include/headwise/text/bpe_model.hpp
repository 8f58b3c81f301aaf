// The BPE model of a tokenizer.json (or of GPT-2's vocab.json + merges.txt): a vocabulary of
// tokens with ids, and merges ranked by their order. A piece is split into its characters, which
// adjacent pair has the lowest rank is merged first (the leftmost among equals), until no pair has
// a merge, as Hugging Face's word.rs merges (a heap: O(n log n) for a piece of n characters). A
// character the vocabulary lacks becomes its bytes' <0xXX> tokens (byte_fallback), else the
// unknown token (fused with its neighbours under fuse_unk); with neither it is an error that
// names it. continuing_subword_prefix and end_of_word_suffix (empty: none) and ignore_merges (a
// piece that is a token is that token) as Hugging Face reads them; dropout other than null or 0 is
// refused.
//
//   auto bpe = headwise::text::BpeModel::from_json(tokenizer_json.at("model"), "tokenizer.json");
//   std::vector<headwise::Index> ids;
//   bpe.tokenize("Ġcat", ids);   // {3797} with GPT-2's vocabulary
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/text/json_fields.hpp"
#include "headwise/text/unicode.hpp"
#include "headwise/types.hpp"

namespace headwise::text {

class BpeModel {
 public:
  /// A tokenizer.json "model" object of type BPE.
  static BpeModel from_json(const nlohmann::json& model, const std::string& where);
  /// GPT-2's vocab.json ({token: id}) and merges.txt ("#version" line, then "left right" lines).
  static BpeModel from_files(const std::string& vocab_json_text, const std::string& merges_txt_text, const std::string& where);

  /// The ids of one piece, appended to out.
  void tokenize(std::string_view piece, std::vector<Index>& out) const;

  /// One past the largest id.
  Index vocab_size() const { return static_cast<Index>(tokens_.size()); }
  bool has_id(Index id) const { return id >= 0 && id < vocab_size() && present_[static_cast<std::size_t>(id)]; }
  /// The token string of id (has_id(id) assumed).
  const std::string& token(Index id) const { return tokens_[static_cast<std::size_t>(id)]; }
  /// The id of a token string, or -1.
  Index id(std::string_view token) const;

 private:
  explicit BpeModel(std::string where) : where_(std::move(where)) {}
  [[noreturn]] void fail(const std::string& what) const;
  void read_vocab(const nlohmann::json& vocab);
  void read_merges(const std::vector<std::pair<std::string, std::string>>& pairs);
  /// The ids of the characters of piece (byte fallback, unknown token), before any merge.
  void characters(std::string_view piece, std::vector<Index>& symbols) const;
  Index character_id(std::string_view character) const;
  /// Merges symbols[begin, end) and appends the result to out.
  void merge(const std::vector<Index>& symbols, std::size_t begin, std::size_t end, std::vector<Index>& out) const;
  /// Whether no merge can join symbols a and b (a SentencePiece-style "▁" starts b, and no token has
  /// a's last character before a "▁"): a long piece is merged in parts between such places.
  bool separate(Index a, Index b) const { return !word_starts_.empty() && word_starts_[static_cast<std::size_t>(b)] && word_ends_[static_cast<std::size_t>(a)]; }
  void find_word_starts();

  struct Merge {
    std::int32_t rank, merged;
  };
  /// The merges by pair of ids: an open-addressing table (a pair's lookup is most of encoding's time).
  class MergeTable {
   public:
    void reserve(std::size_t count);
    /// Sets the merge of (a, b), replacing an earlier one.
    void set(Index a, Index b, Merge m);
    /// The merge of (a, b), or nullptr.
    const Merge* find(Index a, Index b) const {
      if (slots_.empty()) return nullptr;
      const std::uint64_t k = key(a, b);
      for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
        if (slots_[i].key == k) return &slots_[i].merge;
        if (slots_[i].key == empty) return nullptr;
      }
    }

   private:
    static constexpr std::uint64_t empty = ~std::uint64_t(0);
    static std::uint64_t key(Index a, Index b) { return (std::uint64_t(a) << 32) | std::uint64_t(b); }
    std::size_t slot(std::uint64_t k) const { return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }
    struct Slot {
      std::uint64_t key;
      Merge merge;
    };
    std::vector<Slot> slots_;
    std::size_t mask_ = 0, count_ = 0;
    int shift_ = 64;
  };

  std::string where_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  std::unordered_map<std::string, Index> ids_;
  MergeTable merges_;
  std::vector<std::int32_t> single_;  // the id of each one-character token below U+10000 (-1: none), for speed
  std::string prefix_, suffix_;
  std::string unk_;
  Index unk_id_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  Index byte_ids_[256] = {};  // <0x00> .. <0xFF>, where byte_fallback
  std::vector<bool> word_starts_, word_ends_;  // by id, for separate() (empty: no "▁" in the vocabulary)
};

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/bpe_model.hpp")
