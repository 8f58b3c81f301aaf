// libFuzzer target: a whole tokenizer.json and a text to encode with it, in one input separated by
// a NUL byte. The seeds (make_seeds.py) are small files of each family's shape (Qwen3, Gemma 3,
// Llama 3, the SentencePiece-style BPE, DeepSeek-V3, gpt-oss: their normalizers, pre-tokenizers,
// byte fallback, added tokens, decoders and templates over a vocabulary of a few hundred tokens),
// so that the fuzzer mutates what the reader reads rather than JSON syntax. Every input must end in
// a Tokenizer or in headwise::text::TokenizerError; a Tokenizer must encode the text to ids it
// knows, which decode (or refuse the text by name). Another exception, a crash, a sanitizer report
// or a hang is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "headwise/text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const char* begin = reinterpret_cast<const char*>(data);
  const char* nul = static_cast<const char*>(std::memchr(begin, 0, size));
  const std::string json(begin, nul ? nul : begin + size), text(nul ? nul + 1 : begin + size, begin + size);
  std::optional<headwise::text::Tokenizer> tokenizer;
  std::vector<headwise::Index> ids;
  try {
    tokenizer.emplace(headwise::text::Tokenizer::from_tokenizer_json_text(json, "fuzz.json"));
    ids = tokenizer->encode(text);
  } catch (const headwise::text::TokenizerError&) {
    return 0;  // a file, or a text (invalid UTF-8, a character the vocabulary lacks, a regex limit), refused by name
  }
  for (const auto id : ids)
    if (id < 0 || id >= tokenizer->vocab_size()) std::abort();
  try {
    tokenizer->decode(ids);  // every id encode gives is one the tokenizer knows: decode must not refuse it
  } catch (const headwise::text::TokenizerError&) {
    std::abort();
  }
  try {
    tokenizer->encode(text, {/*add_special_tokens=*/true});
  } catch (const headwise::text::TokenizerError&) {
  }
  return 0;
}
