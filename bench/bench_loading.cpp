// Loading the attention of every layer of a GPT-2-small-sized checkpoint (124 M parameters, 498 MB
// of float32, 12 layers of d_model 768), time and peak memory, three ways in one run, and a whole
// model of Llama-3.2-1B's shape stored in BF16 (2.47 GB):
//   BM_LoadLayersOneByOne    load_gpt2_attention(folder, L) for L = 0..11: maps and validates the
//                            file 12 times
//   BM_LoadAllLayers         load_gpt2_attention_layers(folder): maps it once, converts only the
//                            attention tensors (the contender)
//   BM_LoadAllLayersReadWhole the file read whole into memory, then the same loader on the bytes:
//                            what SafetensorsFile::open did before it mapped files (the baseline)
//   BM_LoadLlamaModelBf16    load_decoder_model<float> on the BF16 Llama: the MLPs, embedding and
//                            LM head kept in BF16 in the mapping (stored_matrix.hpp), the attention
//                            projections converted; peak_over_file is the peak's share of the file
//
// The benchmark writes the checkpoint itself (every tensor of GPT2LMHeadModel's layout, random
// weights) into --dir (default: a folder under the system's temporary directory) unless a file of
// the right size is already there. The file is then in the page cache: the figures are warm-cache
// ones. Peak memory is the process's peak resident set during the benchmark (VmHWM, reset before
// each one by writing 5 to /proc/self/clear_refs); it counts the file's pages that were touched.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "checkpoint_files.hpp"
#include "headwise/io/decoder_model.hpp"
#include "headwise/io/gpt2.hpp"

namespace {

namespace fs = std::filesystem;
using headwise::Index;

constexpr std::uint64_t d = 768, layers = 12, vocab = 50257, context = 1024;
std::string folder;  // set in main

/// GPT-2 small's tensors in GPT2LMHeadModel's names and shapes.
std::vector<std::pair<std::string, std::vector<std::uint64_t>>> gpt2_small_tensors() {
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> t = {{"transformer.wte.weight", {vocab, d}},
                                                                       {"transformer.wpe.weight", {context, d}}};
  for (std::uint64_t l = 0; l < layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      t.push_back({p + ln + ".weight", {d}});
      t.push_back({p + ln + ".bias", {d}});
    }
    t.push_back({p + "attn.c_attn.weight", {d, 3 * d}});
    t.push_back({p + "attn.c_attn.bias", {3 * d}});
    t.push_back({p + "attn.c_proj.weight", {d, d}});
    t.push_back({p + "attn.c_proj.bias", {d}});
    t.push_back({p + "mlp.c_fc.weight", {d, 4 * d}});
    t.push_back({p + "mlp.c_fc.bias", {4 * d}});
    t.push_back({p + "mlp.c_proj.weight", {4 * d, d}});
    t.push_back({p + "mlp.c_proj.bias", {d}});
  }
  t.push_back({"transformer.ln_f.weight", {d}});
  t.push_back({"transformer.ln_f.bias", {d}});
  return t;
}

/// Llama-3.2-1B's tensors in LlamaForCausalLM's names and shapes (d 2048, 16 layers, 32 heads and
/// 8 key/value heads of 64, MLP 8192, vocabulary 128256, the LM head tied to the embedding).
constexpr std::uint64_t llama_d = 2048, llama_layers = 16, llama_kv = 512, llama_inner = 8192, llama_vocab = 128256;
std::vector<std::pair<std::string, std::vector<std::uint64_t>>> llama_1b_tensors() {
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> t = {{"model.embed_tokens.weight", {llama_vocab, llama_d}}};
  for (std::uint64_t l = 0; l < llama_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) t.push_back({p + norm + ".weight", {llama_d}});
    t.push_back({p + "self_attn.q_proj.weight", {llama_d, llama_d}});
    t.push_back({p + "self_attn.k_proj.weight", {llama_kv, llama_d}});
    t.push_back({p + "self_attn.v_proj.weight", {llama_kv, llama_d}});
    t.push_back({p + "self_attn.o_proj.weight", {llama_d, llama_d}});
    t.push_back({p + "mlp.gate_proj.weight", {llama_inner, llama_d}});
    t.push_back({p + "mlp.up_proj.weight", {llama_inner, llama_d}});
    t.push_back({p + "mlp.down_proj.weight", {llama_d, llama_inner}});
  }
  t.push_back({"model.norm.weight", {llama_d}});
  return t;
}
constexpr const char* llama_1b_config =
    R"({"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "num_hidden_layers": 16, "intermediate_size": 8192, "vocab_size": 128256, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";

/// Writes model.safetensors (every tensor in F32 or BF16, small random weights) and config.json
/// into `dir`, streamed (the file is never all in memory), unless a model.safetensors of the
/// expected size is there already.
void write_checkpoint(const std::string& dir, const std::vector<std::pair<std::string, std::vector<std::uint64_t>>>& tensors,
                      bool bf16, const std::string& config) {
  const std::uint64_t size = bf16 ? 2 : 4;
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t bytes = 0;
  for (const auto& [name, shape] : tensors) {
    std::uint64_t count = 1;
    for (const auto s : shape) count *= s;
    header[name] = {{"dtype", bf16 ? "BF16" : "F32"}, {"shape", shape}, {"data_offsets", {bytes, bytes + size * count}}};
    bytes += size * count;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data 8-byte aligned, as safetensors writes it
  const std::uint64_t file_size = 8 + text.size() + bytes;
  fs::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  std::ofstream(dir + "/config.json") << config;
  std::error_code ec;
  if (fs::file_size(path, ec) == file_size) return;
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<float> block(1 << 20);
  std::vector<std::uint16_t> halves(block.size());
  std::uint32_t state = 12345;
  for (std::uint64_t left = bytes / size; left > 0;) {
    const std::uint64_t n = std::min<std::uint64_t>(left, block.size());
    for (std::uint64_t i = 0; i < n; ++i) {  // small random weights, as an initialised model has
      state = state * 1664525u + 1013904223u;
      block[i] = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.04f;
    }
    if (bf16) {
      for (std::uint64_t i = 0; i < n; ++i) {  // (truncated: any BF16 values do for loading)
        std::uint32_t bits;
        std::memcpy(&bits, &block[i], 4);
        halves[i] = static_cast<std::uint16_t>(bits >> 16);
      }
      out.write(reinterpret_cast<const char*>(halves.data()), static_cast<std::streamsize>(n * 2));
    } else {
      out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(n * 4));
    }
    left -= n;
  }
  if (!out) throw std::runtime_error("bench_loading: cannot write " + path);
}
std::string llama_folder;  // set in main

template <class Load>
void run(benchmark::State& state, Load load, const std::string& dir = folder) {
  const bool resettable = bench_files::reset_peak_rss();
  const double before = bench_files::peak_rss_mib();
  double peak = 0;
  for (auto _ : state) {
    auto loaded = load();
    benchmark::DoNotOptimize(&loaded);
    peak = std::max(peak, bench_files::peak_rss_mib());
  }
  const double file = double(fs::file_size(dir + "/model.safetensors"));
  state.counters["peak_RSS_MiB"] = resettable ? peak : -1;
  state.counters["file_MB"] = file / 1e6;
  state.counters["peak_over_file"] = resettable ? (peak - before) * 1048576.0 / file : -1;  // (the rise during loading)
}

void BM_LoadLayersOneByOne(benchmark::State& state) {
  run(state, [] {
    std::vector<headwise::MultiHeadAttention<float>> all;
    for (Index l = 0; l < Index(layers); ++l) all.push_back(headwise::io::load_gpt2_attention<float>(folder, l));
    return all;
  });
}

void BM_LoadAllLayers(benchmark::State& state) {
  run(state, [] { return headwise::io::load_gpt2_attention_layers<float>(folder); });
}

void BM_LoadAllLayersReadWhole(benchmark::State& state) {
  run(state, [] {
    std::ifstream in(folder + "/model.safetensors", std::ios::binary | std::ios::ate);
    std::vector<unsigned char> bytes(static_cast<std::size_t>(in.tellg()));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const headwise::io::SafetensorsFile file(std::move(bytes), "model.safetensors");
    return headwise::io::load_gpt2_attention_layers<float>(file,
                                                           headwise::io::read_gpt2_config(folder + "/config.json"));
  });
}

void BM_LoadLlamaModelBf16(benchmark::State& state) {
  write_checkpoint(llama_folder, llama_1b_tensors(), /*bf16=*/true, llama_1b_config);  // (2.47 GB, once)
  run(state, [] { return headwise::io::load_decoder_model<float>(llama_folder); }, llama_folder);
}

// The mapped loaders first: the read-whole baseline's 498 MB would otherwise raise the peak of
// what follows it in a process whose peak could not be reset.
BENCHMARK(BM_LoadAllLayers)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_LoadLayersOneByOne)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_LoadAllLayersReadWhole)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_LoadLlamaModelBf16)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
  folder = (fs::temp_directory_path() / "headwise-bench-gpt2-small").string();
  llama_folder = (fs::temp_directory_path() / "headwise-bench-llama-1b-bf16").string();
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dir=", 6) == 0) folder = argv[i] + 6;
    else argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  write_checkpoint(folder, gpt2_small_tensors(), /*bf16=*/false, R"({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12})");
  std::printf("checkpoint: %s/model.safetensors\n", folder.c_str());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
