// Byte-level BPE against GPT-2's real vocabulary and merges (tests/data/gpt2-tokenizer): the ids of
// 60 texts from three independent tokenizers (gpt-3-encoder, transformers.js, Hugging Face's Rust
// library), from GPT-2's own files and from tokenizer.json, with GPT-2's and Llama 3's splitting,
// decoded back; special tokens; invalid UTF-8, 1 MB texts, and the files headwise refuses.
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "headwise/text/byte_level_bpe.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

using headwise::Index;
using headwise::text::BpeTokenizer;

namespace {
nlohmann::json reference(const std::string& relative) {
  std::ifstream in(headwise_test::data_path(relative));
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}
void check_reference(const BpeTokenizer& bpe, const nlohmann::json& cases) {
  REQUIRE(cases.size() == 60);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    CAPTURE(text);
    const std::vector<Index> ids = c.at("ids").get<std::vector<Index>>();
    CHECK(bpe.encode(text) == ids);
    CHECK(bpe.decode(ids) == text);
  }
}
const BpeTokenizer& gpt2() {
  static const BpeTokenizer t = BpeTokenizer::from_tokenizer_json(headwise_test::data_path("gpt2-tokenizer/tokenizer.json"));
  return t;
}
}  // namespace

TEST_CASE("GPT-2's tokenizer: the ids of three independent implementations, from tokenizer.json and from vocab.json + merges.txt",
          "[tokenizer][fixture]") {
  const nlohmann::json cases = reference("gpt2-tokenizer/tokenization-reference.json");
  check_reference(gpt2(), cases);
  const BpeTokenizer files = BpeTokenizer::from_files(headwise_test::data_path("gpt2-tokenizer/vocab.json"),
                                                      headwise_test::data_path("gpt2-tokenizer/merges.txt"));
  check_reference(files, cases);
  CHECK(gpt2().vocab_size() == 50257);
  CHECK(gpt2().token(50256) == "<|endoftext|>");
  CHECK(gpt2().id("Ġthe") == 262);
  CHECK(gpt2().encode("a   b    c") == std::vector<Index>{64, 220, 220, 275, 220, 220, 220, 269});
}

TEST_CASE("Llama 3's splitting (Split + ByteLevel, merges as pairs) over GPT-2's vocabulary", "[tokenizer][fixture]") {
  const BpeTokenizer llama3 = BpeTokenizer::from_tokenizer_json(headwise_test::data_path("gpt2-tokenizer/llama3-split/tokenizer.json"));
  check_reference(llama3, reference("gpt2-tokenizer/llama3-split/tokenization-reference.json"));
  CHECK(llama3.decode(llama3.encode("1234567890")) == "1234567890");
  CHECK(llama3.encode("1234567890").size() == 4);  // 123 456 789 0
}

TEST_CASE("Special tokens are cut out before splitting and decode to their text", "[tokenizer]") {
  // (each side on its own is checked against the reference ids above)
  const std::vector<Index> ids = gpt2().encode("the cat<|endoftext|>sat");
  std::vector<Index> expected = gpt2().encode("the cat");
  expected.push_back(50256);
  for (const Index i : gpt2().encode("sat")) expected.push_back(i);
  CHECK(ids == expected);
  CHECK(gpt2().decode(ids) == "the cat<|endoftext|>sat");
  CHECK(gpt2().encode("<|endoftext|><|endoftext|>") == std::vector<Index>{50256, 50256});
}

TEST_CASE("Invalid UTF-8, unknown ids, 1 MB texts", "[tokenizer][errors]") {
  CHECK_THROWS_WITH(gpt2().encode(std::string("ab\xC3(", 4)), Catch::Contains("the text is not valid UTF-8 (at byte 2)"));
  CHECK_THROWS_WITH(gpt2().encode(std::string("ok <|endoftext|> \xFF", 19)), Catch::Contains("not valid UTF-8"));
  CHECK_THROWS_WITH(gpt2().encode("\xED\xA0\x80"), Catch::Contains("not valid UTF-8 (at byte 0)"));      // a surrogate
  CHECK_THROWS_WITH(gpt2().encode("x\xC0\xAF"), Catch::Contains("not valid UTF-8 (at byte 1)"));         // overlong "/"
  CHECK_THROWS_WITH(gpt2().encode("\xF4\x90\x80\x80"), Catch::Contains("not valid UTF-8 (at byte 0)"));  // past U+10FFFF
  CHECK_THROWS_WITH(gpt2().decode({50257}), Catch::Contains("id 50257 is not in the vocabulary (0 .. 50256)"));
  CHECK_THROWS_WITH(gpt2().decode({-1}), Catch::Contains("id -1 is not in the vocabulary"));
  // One piece of a million letters, and a million bytes of mixed text: O(n log n) merges, not O(n^2).
  const std::string letters(1 << 20, 'a');
  const std::vector<Index> many = gpt2().encode(letters);
  CHECK(gpt2().decode(many) == letters);
  CHECK(many.size() < letters.size() / 2);
  std::string mixed;  // (64 KiB: the 60 reference texts cover the splitting; this, many pieces in one call)
  while (mixed.size() < (1 << 16)) mixed += "When Mary and John went to the store, John gave a drink to 12345 \xE2\x80\x94 \xE7\x8C\xAB\n";
  CHECK(gpt2().decode(gpt2().encode(mixed)) == mixed);
}

TEST_CASE("What headwise does not implement in a tokenizer.json is refused by name", "[tokenizer][errors]") {
  // A small tokenizer.json in GPT-2's layout (the whole file parses in seconds under the sanitizers).
  const std::string json =
      R"({"added_tokens":[{"id":3,"content":"<|endoftext|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":true}],)"
      R"("normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},)"
      R"("decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},)"
      R"("model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,)"
      R"("fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"Ġ":0,"t":1,"Ġt":2},"merges":["Ġ t"]}})";
  CHECK(BpeTokenizer::from_tokenizer_json_text(json, "t.json").encode(" t") == std::vector<Index>{2});
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string changed = json;
    const std::size_t at = changed.find(from);
    REQUIRE(at != std::string::npos);
    return BpeTokenizer::from_tokenizer_json_text(changed.replace(at, from.size(), to), "t.json");
  };
  CHECK_THROWS_WITH(with(R"("type":"BPE")", R"("type":"Unigram")"), Catch::Contains("t.json: model type \"Unigram\" is not one headwise reads"));
  CHECK_THROWS_WITH(with(R"("normalizer":null)", R"("normalizer":{"type":"NFC"})"), Catch::Contains("normalizer {\"type\":\"NFC\"} is not one headwise applies"));
  CHECK_THROWS_WITH(with(R"("byte_fallback":false)", R"("byte_fallback":true)"), Catch::Contains("\"byte_fallback\" = true is not read"));
  CHECK_THROWS_WITH(with(R"("dropout":null)", R"("dropout":0.1)"), Catch::Contains("\"dropout\" = 0.1 is not read"));
  CHECK_THROWS_WITH(with(R"("pre_tokenizer":{"type":"ByteLevel")", R"("pre_tokenizer":{"type":"Whitespace")"),
                    Catch::Contains("is not one headwise reads"));
  CHECK_THROWS_WITH(with(R"("decoder":{"type":"ByteLevel")", R"("decoder":{"type":"WordPiece")"), Catch::Contains("\"type\":\"WordPiece\"") && Catch::Contains("is not one headwise applies (ByteLevel)"));
  CHECK_THROWS_WITH(with(R"("lstrip":false)", R"("lstrip":true)"), Catch::Contains("sets \"lstrip\", which headwise does not apply"));
  CHECK_THROWS_WITH(with(R"("Ġ t")", R"("Ġ zzqq")"), Catch::Contains("merge 0 (\"Ġ zzqq\") joins tokens the vocabulary lacks"));
  CHECK_THROWS_WITH(BpeTokenizer::from_tokenizer_json_text("[1, 2]", "t.json"), Catch::Contains("t.json: is not a JSON object"));
  CHECK_THROWS_WITH(BpeTokenizer::from_tokenizer_json("/nonexistent/tokenizer.json"), Catch::Contains("cannot open /nonexistent/tokenizer.json"));
}
