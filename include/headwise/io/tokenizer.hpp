// The tokenizer a downloaded model's folder holds, found the way transformers' AutoTokenizer finds
// it: its tokenizer.json when there is one (read whole, as Hugging Face's tokenizers library reads
// it), else GPT-2's vocab.json + merges.txt with what the files beside them say:
// tokenizer_config.json (tokenizer_class, added_tokens_decoder, bos/eos/unk/pad/... tokens,
// add_prefix_space, add_bos_token, add_eos_token), special_tokens_map.json, added_tokens.json.
// Without any of those, GPT-2's tokenizer classes' default: <|endoftext|> is a special token.
// Rules:
// - tokenizer_config.json is read whenever it is there, beside either, and checked the same way:
//   a key headwise does not know, or one that would change the ids and that headwise does not
//   apply (split_special_tokens or do_lower_case true, errors other than "replace", another
//   tokenizer_class), is refused by name. Beside vocab.json its options are applied; beside
//   tokenizer.json, which fixes the tokenizer whole as the tokenizers library reads it, the keys
//   that describe what the file fixes (the special tokens, add_bos_token, add_prefix_space,
//   added_tokens_decoder, model_max_length, chat_template, ...) are checked for their types only.
// - Every file is a regular file of at most text::max_tokenizer_file_bytes: a directory, a named
//   pipe (never waited on), a device or a larger file in a tokenizer file's place is refused by
//   name, not skipped. So is a folder with only a SentencePiece tokenizer.model.
// Part of headwise::text (PCRE2, utf8proc, nlohmann_json).
//
//   headwise::text::Tokenizer tok = headwise::io::load_tokenizer("Qwen3-8B");
//   auto model = headwise::io::load_decoder_model<float>("Qwen3-8B");
//   auto logits = model.logits(tok.encode("the cat sat"));
#pragma once

#include <string>

#include "headwise/detail/compiled.hpp"
#include "headwise/text/tokenizer.hpp"

namespace headwise::io {

/// The tokenizer in folder (see the top of this file); throws text::TokenizerError naming the file.
text::Tokenizer load_tokenizer(const std::string& folder);

namespace detail {
/// What GPT-2's vocab.json + merges.txt get from the files beside them in folder.
text::VocabMergesOptions vocab_merges_options(const std::string& folder);
}  // namespace detail

}  // namespace headwise::io

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/io/definitions/tokenizer.hpp")
