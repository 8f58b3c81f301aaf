// gpt-oss-20b's shape with its experts in MXFP4, as released (random weights; its real config with
// 4 layers instead of 24: d 2880, 64 query and 8 key/value heads of 64, 32 experts of 2880, top 4,
// vocabulary 201088, untied LM head; every tensor but the experts in BF16), side by side in one run:
//   BM_LoadGptOss          load_decoder_model<float>: the experts kept in MXFP4 in the mapping, the
//                          rest as stored; peak_over_file is the peak resident set's rise over the
//                          file's size (the bound: <= 1.15)
//   BM_GptOssDecodeStep    a decoding step after a context of 128, on 1 and 2 threads: the stored
//                          bytes it reads (attention, routers, the chosen experts, the LM head) per
//                          second, beside BM_StreamTriad's (the bound: >= 0.8 of it); the experts
//                          widened (arithmetic 0) or by the stored arithmetic (1: int8 activations)
//   BM_GptOssExperts       one sparse block on one token (its 4 chosen experts, 53 MB of MXFP4):
//                          their bytes per second, the MXFP4 product alone, by either arithmetic
//   BM_StreamTriad         the memory's pace (stream_triad.hpp)
// The checkpoint (4.2 GB) is written once into --dir (default: under the system's temporary
// directory) and then read from the page cache: warm-cache figures.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "headwise/io/decoder_model.hpp"
#include "headwise/model/weight_arithmetic.hpp"
#include "checkpoint_files.hpp"
#include "stream_triad.hpp"

namespace {

namespace fs = std::filesystem;
using headwise::Index;
constexpr std::uint64_t d = 2880, layers = 4, heads = 64, kv_heads = 8, head_dim = 64, experts = 32, inner = 2880, vocab = 201088;
std::string folder;  // set in main

using bench_files::Tensor;

std::vector<Tensor> gpt_oss_tensors() {
  std::vector<Tensor> t = {{"model.embed_tokens.weight", "BF16", {vocab, d}}, {"lm_head.weight", "BF16", {vocab, d}},
                           {"model.norm.weight", "BF16", {d}}};
  for (std::uint64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) t.push_back({p + norm + ".weight", "BF16", {d}});
    for (const auto& [name, out] : {std::pair{"q_proj", heads * head_dim}, {"k_proj", kv_heads * head_dim}, {"v_proj", kv_heads * head_dim}}) {
      t.push_back({p + "self_attn." + name + ".weight", "BF16", {out, d}});
      t.push_back({p + "self_attn." + name + ".bias", "BF16", {out}});
    }
    t.push_back({p + "self_attn.o_proj.weight", "BF16", {d, heads * head_dim}});
    t.push_back({p + "self_attn.o_proj.bias", "BF16", {d}});
    t.push_back({p + "self_attn.sinks", "BF16", {heads}});
    t.push_back({p + "mlp.router.weight", "BF16", {experts, d}});
    t.push_back({p + "mlp.router.bias", "BF16", {experts}});
    t.push_back({p + "mlp.experts.gate_up_proj_bias", "BF16", {experts, 2 * inner}});
    t.push_back({p + "mlp.experts.down_proj_bias", "BF16", {experts, d}});
    t.push_back({p + "mlp.experts.gate_up_proj_blocks", "U8", {experts, 2 * inner, d / 32, 16}});
    t.push_back({p + "mlp.experts.gate_up_proj_scales", "U8", {experts, 2 * inner, d / 32}});
    t.push_back({p + "mlp.experts.down_proj_blocks", "U8", {experts, d, inner / 32, 16}});
    t.push_back({p + "mlp.experts.down_proj_scales", "U8", {experts, d, inner / 32}});
  }
  return t;
}

std::string gpt_oss_config() {
  nlohmann::json c = {{"architectures", {"GptOssForCausalLM"}}, {"attention_bias", true}, {"attention_dropout", 0.0},
                      {"eos_token_id", 200002}, {"experts_per_token", 4}, {"head_dim", head_dim}, {"hidden_act", "silu"},
                      {"hidden_size", d}, {"initial_context_length", 4096}, {"initializer_range", 0.02}, {"intermediate_size", inner},
                      {"max_position_embeddings", 131072}, {"model_type", "gpt_oss"}, {"num_attention_heads", heads},
                      {"num_experts_per_tok", 4}, {"num_hidden_layers", layers}, {"num_key_value_heads", kv_heads},
                      {"num_local_experts", experts}, {"output_router_logits", false}, {"pad_token_id", 199999},
                      {"rms_norm_eps", 1e-5}, {"rope_theta", 150000}, {"router_aux_loss_coef", 0.9}, {"sliding_window", 128},
                      {"swiglu_limit", 7.0}, {"tie_word_embeddings", false}, {"use_cache", true}, {"vocab_size", vocab}};
  c["layer_types"] = nlohmann::json::array();
  for (std::uint64_t l = 0; l < layers; ++l) c["layer_types"].push_back(l % 2 ? "full_attention" : "sliding_attention");
  c["rope_scaling"] = {{"beta_fast", 32.0}, {"beta_slow", 1.0}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
                       {"rope_type", "yarn"}, {"truncate", false}};
  c["quantization_config"] = {
      {"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
      {"quant_method", "mxfp4"}};
  return c.dump(2);
}

/// The checkpoint, once: BF16 weights of |w| in [0.0078, 0.0156) (a high byte of 0x3c or 0xbc),
/// random MXFP4 codes, scale bytes 118..121.
void write_checkpoint(const std::string& dir) {
  bench_files::write_checkpoint(dir, gpt_oss_tensors(), gpt_oss_config(), [](const Tensor& t, std::uint64_t i, unsigned char r) {
    if (t.dtype == "BF16") return i % 2 ? static_cast<unsigned char>((r & 0x80) | 0x3c) : r;
    const bool scales = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, "_scales") == 0;
    return scales ? static_cast<unsigned char>(118 + r % 4) : r;
  });
}

const headwise::model::DecoderModel<float>& model() {
  static const headwise::model::DecoderModel<float> m = [] {
    write_checkpoint(folder);
    return headwise::io::load_decoder_model<float>(folder);
  }();
  return m;
}

/// The same model (the same bytes) with its experts multiplied by the stored arithmetic (0: widened).
const headwise::model::DecoderModel<float>& model(std::int64_t arithmetic) {
  static const headwise::model::DecoderModel<float> stored = [] {
    auto m = model();
    headwise::model::set_weight_arithmetic(m, headwise::WeightType::mxfp4, headwise::WeightArithmetic::stored);
    return m;
  }();
  return arithmetic ? stored : model();
}

void BM_LoadGptOss(benchmark::State& state) {
  write_checkpoint(folder);
  const bool resettable = bench_files::reset_peak_rss();
  const double before = bench_files::peak_rss_mib();
  double peak = 0;
  for (auto _ : state) {
    auto loaded = headwise::io::load_decoder_model<float>(folder);
    benchmark::DoNotOptimize(&loaded);
    peak = std::max(peak, bench_files::peak_rss_mib());
  }
  const double file = double(fs::file_size(folder + "/model.safetensors"));
  state.counters["file_MB"] = file / 1e6;
  state.counters["peak_over_file"] = resettable ? (peak - before) * 1048576.0 / file : -1;
}

/// The stored bytes a decoding step reads: every attention projection, router and the LM head,
/// and top_k experts a layer (their mean size), and the embedding's row.
double step_bytes(const headwise::model::DecoderModel<float>& m) {
  double bytes = double(m.unembedding.bytes()) + double(m.embedding.bytes()) / double(m.vocab_size());
  for (const auto& b : m.blocks) {
    bytes += double(b.attention.stored_w_qkv().bytes() + b.attention.stored_w_o().bytes() + b.experts->router.bytes());
    const auto& e = b.experts->experts.front();
    bytes += double(b.experts->top_k) * double(e.w_up.bytes() + e.w_down.bytes());
  }
  return bytes;
}

void BM_GptOssDecodeStep(benchmark::State& state) {
  const auto& m = model(state.range(1));
  const int threads = static_cast<int>(state.range(0));
  auto caches = m.make_caches(128 + 1024);
  std::vector<Index> prompt(128);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = Index((i * 7919 + 13) % vocab);
  m.decode(prompt, caches, 2);
  Index next = 7;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.decode({next}, caches, threads).data());
    next = (next * 31 + 11) % Index(vocab);
  }
  state.counters["Stored_GBps"] = benchmark::Counter(step_bytes(m) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GptOssExperts(benchmark::State& state) {
  const auto& m = model(state.range(1));
  const int threads = static_cast<int>(state.range(0));
  const auto& moe = *m.blocks[1].experts;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  headwise::Matrix<float> x(1, Index(d));
  for (Index i = 0; i < x.size(); ++i) x(i) = normal(rng);
  for (auto _ : state) benchmark::DoNotOptimize(moe.forward(x, nullptr, threads).data());
  const auto& e = moe.experts.front();
  state.counters["MXFP4_GBps"] =
      benchmark::Counter(double(moe.top_k) * double(e.w_up.bytes() + e.w_down.bytes()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_LoadGptOss)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_StreamTriad)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GptOssExperts)->ArgNames({"threads", "arithmetic"})->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GptOssDecodeStep)
    ->ArgNames({"threads", "arithmetic"})
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(16)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  folder = (fs::temp_directory_path() / "headwise-bench-gpt-oss-20b-mxfp4").string();
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--dir=", 0) == 0) folder = a.substr(6);
    else argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
