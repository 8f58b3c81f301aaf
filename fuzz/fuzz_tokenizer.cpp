// libFuzzer target: GPT-2's real tokenizer (tests/data/gpt2-tokenizer/tokenizer.json) on arbitrary
// bytes. Every input must either be refused as invalid UTF-8 (headwise::text::TokenizerError) or
// give ids in the vocabulary that decode back to exactly the input; anything else (another
// exception, a crash, a sanitizer report, a hang) is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "headwise/text/tokenizer.hpp"

#ifndef HEADWISE_FUZZ_TOKENIZER
#error "HEADWISE_FUZZ_TOKENIZER must name GPT-2's tokenizer.json"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto tokenizer = headwise::text::Tokenizer::from_tokenizer_json(HEADWISE_FUZZ_TOKENIZER);
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto ids = tokenizer.encode(text);
    for (const auto id : ids)
      if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
    if (tokenizer.decode(ids) != text) std::abort();  // byte-level BPE loses nothing
  } catch (const headwise::text::TokenizerError&) {
  }
  return 0;
}
