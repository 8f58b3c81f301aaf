// A tokenizer as a Hugging Face tokenizer.json describes it, applied the way its Rust library
// applies it: added tokens cut out of the text (added_tokens.hpp), each piece between them
// normalized (normalizer.hpp), cut into words (pre_tokenizer.hpp) and merged by the BPE model
// (bpe_model.hpp); with add_special_tokens, the post-processor's template around the ids
// (post_processor.hpp); decode through the file's decoder (decoder.hpp). This reads the files of
// GPT-2, Llama 3, Qwen2/3, Gemma 2/3, Mistral, Llama 2, Phi-3, DeepSeek-V3 and gpt-oss, and GPT-2's
// own vocab.json + merges.txt. Anything a file asks for that headwise does not apply (another
// model type, a normalizer, pre-tokenizer, decoder or post-processor it does not know, a key it
// does not know, truncation or padding) is refused by name.
//
//   auto tok = headwise::text::Tokenizer::from_tokenizer_json("Qwen3-8B/tokenizer.json");
//   std::vector<headwise::Index> ids = tok.encode("the cat sat");        // {1782, 8251, 7578}
//   auto with_bos = tok.encode("the cat sat", {/*add_special_tokens=*/true});
//   std::string text = tok.decode(ids);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/text/added_tokens.hpp"
#include "headwise/text/bpe_model.hpp"
#include "headwise/text/decoder.hpp"
#include "headwise/text/normalizer.hpp"
#include "headwise/text/post_processor.hpp"
#include "headwise/text/pre_tokenizer.hpp"
#include "headwise/types.hpp"

namespace headwise::text {

/// The largest tokenizer file read (tokenizer.json, vocab.json, merges.txt, tokenizer_config.json,
/// ...): 1 GiB, 30 times the largest of real models (Gemma 3's tokenizer.json, 33 MB); a larger
/// one is refused by name before it is read.
inline constexpr std::uint64_t max_tokenizer_file_bytes = std::uint64_t(1) << 30;

/// What GPT-2's own files (vocab.json + merges.txt) leave to the files beside them, which
/// io::load_tokenizer reads from a model's folder (tokenizer_config.json, added_tokens.json).
struct VocabMergesOptions {
  /// Tokens cut out of the text before it is split; an id of -1 takes the vocabulary's id of the
  /// content (refused if it has none). GPT-2's tokenizer classes make <|endoftext|> one.
  std::vector<AddedToken> added_tokens = {{"<|endoftext|>", -1, /*special=*/true}};
  /// A space put before the text, as GPT-2's tokenizer does with add_prefix_space.
  bool add_prefix_space = false;
  /// The tokens (contents) encode(text, {add_special_tokens=true}) puts before and after the text.
  std::vector<std::string> tokens_before, tokens_after;
};

struct EncodeOptions {
  /// Add the special tokens the file's post-processor template puts around a text (BOS, ...).
  bool add_special_tokens = false;
};

class Tokenizer {
 public:
  /// A Hugging Face tokenizer.json (see the top of this file for what is read).
  static Tokenizer from_tokenizer_json(const std::string& path);
  static Tokenizer from_tokenizer_json_text(const std::string& text, const std::string& name);
  /// GPT-2's own files, vocab.json ({token: id}) and merges.txt, with GPT-2's ByteLevel splitting
  /// and decoding.
  static Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt, const VocabMergesOptions& options = {});

  /// The ids of text (UTF-8). Throws on invalid UTF-8, naming the byte.
  std::vector<Index> encode(std::string_view text, EncodeOptions options = {}) const;
  /// The text of ids through the file's decoder (special tokens kept). Throws on an unknown id.
  std::string decode(const std::vector<Index>& ids) const;

  /// One past the largest id, the model's or an added token's.
  Index vocab_size() const { return vocab_size_; }
  /// The token string of id (an added token's content, or the model's token); throws if unknown.
  const std::string& token(Index id) const;
  /// The id of a token string (added tokens first), or -1.
  Index id(std::string_view token) const;
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

 private:
  Tokenizer(std::string name, BpeModel model) : name_(std::move(name)), model_(std::move(model)) {}
  [[noreturn]] void fail(const std::string& what) const;
  void read_added_tokens(const nlohmann::json& added);
  /// One piece between added tokens: normalized, cut at normalized added tokens, pre-tokenized, merged.
  void encode_piece(std::string_view piece, bool at_start, std::vector<Index>& out) const;

  std::string name_;
  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  PostProcessor post_processor_;
  Decoder decoder_;
  AddedTokens added_;
  Index vocab_size_ = 0;
};

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/tokenizer.hpp")
