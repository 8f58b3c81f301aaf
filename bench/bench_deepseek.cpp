// A DeepSeek-V3-shaped FP8 layer stack (random weights; its real config with 2 layers, both sparse,
// and 32 routed experts instead of 256: d 7168, 128 heads of latent attention (q_lora_rank 1536,
// kv_lora_rank 512, nope 128, rope 64, v 128), experts of 2048, top 8 of 8 groups keeping 4, one
// shared expert, vocabulary 129280; every linear weight F8_E4M3 with 128 x 128 block scales, the
// rest BF16, as DeepSeek-V3 ships), side by side in one run:
//   BM_LoadDeepSeek          load_decoder_model<float>: the MLPs and experts kept in FP8 in the mapping,
//                            the latent projections kept in FP8 (W_kv_b's blocks in float); peak_over_file as in
//                            bench_gpt_oss (the bound: <= 1.15)
//   BM_DeepSeekExperts       one sparse block on one token: its 8 chosen experts and the shared one
//                            (396 MB of FP8) per second, the FP8 product alone
//   BM_DeepSeekDecodeStep    a decoding step after 128 tokens, on 1 and 2 threads: the stored bytes
//                            it reads (latent projections as kept, routers, the chosen and shared
//                            experts, the LM head) per second
//   BM_StreamTriad           the memory's pace (stream_triad.hpp); the bound: >= 0.8 of it
// The checkpoint (7.0 GB) is written once into --dir (default: under the system's temporary
// directory) and then read from the page cache: warm-cache figures.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "checkpoint_files.hpp"
#include "headwise/io/decoder_model.hpp"
#include "stream_triad.hpp"

namespace {

namespace fs = std::filesystem;
using bench_files::Tensor;
using headwise::Index;
constexpr std::uint64_t d = 7168, layers = 2, heads = 128, q_rank = 1536, kv_rank = 512, nope = 128, rope = 64, v_dim = 128,
                        experts = 32, inner = 2048, vocab = 129280;
constexpr float weight_scale = 1.0f / 16384;  // every block's scale: FP8 codes of up to 448 give |w| < 0.03
std::string folder;  // set in main

/// An FP8 linear weight [out, in] and its block scales.
void fp8_linear(std::vector<Tensor>& t, const std::string& name, std::uint64_t out, std::uint64_t in) {
  t.push_back({name + ".weight", "F8_E4M3", {out, in}});
  t.push_back({name + ".weight_scale_inv", "F32", {(out + 127) / 128, (in + 127) / 128}});
}

std::vector<Tensor> deepseek_tensors() {
  std::vector<Tensor> t = {{"model.embed_tokens.weight", "BF16", {vocab, d}}, {"lm_head.weight", "BF16", {vocab, d}},
                           {"model.norm.weight", "BF16", {d}}};
  for (std::uint64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) t.push_back({p + norm + ".weight", "BF16", {d}});
    fp8_linear(t, p + "self_attn.q_a_proj", q_rank, d);
    t.push_back({p + "self_attn.q_a_layernorm.weight", "BF16", {q_rank}});
    fp8_linear(t, p + "self_attn.q_b_proj", heads * (nope + rope), q_rank);
    fp8_linear(t, p + "self_attn.kv_a_proj_with_mqa", kv_rank + rope, d);
    t.push_back({p + "self_attn.kv_a_layernorm.weight", "BF16", {kv_rank}});
    fp8_linear(t, p + "self_attn.kv_b_proj", heads * (nope + v_dim), kv_rank);
    fp8_linear(t, p + "self_attn.o_proj", d, heads * v_dim);
    t.push_back({p + "mlp.gate.weight", "BF16", {experts, d}});
    t.push_back({p + "mlp.gate.e_score_correction_bias", "F32", {experts}});
    for (std::uint64_t e = 0; e <= experts; ++e) {
      const std::string x = p + (e < experts ? "mlp.experts." + std::to_string(e) + "." : std::string("mlp.shared_experts."));
      fp8_linear(t, x + "gate_proj", inner, d);
      fp8_linear(t, x + "up_proj", inner, d);
      fp8_linear(t, x + "down_proj", d, inner);
    }
  }
  return t;
}

std::string deepseek_config() {
  nlohmann::json c = {{"architectures", {"DeepseekV3ForCausalLM"}}, {"attention_bias", false}, {"attention_dropout", 0.0},
                      {"bos_token_id", 0}, {"eos_token_id", 1}, {"first_k_dense_replace", 0}, {"hidden_act", "silu"},
                      {"hidden_size", d}, {"initializer_range", 0.02}, {"intermediate_size", 18432}, {"kv_lora_rank", kv_rank},
                      {"max_position_embeddings", 163840}, {"model_type", "deepseek_v3"}, {"moe_intermediate_size", inner},
                      {"moe_layer_freq", 1}, {"n_group", 8}, {"n_routed_experts", experts}, {"n_shared_experts", 1},
                      {"norm_topk_prob", true}, {"num_attention_heads", heads}, {"num_experts_per_tok", 8},
                      {"num_hidden_layers", layers}, {"num_key_value_heads", heads}, {"num_nextn_predict_layers", 1},
                      {"q_lora_rank", q_rank}, {"qk_nope_head_dim", nope}, {"qk_rope_head_dim", rope}, {"rms_norm_eps", 1e-6},
                      {"rope_theta", 10000}, {"routed_scaling_factor", 2.5}, {"scoring_func", "sigmoid"}, {"tie_word_embeddings", false},
                      {"topk_group", 4}, {"topk_method", "noaux_tc"}, {"torch_dtype", "bfloat16"}, {"use_cache", true},
                      {"v_head_dim", v_dim}, {"vocab_size", vocab}};
  c["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  c["rope_scaling"] = {{"beta_fast", 32}, {"beta_slow", 1}, {"factor", 40}, {"mscale", 1.0}, {"mscale_all_dim", 1.0},
                       {"original_max_position_embeddings", 4096}, {"type", "yarn"}};
  return c.dump(2);
}

/// The checkpoint, once: FP8 codes anything but NaN (0x7f, 0xff), every scale weight_scale, BF16
/// weights of |w| in [0.0078, 0.0156), F32 biases 0.
void write_checkpoint(const std::string& dir) {
  unsigned char scale[4];
  std::memcpy(scale, &weight_scale, 4);
  bench_files::write_checkpoint(dir, deepseek_tensors(), deepseek_config(), [&](const Tensor& t, std::uint64_t i, unsigned char r) {
    if (t.dtype == "F8_E4M3") return (r & 0x7f) == 0x7f ? static_cast<unsigned char>(r ^ 1) : r;
    if (t.dtype == "F32") return t.name.find("scale_inv") != std::string::npos ? scale[i % 4] : static_cast<unsigned char>(0);
    return i % 2 ? static_cast<unsigned char>((r & 0x80) | 0x3c) : r;
  });
}

const headwise::model::DecoderModel<float>& model() {
  static const headwise::model::DecoderModel<float> m = [] {
    write_checkpoint(folder);
    return headwise::io::load_decoder_model<float>(folder);
  }();
  return m;
}

void BM_LoadDeepSeek(benchmark::State& state) {
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

/// A dense MLP's stored bytes.
double mlp_bytes(const headwise::model::FeedForward<float>& f) { return double(f.w_gate.bytes() + f.w_up.bytes() + f.w_down.bytes()); }

/// The stored bytes a decoding step reads: the latent projections as kept (W_q_a, W_q_b, W_kv_a and
/// W_o in FP8, a byte an entry; W_kv_b's absorbed blocks in float), the routers, the chosen and
/// shared experts (their mean size), the LM head and the embedding's row.
double step_bytes(const headwise::model::DecoderModel<float>& m) {
  double bytes = double(m.unembedding.bytes()) + double(m.embedding.bytes()) / double(m.vocab_size());
  const double latent = double(q_rank * d + heads * (nope + rope) * q_rank + (kv_rank + rope) * d + d * heads * v_dim) +
                        4.0 * double(heads * (nope + v_dim) * kv_rank);
  for (const auto& b : m.blocks) {
    const auto& moe = *b.experts;
    bytes += latent + double(moe.router.bytes()) + double(moe.top_k) * mlp_bytes(moe.experts.front()) + mlp_bytes(*moe.shared_expert);
  }
  return bytes;
}

void BM_DeepSeekDecodeStep(benchmark::State& state) {
  const auto& m = model();
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

void BM_DeepSeekExperts(benchmark::State& state) {
  const auto& m = model();
  const int threads = static_cast<int>(state.range(0));
  const auto& moe = *m.blocks[1].experts;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  headwise::Matrix<float> x(1, Index(d));
  for (Index i = 0; i < x.size(); ++i) x(i) = normal(rng);
  for (auto _ : state) benchmark::DoNotOptimize(moe.forward(x, nullptr, threads).data());
  const double bytes = double(moe.top_k) * mlp_bytes(moe.experts.front()) + mlp_bytes(*moe.shared_expert);
  state.counters["FP8_GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_LoadDeepSeek)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_StreamTriad)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DeepSeekExperts)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DeepSeekDecodeStep)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(8)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  folder = (fs::temp_directory_path() / "headwise-bench-deepseek-v3-fp8").string();
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
