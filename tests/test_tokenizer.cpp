// text::Tokenizer on GPT-2's real vocabulary and merges (tests/data/gpt2-tokenizer): the ids of
// 60 texts from three independent tokenizers (gpt-3-encoder, transformers.js, Hugging Face's Rust
// library), from GPT-2's own files and from tokenizer.json, with GPT-2's and Llama 3's splitting,
// decoded back; special tokens; invalid UTF-8, 1 MB texts, and the files headwise refuses
// (the six families' files: test_family_tokenizers.cpp); io::load_tokenizer on a model's folder;
// regexes by Unicode 16 (PCRE2's own \p{..} and what Unicode 16 added, against code points),
// normalization of long runs of marks, a regex's budget of work a piece.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "headwise/io/tokenizer.hpp"
#include "headwise/text/tokenizer.hpp"
#include "headwise/text/unicode_categories.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

using headwise::Index;
using headwise::text::Tokenizer;

namespace {
nlohmann::json reference(const std::string& relative) {
  std::ifstream in(headwise_test::data_path(relative));
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}
void check_reference(const Tokenizer& bpe, const nlohmann::json& cases) {
  REQUIRE(cases.size() == 60);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    CAPTURE(text);
    const std::vector<Index> ids = c.at("ids").get<std::vector<Index>>();
    CHECK(bpe.encode(text) == ids);
    CHECK(bpe.decode(ids) == text);
  }
}
const Tokenizer& gpt2() {
  static const Tokenizer t = Tokenizer::from_tokenizer_json(headwise_test::data_path("gpt2-tokenizer/tokenizer.json"));
  return t;
}
}  // namespace

TEST_CASE("GPT-2's tokenizer: the ids of three independent implementations, from tokenizer.json and from vocab.json + merges.txt",
          "[tokenizer][fixture]") {
  const nlohmann::json cases = reference("gpt2-tokenizer/tokenization-reference.json");
  check_reference(gpt2(), cases);
  const Tokenizer files = Tokenizer::from_files(headwise_test::data_path("gpt2-tokenizer/vocab.json"),
                                               headwise_test::data_path("gpt2-tokenizer/merges.txt"));
  check_reference(files, cases);
  CHECK(gpt2().vocab_size() == 50257);
  CHECK(gpt2().token(50256) == "<|endoftext|>");
  CHECK(gpt2().id("Ġthe") == 262);
  CHECK(gpt2().encode("a   b    c") == std::vector<Index>{64, 220, 220, 275, 220, 220, 220, 269});
}

TEST_CASE("Llama 3's splitting (Split + ByteLevel, merges as pairs) over GPT-2's vocabulary", "[tokenizer][fixture]") {
  const Tokenizer llama3 = Tokenizer::from_tokenizer_json(headwise_test::data_path("gpt2-tokenizer/llama3-split/tokenizer.json"));
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
  CHECK(Tokenizer::from_tokenizer_json_text(json, "t.json").encode(" t") == std::vector<Index>{2});
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string changed = json;
    const std::size_t at = changed.find(from);
    REQUIRE(at != std::string::npos);
    return Tokenizer::from_tokenizer_json_text(changed.replace(at, from.size(), to), "t.json");
  };
  CHECK_THROWS_WITH(with(R"("type":"BPE")", R"("type":"Unigram")"), Catch::Contains("t.json: model") && Catch::Contains("is not one headwise reads (BPE;"));
  CHECK_THROWS_WITH(with(R"("normalizer":null)", R"("normalizer":{"type":"BertNormalizer"})"),
                    Catch::Contains("normalizer {\"type\":\"BertNormalizer\"}") && Catch::Contains("is not one headwise applies"));
  CHECK_THROWS_WITH(with(R"("dropout":null)", R"("dropout":0.1)"), Catch::Contains("\"dropout\" = 0.1 (random merges) is not one headwise applies"));
  CHECK_THROWS_WITH(with(R"("pre_tokenizer":{"type":"ByteLevel")", R"("pre_tokenizer":{"type":"BertPreTokenizer")"),
                    Catch::Contains("pre-tokenizer {\"add_prefix_space\"") && Catch::Contains("is not one headwise applies"));
  CHECK_THROWS_WITH(with(R"("decoder":{"type":"ByteLevel")", R"("decoder":{"type":"WordPiece")"),
                    Catch::Contains("\"type\":\"WordPiece\"") && Catch::Contains("is not one headwise applies"));
  CHECK_THROWS_WITH(with(R"("lstrip":false)", R"("lstrip":false,"colour":"red")"), Catch::Contains("has the key \"colour\", which headwise does not know"));
  CHECK_THROWS_WITH(with(R"("added_tokens")", R"("truncation":{"max_length":8},"added_tokens")"), Catch::Contains("\"truncation\" is set"));
  CHECK_THROWS_WITH(with(R"("added_tokens")", R"("sentencepiece":1,"added_tokens")"), Catch::Contains("the key \"sentencepiece\" is not one headwise knows"));
  CHECK_THROWS_WITH(with(R"("type":"BPE")", R"("type":false)"), Catch::Contains("is not one headwise reads (BPE;"));  // (fuzz_tokenizer_json)
  CHECK_THROWS_WITH(with(R"("use_regex":true},)", R"("use_regex":"yes"},)"), Catch::Contains("\"use_regex\" is not true or false"));
  CHECK_THROWS_WITH(with(R"("Ġ t")", R"("Ġ zzqq")"), Catch::Contains("merge 0 (\"Ġ zzqq\") joins tokens the vocabulary lacks"));
  CHECK_THROWS_WITH(with(R"("id":3,)", R"("id":1,)"), Catch::Contains("has the id 1, which the vocabulary gives \"t\""));
  CHECK_THROWS_WITH(Tokenizer::from_tokenizer_json_text("[1, 2]", "t.json"), Catch::Contains("t.json: is not a JSON object"));
  CHECK_THROWS_WITH(Tokenizer::from_tokenizer_json("/nonexistent/tokenizer.json"), Catch::Contains("cannot open /nonexistent/tokenizer.json"));
}

namespace {
/// A model folder with GPT-2's vocab.json and merges.txt and the given files beside them.
std::string gpt2_folder(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
  const std::string folder = std::string(HEADWISE_TEST_TMP_DIR) + "/tokenizer-" + name;
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  for (const char* f : {"vocab.json", "merges.txt"})
    std::filesystem::copy_file(headwise_test::data_path(std::string("gpt2-tokenizer/") + f), folder + "/" + f);
  for (const auto& [file, text] : files) std::ofstream(folder + "/" + file) << text;
  return folder;
}
}  // namespace

TEST_CASE("io::load_tokenizer: a folder's tokenizer.json, else vocab.json + merges.txt with the files beside them", "[tokenizer][fixture]") {
  using headwise::io::load_tokenizer;
  using headwise::text::EncodeOptions;
  const nlohmann::json cases = reference("gpt2-tokenizer/tokenization-reference.json");
  check_reference(load_tokenizer(headwise_test::data_path("gpt2-tokenizer")), cases);  // its tokenizer.json
  const Tokenizer plain = load_tokenizer(gpt2_folder("plain", {}));  // GPT-2's classes' default: <|endoftext|> special
  check_reference(plain, cases);
  CHECK(plain.encode("hello<|endoftext|>") == std::vector<Index>{31373, 50256});
  CHECK(plain.encode("hello", EncodeOptions{true}) == std::vector<Index>{31373});
  // tokenizer_config.json: a BOS before each text, a space before it, as GPT2Tokenizer's options do.
  const Tokenizer bos = load_tokenizer(gpt2_folder(
      "bos", {{"tokenizer_config.json", R"({"tokenizer_class": "GPT2Tokenizer", "add_bos_token": true, "add_prefix_space": true,
              "bos_token": {"content": "<|endoftext|>", "__type": "AddedToken"}, "model_max_length": 1024, "errors": "replace"})"}}));
  CHECK(bos.encode("hello", EncodeOptions{true}) == std::vector<Index>{50256, 23748});
  CHECK(bos.encode("hello") == std::vector<Index>{23748});
  // added_tokens.json and special_tokens_map.json: a token past the vocabulary.
  const Tokenizer added = load_tokenizer(gpt2_folder("added", {{"added_tokens.json", R"({"<|im_start|>": 50257})"},
                                                               {"special_tokens_map.json", R"({"additional_special_tokens": ["<|im_start|>"]})"}}));
  CHECK(added.encode("a<|im_start|>b<|endoftext|>") == std::vector<Index>{64, 50257, 65, 50256});
  CHECK(added.vocab_size() == 50258);
  CHECK(added.decode({50257, 64}) == "<|im_start|>a");
  // added_tokens_decoder, as transformers writes it, with lstrip: the space before the token goes with it.
  const Tokenizer decoder = load_tokenizer(gpt2_folder("decoder", {{"tokenizer_config.json", R"({"added_tokens_decoder": {
      "50256": {"content": "<|endoftext|>", "lstrip": false, "normalized": true, "rstrip": false, "single_word": false, "special": true},
      "50257": {"content": "<mask>", "lstrip": true, "normalized": false, "rstrip": false, "single_word": false, "special": true}},
      "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"})"}}));
  CHECK(decoder.encode("hello <mask>") == std::vector<Index>{31373, 50257});
  CHECK(decoder.encode("hello<|endoftext|>") == std::vector<Index>{31373, 50256});
}

TEST_CASE("io::load_tokenizer refuses what it would read wrong, by name", "[tokenizer][errors]") {
  using headwise::io::load_tokenizer;
  const auto config = [](const std::string& name, const std::string& text) { return gpt2_folder(name, {{"tokenizer_config.json", text}}); };
  CHECK_THROWS_WITH(load_tokenizer(config("qwen2", R"({"tokenizer_class": "Qwen2Tokenizer"})")),
                    Catch::Contains("tokenizer_config.json: \"tokenizer_class\" is \"Qwen2Tokenizer\"") && Catch::Contains("GPT2Tokenizer"));
  CHECK_THROWS_WITH(load_tokenizer(config("unknown", R"({"sentencepiece_model": "x"})")), Catch::Contains("the key \"sentencepiece_model\" is not one headwise knows"));
  CHECK_THROWS_WITH(load_tokenizer(config("lower", R"({"do_lower_case": true})")), Catch::Contains("\"do_lower_case\" = true is not one headwise applies"));
  CHECK_THROWS_WITH(load_tokenizer(config("split", R"({"split_special_tokens": true})")), Catch::Contains("\"split_special_tokens\" = true"));
  CHECK_THROWS_WITH(load_tokenizer(config("errors", R"({"errors": "strict"})")), Catch::Contains("\"errors\" = \"strict\""));
  CHECK_THROWS_WITH(load_tokenizer(config("no-bos", R"({"add_bos_token": true, "bos_token": null})")),
                    Catch::Contains("\"add_bos_token\" is true but no bos_token is named"));
  CHECK_THROWS_WITH(load_tokenizer(config("flag", R"({"add_bos_token": "yes"})")), Catch::Contains("\"add_bos_token\" is not true or false"));
  CHECK_THROWS_WITH(load_tokenizer(config("missing", R"({"eos_token": "</s>"})")), Catch::Contains("the added token \"</s>\" has no id and is not in the vocabulary"));
  CHECK_THROWS_WITH(load_tokenizer(config("bad-id", R"({"added_tokens_decoder": {"x1": {"content": "<a>"}}})")),
                    Catch::Contains("added_tokens_decoder: the id \"x1\" is not an integer in [0, 2^31)"));
  CHECK_THROWS_WITH(load_tokenizer(config("clash", R"({"added_tokens_decoder": {"31373": {"content": "<a>", "special": true}}})")),
                    Catch::Contains("has the id 31373, which the vocabulary gives \"hello\""));
  CHECK_THROWS_WITH(load_tokenizer(config("not-json", "{")), Catch::Contains("tokenizer_config.json: is not a JSON object"));
  CHECK_THROWS_WITH(load_tokenizer(gpt2_folder("added-id", {{"added_tokens.json", R"({"<x>": -3})"}})), Catch::Contains("\"<x>\" has the id -3"));
  const std::string sentencepiece = std::string(HEADWISE_TEST_TMP_DIR) + "/tokenizer-sentencepiece";
  std::filesystem::create_directories(sentencepiece);
  std::ofstream(sentencepiece + "/tokenizer.model") << "x";
  CHECK_THROWS_WITH(load_tokenizer(sentencepiece), Catch::Contains("holds a SentencePiece tokenizer.model only"));
  CHECK_THROWS_WITH(load_tokenizer("/nonexistent"), Catch::Contains("/nonexistent holds no tokenizer.json and no vocab.json + merges.txt"));
}

// ---- Stress findings 3, 6 and 13 (issue 56): Unicode 16 in the regexes, linear NFC, a budget a piece ----

namespace {
/// The matched pieces of text, in order.
std::vector<std::string> matched(const headwise::text::Regex& regex, const std::string& text) {
  std::vector<std::string> out;
  for (const auto& m : regex.find_matches(text))
    if (m.matched) out.push_back(text.substr(m.begin, m.end - m.begin));
  return out;
}
}  // namespace

TEST_CASE("Regex: property classes, digits and spaces by Unicode 16.0 (unicode_categories.hpp), whatever PCRE2's own version", "[tokenizer][regex]") {
  using headwise::text::Regex;
  using headwise::text::utf8;
  // Runs of one kind from blocks PCRE2 10.42 (Unicode 14) does not know: Garay (16.0), Kawi and Nag
  // Mundari (15.0), CJK Ext. H (15.0) and I (15.1), U+A7CB-A7CD and U+A7DA-A7DC (16.0),
  // Tulu-Tigalari, Sunuwar, Todhri (16.0); Kaktovik numerals (15.0), outlined digits (16.0).
  const auto run = [](std::initializer_list<char32_t> cs) {
    std::string s;
    for (const char32_t c : cs) s += utf8(c);
    return s;
  };
  const std::vector<std::string> letters = {
      run({0x10D50, 0x10D51, 0x10D52}), run({0x10D70, 0x10D71, 0x10D50}), run({0x11F04, 0x11F05, 0x11F12}), run({0x1E4D0, 0x1E4D1, 0x1E4EB}),
      run({0x31350, 0x31351, 0x323AF}), run({0x2EBF0, 0x2EBF1, 0x2EE5D}), run({0xA7CB, 0xA7CC, 0xA7CD, 0xA7DA, 0xA7DB, 0xA7DC}),
      run({0x11380, 0x11381, 0x113D1}), run({0x11BC0, 0x11BC1}), run({0x105C0, 0x105C1})};
  const std::vector<std::string> numbers = {run({0x10D40, 0x10D41, 0x10D49}), run({0x11F50, 0x11F59}), run({0x1E4F0, 0x1E4F9}),
                                            run({0x1D2C0, 0x1D2C1, 0x1D2D3}), run({0x1CCF0, 0x1CCF9}), run({0x11BF0, 0x11BF9})};
  const Regex gpt2_like(R"( ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+)", "test");  // (GPT-2's pattern, without the contractions)
  const Regex digits(R"(\d+)", "test"), not_letters(R"([^\p{L}]+)", "test"), upper(R"(\p{Lu}+)", "test"), marks(R"([\p{L}\p{M}]+)", "test");
  for (const std::string& s : letters) {
    CAPTURE(s);
    CHECK(matched(gpt2_like, "ab " + s + "!") == std::vector<std::string>{"ab", " " + s, "!"});  // one piece, the space with it
    CHECK(matched(not_letters, "1" + s + "2") == std::vector<std::string>{"1", "2"});
  }
  for (const std::string& s : numbers) {
    CAPTURE(s);
    CHECK(matched(gpt2_like, "ab " + s + "!") == std::vector<std::string>{"ab", " " + s, "!"});
  }
  CHECK(matched(digits, "x" + numbers[0] + "7y") == std::vector<std::string>{numbers[0] + "7"});           // Garay digits are Nd
  CHECK(matched(upper, run({0x10D50, 0x10D51, 0x10D70, 0xA7DC})) == std::vector<std::string>{run({0x10D50, 0x10D51}), run({0xA7DC})});
  CHECK(matched(marks, "(" + run({0x11F04, 0x11F34, 0x11F36, 0x113B8, 0x113BB}) + ")").size() == 1);     // Kawi, Tulu-Tigalari vowel signs: M
  // Names as Oniguruma reads them (each checked with Hugging Face tokenizers 0.23.2): long and loose
  // names, \p{^X}, \P{X} inside a class; \s, \S, \d, \D inside a class; under (?i) a bare \p{Lu}
  // does not fold ("a" stays out) and a class does ("aB" one piece).
  CHECK(matched(Regex(R"(\p{Lowercase Letter}+)", "test"), "abC") == std::vector<std::string>{"ab"});
  CHECK(matched(Regex(R"(\p{^N}+)", "test"), "ab1") == std::vector<std::string>{"ab"});
  CHECK(matched(Regex(R"([^\P{L}]+)", "test"), "ab1" + letters[0]) == std::vector<std::string>{"ab", letters[0]});
  CHECK(matched(Regex(R"([^\S\n]+)", "test"), "a \t\nb") == std::vector<std::string>{" \t"});
  CHECK(matched(Regex(R"([\D]+)", "test"), "ab" + numbers[0] + "c") == std::vector<std::string>{"ab", "c"});
  CHECK(matched(Regex(R"((?i:\p{Lu}+)x)", "test"), "aBx") == std::vector<std::string>{"Bx"});
  CHECK(matched(Regex(R"((?i)[\p{Lu}]+)", "test"), "aB1") == std::vector<std::string>{"aB"});
  CHECK(matched(Regex(R"(\p{Cs}|a)", "test"), "ab") == std::vector<std::string>{"a"});
  // What headwise cannot spell is refused by name, never left to PCRE2's tables.
  CHECK_THROWS_WITH(Regex(R"(\p{Han}+)", "t.json"), Catch::Contains("t.json: the regex \\p{Han}+ names the property \\p{Han}") && Catch::Contains("Unicode 16.0.0"));
  CHECK_THROWS_WITH(Regex(R"(\p{L&})", "t.json"), Catch::Contains("names the property \\p{L&}"));
  CHECK_THROWS_WITH(Regex(R"(a\pL)", "t.json"), Catch::Contains("the regex a\\pL has \\p without braces"));
  CHECK_THROWS_WITH(Regex(R"([\p{L)", "t.json"), Catch::Contains("has \\p{ without its closing }"));
  // The Digits pre-tokenizer and added tokens' single_word read the same table.
  CHECK(headwise::text::is_numeric(0x10D40));            // Garay digit zero (16.0)
  CHECK(headwise::text::is_numeric(0x1D2C0));            // Kaktovik numeral zero (15.0, No)
  CHECK(headwise::text::is_word_character(0x10D50));     // Garay capital letter
  CHECK(headwise::text::is_word_character(0x11380));     // Tulu-Tigalari letter
  CHECK_FALSE(headwise::text::is_numeric(0x10D50));
  CHECK_FALSE(headwise::text::is_word_character(0x10D6E));  // Garay hyphen (Pd)
}

TEST_CASE("Regex: PCRE2's own property classes and the code points Unicode 16 added since its tables match what the code points of Unicode 16 match", "[tokenizer][regex]") {
  using headwise::text::Regex;
  using headwise::text::utf8;
  using headwise::text::detail::spelled_for_pcre2;
  namespace detail = headwise::text::detail;
  const auto has_property = [](const std::string& spelled) { return spelled.find("\\p{") != std::string::npos; };
  // 1. The spelling for each version of PCRE2's tables. 14.0.0 (Debian 12's PCRE2 10.42): PCRE2's
  // \p{L} or the letters added since (CJK Ext. I, U+2EBF0-2EE5D, among them), a few hundred bytes
  // where L's code points take ten thousand; negated, neither.
  const std::string letters = spelled_for_pcre2(R"(\p{L})", "test", "14.0.0");
  CHECK(letters.rfind("(?>[\\p{L}]|[\\x{", 0) == 0);
  CHECK(letters.find("\\x{2EBF0}-\\x{2EE5D}") != std::string::npos);
  CHECK(letters.size() < 1000);
  CHECK(spelled_for_pcre2(R"(\p{L})", "test", "").size() > 10000);
  const std::string not_letters = spelled_for_pcre2(R"(\P{L})", "test", "14.0.0");
  CHECK(not_letters.rfind("(?:(?![\\x{", 0) == 0);
  CHECK(not_letters.find("])[^\\p{L}])") != std::string::npos);
  CHECK(spelled_for_pcre2(R"([^\s\p{L}\p{N}]+)", "test", "14.0.0").find("])[^\\p{L}\\p{N}\\x{") != std::string::npos);
  CHECK(spelled_for_pcre2(R"(\d)", "test", "14.0.0").rfind("(?>[\\p{Nd}]|[\\x{", 0) == 0);
  CHECK(spelled_for_pcre2(R"((?i:\p{Lu}))", "test", "14.0.0").rfind("(?i:(?-i:(?>[\\p{Lu}]|[\\x{", 0) == 0);
  CHECK(spelled_for_pcre2(R"(\p{LC})", "test", "16.0.0") == "[\\p{Lu}\\p{Ll}\\p{Lt}]");  // (Unicode 16's tables: nothing added)
  // As code points: a set that lost code points since 14.0.0 (Mn: U+1171E became Mc; Cn and C:
  // every code point assigned since; M lost none, U+1171E stayed in it), \P{X} inside a class,
  // a class that folds case (PCRE2's \p{..} do not, Oniguruma's class does), another version.
  CHECK(has_property(spelled_for_pcre2(R"(\p{M})", "test", "14.0.0")));
  for (const std::string p : {R"(\p{Mn})", R"(\P{Mn})", R"([\p{Mn}a])", R"(\p{Cn})", R"(\p{C})", R"([\P{L}x])", R"([^\P{L}])", R"((?i)[\p{Lu}])"}) {
    CAPTURE(p);
    CHECK_FALSE(has_property(spelled_for_pcre2(p, "test", "14.0.0")));
  }
  for (const std::string version : {"", "13.0.0", "15.0.0", "15.1.0"}) CHECK_FALSE(has_property(spelled_for_pcre2(R"(\p{L}\d)", "test", version)));
  // 2. Both spellings on the code points of the rows of category_changes and their neighbours,
  // on U+0000-2FFF (Latin, Greek, Cyrillic, Armenian, Hebrew, Arabic, the Indic scripts, Thai,
  // Georgian, Hangul jamo, ...) and every 61st of the rest: the same matches, for the real
  // tokenizers' patterns and for every General_Category name in the forms a pattern uses. (This
  // PCRE2's own spelling against the code points: a spelling as code points, spelled again, is
  // itself.)
  const std::string version = detail::pcre2_unicode_version();
  CAPTURE(version);
  if (version != "14.0.0" && version != "16.0.0") WARN("PCRE2's tables are of Unicode " << version << ": Regex spells its classes as code points, so both spellings are one here");
  std::vector<char32_t> points;
  for (char32_t c = 0; c < 0x3000; ++c) points.push_back(c);
  for (char32_t c = 0x3000; c <= 0x10FFFF; c += 61) points.push_back(c);
  for (const detail::CategoryChange& k : detail::category_changes) {  // (a row of more than 64: every 61st, and its ends)
    const char32_t step = k.last - k.first > 64 ? 61 : 1;
    for (char32_t c = k.first - 1; c <= k.last + 1; c += step) points.push_back(c);
    points.push_back(k.last), points.push_back(k.last + 1);
  }
  std::string text;  // (a space after every 7th, for the patterns' " ?" and \s+(?!\S))
  for (const char32_t c : points)
    if (c < 0xD800 || c > 0xDFFF) text += utf8(c) + (c % 7 == 0 ? " " : "");
  std::vector<std::string> patterns = {
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",  // GPT-2
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",  // Llama 3.1
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",  // gpt-oss
      R"(\d+|\D+)", R"((?i)[\p{Lu}\d]+)", R"((?<=\p{L})\p{N}{1,3}|(?<![^\p{L}\s])\p{Lu}++|\p{Ll}*?\P{L})"};
  for (const std::string name : {"L", "LC", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No", "P", "Pc", "Pd", "Ps", "Pe",
                                 "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Cs", "Co", "Cn"})
    for (const std::string form : {"\\p{X}+", "\\P{X}+", "[^\\p{X}\\s]+", "[\\P{X}\\d]+", "(?i:\\p{X}+)"}) patterns.push_back(form.substr(0, form.find('X')) + name + form.substr(form.find('X') + 1));
  for (const std::string& p : patterns) {
    CAPTURE(p);
    const std::string points_only = spelled_for_pcre2(p, "test", "");
    REQUIRE(spelled_for_pcre2(points_only, "test", version) == points_only);
    const auto own = Regex(p, "test").find_matches(text), code_points = Regex(points_only, "test").find_matches(text);
    REQUIRE(own.size() == code_points.size());
    std::size_t differ = 0;
    for (std::size_t k = 0; k < own.size(); ++k) differ += own[k].begin != code_points[k].begin || own[k].end != code_points[k].end || own[k].matched != code_points[k].matched;
    CHECK(differ == 0);
  }
}

TEST_CASE("Unicode normalization puts a long run of marks in canonical order in n log n (Qwen3's NFC on 1 MiB of them)", "[tokenizer]") {
  using headwise::text::NormalForm;
  using headwise::text::normalize;
  // Expected forms from Python 3's unicodedata.normalize (Unicode 14; none of these changed since):
  // U+0301 has canonical combining class 230, U+0316 220, so U+0316 goes first and "a" then
  // composes with the first U+0301 (a mark of a lower class between them does not block it).
  CHECK(normalize("a\u0301\u0316", NormalForm::nfc) == "\u00e1\u0316");
  CHECK(normalize("a\u0301\u0316", NormalForm::nfd) == "a\u0316\u0301");
  CHECK(normalize("a\u0316\u0301\u0301", NormalForm::nfc) == "\u00e1\u0316\u0301");
  CHECK(normalize("\u0301\u0316\u0301\u0316\u0301\u0316", NormalForm::nfc) == "\u0316\u0316\u0316\u0301\u0301\u0301");
  CHECK(normalize("\u00c5\u0316", NormalForm::nfc) == "\u00c5\u0316");
  CHECK(normalize("\u00c5\u0316", NormalForm::nfd) == "A\u0316\u030a");
  CHECK(normalize("o\u0308\u0304", NormalForm::nfc) == "\u022b");
  CHECK(normalize("\u212b \u2126", NormalForm::nfc) == "\u00c5 \u03a9");
  CHECK(normalize("\u1100\u1161\u11a8 \uac00\u11a8", NormalForm::nfc) == "\uac01 \uac01");     // Hangul jamo compose
  CHECK_THROWS_WITH(normalize("e\u0301\xcc", NormalForm::nfc),  // (a truncated sequence: never read past the text)
                    Catch::Contains("Unicode normalization of text that is not valid UTF-8 (at byte 3)"));
  CHECK(normalize("\uac01", NormalForm::nfd) == "\u1100\u1161\u11a8");
  CHECK(normalize("\ufb01 e\u0301", NormalForm::nfkc) == "fi \u00e9");
  CHECK(normalize("\ufb01 \u00e9", NormalForm::nfkd) == "fi e\u0301");
  // 1 MiB: "a" and 262143 pairs U+0301 U+0316. utf8proc's own reordering swaps neighbours (O(n^2):
  // 16 s for 100 KB in the stress run, minutes for this); Python gives "á", the U+0316s, then the
  // U+0301s less one for the same text of 3 pairs: "\u00e1\u0316\u0316\u0316\u0301\u0301".
  CHECK(normalize("a\u0301\u0316\u0301\u0316\u0301\u0316", NormalForm::nfc) == "\u00e1\u0316\u0316\u0316\u0301\u0301");
  const std::size_t pairs = ((std::size_t(1) << 20) - 1) / 4;
  std::string text = "a", upper_marks, lower_marks;
  for (std::size_t k = 0; k < pairs; ++k) text += "\u0301\u0316", lower_marks += "\u0316", upper_marks += "\u0301";
  CHECK(normalize(text, NormalForm::nfc) == "\u00e1" + lower_marks + upper_marks.substr(2));
  CHECK(normalize(text, NormalForm::nfd) == "a" + lower_marks + upper_marks);
}

TEST_CASE("Regex: a piece's work is bounded by its size, so a backtracking regex is refused in time linear in the piece", "[tokenizer][regex][errors]") {
  using headwise::text::Regex;
  // (a|b)*c|. goes to the end of the piece and back from every position: 79.5 s on 100 KB under a
  // flat match limit of 10^8 a search; now the piece's budget, 1000000 + 32 a byte, is spent in ms.
  const Regex hostile("(a|b)*c|.", "hostile.json");
  CHECK_THROWS_WITH(hostile.find_matches(std::string(100000, 'a')),
                    Catch::Contains("hostile.json: the regex (a|b)*c|. failed on a piece of 100000 bytes: match limit exceeded") &&
                        Catch::Contains("budget of 4200000 steps"));
  const std::string short_piece = "aab" + std::string(20, 'a') + "c";
  CHECK(matched(hostile, short_piece) == std::vector<std::string>{short_piece});
  // Real tokenizers' regexes (as their tokenizer.json files write them) on 1 MB of English, of CJK,
  // and on 1 MB runs of one character (spaces, capitals, digits: 1-2 steps a byte) still match.
  const std::vector<std::string> patterns = {
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",  // Qwen3
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",  // Llama 3.1
      R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",  // DeepSeek-V3's three
      R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",  // gpt-oss
  };
  std::string english, cjk;
  while (english.size() < 1000000) english += "When Mary and John went to the store, John gave a drink to Mary. It's 1999;   she'll say \"THANKS\"!\n\n";
  while (cjk.size() < 1000000) cjk += "\u6211\u4eec\u5728\u4e1c\u4eac\u3002\u3072\u3089\u304c\u306a\u30ab\u30bf\u30ab\u30ca\uff0c\ud55c\uad6d\uc5b4 123 \u5e74\n";
  const std::vector<std::string> texts = {english, cjk, std::string(1000000, ' ') + "x", std::string(1000000, 'A'), std::string(1000000, '7')};
  for (const std::string& p : patterns) {
    const Regex r(p, "family.json");
    for (const std::string& t : texts) {
      CAPTURE(p, t.substr(0, 20));
      CHECK_NOTHROW(r.find_matches(t));  // (within the budget: no match limit reached)
    }
  }
}
