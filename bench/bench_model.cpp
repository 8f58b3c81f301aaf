// A whole decoder model at GPT-2 small's shapes (d_model 768, 12 heads of 64, 12 layers, MLP 3072,
// vocabulary 50257), float32, random weights built here (no checkpoint): the prefill of n tokens,
// a decoding step after a context of n, and the 12 attention layers alone on the same input, in one
// binary, so that the share spent in attention is a ratio of two figures taken side by side. The
// decoding step also with every weight matrix stored in BF16 (stored_matrix.hpp). And a model of
// Llama-3.2-1B's shape (d 2048, 16 layers, 32 heads and 8 key/value heads of 64, MLP 8192,
// vocabulary 128256, tied), F32 and BF16, on 1 and 2 threads: the prefill of 512 tokens beside
// Eigen's GEMM at the MLP's shape, and a decoding step at contexts 512 and 4096 (and at 4096 a
// BF16 model with BF16 KV caches), its weight bytes per second beside the triad
// (stream_triad.hpp), in the same run.
//
// GFLOPs counted as the useful work: per token 2 x (the layer's weights: 4 d² attention
// projections + 2 d 4d MLP) x layers + 2 d vocab for the LM head, plus the causal attention
// 2 x 2 x (n (n + 1) / 2) x d per layer; a decoding step at context n: its one token's share.
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "headwise/model/decoder_model.hpp"
#include "stream_triad.hpp"

namespace {

using headwise::Index;
using Mat = headwise::Matrix<float>;
using Row = headwise::RowVector<float>;
constexpr Index d = 768, heads = 12, layers = 12, inner = 3072, vocab = 50257;

Mat random_matrix(Index rows, Index cols, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

/// The model, every weight matrix stored as `type` (F32 or BF16: stored_matrix.hpp).
headwise::model::DecoderModel<float> make_gpt2_small_shaped(headwise::WeightType type) {
  {
    std::mt19937 rng(1);
    headwise::model::DecoderModel<float> m;
    m.embedding = headwise::StoredMatrix::from(random_matrix(vocab, d, rng, 0.02f), type);
    m.positions = random_matrix(1024, d, rng, 0.01f);
    using Norm = headwise::model::Norm<float>;
    Norm ln;
    ln.kind = Norm::Kind::layer_norm, ln.eps = 1e-5, ln.weight = Row::Ones(d), ln.bias = Row::Zero(d);
    for (Index l = 0; l < layers; ++l) {
      headwise::MultiHeadWeights<float> w;
      w.w_q = random_matrix(d, d, rng, 0.02f), w.w_k = random_matrix(d, d, rng, 0.02f), w.w_v = random_matrix(d, d, rng, 0.02f);
      w.w_o = random_matrix(d, d, rng, 0.02f);
      w.kept_as = type;
      headwise::model::FeedForward<float> mlp;
      mlp.activation = headwise::model::Activation::gelu_tanh;
      mlp.w_up = headwise::StoredMatrix::from(random_matrix(inner, d, rng, 0.02f), type);  // [out, in]
      mlp.w_down = headwise::StoredMatrix::from(random_matrix(d, inner, rng, 0.02f), type);
      m.blocks.push_back({ln, headwise::MultiHeadAttention<float>(heads, std::move(w)), std::nullopt, ln, std::move(mlp), std::nullopt,
                          std::nullopt, std::nullopt});
    }
    m.final_norm = ln;
    m.unembedding = m.embedding;  // tied, as GPT-2's
    return m;
  }
}

const headwise::model::DecoderModel<float>& gpt2_small_shaped(Index weights = 0) {
  static const headwise::model::DecoderModel<float> f32 = make_gpt2_small_shaped(headwise::WeightType::f32);
  static const headwise::model::DecoderModel<float> bf16 = make_gpt2_small_shaped(headwise::WeightType::bf16);
  return weights == 0 ? f32 : bf16;
}

std::vector<Index> tokens(Index n) {
  std::vector<Index> ids(static_cast<std::size_t>(n));
  for (Index t = 0; t < n; ++t) ids[static_cast<std::size_t>(t)] = (t * 7919) % vocab;
  return ids;
}

double model_flops(Index n) {
  const double per_token = 2.0 * double(layers) * (4.0 * d * d + 2.0 * d * inner) + 2.0 * d * vocab;
  return per_token * double(n) + 4.0 * double(layers) * double(d) * double(n) * double(n + 1) / 2.0;
}

void BM_ModelPrefill(benchmark::State& state) {
  const auto& model = gpt2_small_shaped();
  const std::vector<Index> ids = tokens(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(model.logits(ids).data());
  state.counters["tokens/s"] = benchmark::Counter(double(ids.size()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOPs"] = benchmark::Counter(model_flops(state.range(0)) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ModelPrefill)->ArgName("n")->Arg(128)->Arg(1024)->Unit(benchmark::kMillisecond);

// The attention layers alone (projections, fused attention, W_O) on the same n tokens.
void BM_ModelAttentionOnly(benchmark::State& state) {
  const auto& model = gpt2_small_shaped();
  std::mt19937 rng(2);
  const Mat x = random_matrix(state.range(0), d, rng, 1.0f);
  for (auto _ : state)
    for (const auto& b : model.blocks) benchmark::DoNotOptimize(b.attention.forward(x).data());
}
BENCHMARK(BM_ModelAttentionOnly)->ArgName("n")->Arg(128)->Arg(1024)->Unit(benchmark::kMillisecond);

// One decoding step after a prompt of n tokens (the caches refilled outside the timing); weights
// 0: F32, 1: BF16.
void BM_ModelDecodeStep(benchmark::State& state) {
  const auto& model = gpt2_small_shaped(state.range(1));
  const Index n = state.range(0);
  const std::vector<Index> prompt = tokens(n);
  for (auto _ : state) {
    state.PauseTiming();
    auto caches = model.make_caches(n + 1);
    model.decode(prompt, caches);
    state.ResumeTiming();
    benchmark::DoNotOptimize(model.decode({42}, caches).data());
  }
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOPs"] = benchmark::Counter((model_flops(n + 1) - model_flops(n)) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ModelDecodeStep)->ArgNames({"context", "weights"})->Args({1023, 0})->Args({1023, 1})->Unit(benchmark::kMillisecond)->Iterations(5);

// ---- Llama-3.2-1B's shape ----
constexpr Index l_d = 2048, l_heads = 32, l_kv = 8, l_head_dim = 64, l_layers = 16, l_inner = 8192, l_vocab = 128256, l_context = 512;

/// The model with random weights, every matrix (the attention's projections, the MLPs, the
/// embedding and LM head) stored as `type`, RoPE as Llama's (theta 500000), its KV caches as
/// `cache` stores them.
/// FP8 block scales as a checkpoint's quantizer makes them: each 128 x 128 block's largest |w|
/// over 448 (E4M3's largest value).
headwise::BlockScales fp8_scales_of(const Mat& out_in) {
  headwise::BlockScales s{Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>((out_in.rows() + 127) / 128, (out_in.cols() + 127) / 128), 128, 128};
  for (Index i = 0; i < s.grid.rows(); ++i)
    for (Index j = 0; j < s.grid.cols(); ++j)
      s.grid(i, j) = double(out_in.block(128 * i, 128 * j, std::min<Index>(128, out_in.rows() - 128 * i), std::min<Index>(128, out_in.cols() - 128 * j))
                                .cwiseAbs().maxCoeff() / 448.0f);
  return s;
}

/// The model with random weights, every matrix (the attention's projections, the MLPs, the
/// embedding and LM head) stored as `type`, RoPE as Llama's (theta 500000), its KV caches as
/// `cache` stores them. FP8 (E4M3) as DeepSeek's and Qwen's FP8 checkpoints: every layer's
/// matrices in 128 x 128 blocks, the embedding and LM head in BF16.
headwise::model::DecoderModel<float> make_llama_1b_shaped(headwise::WeightType type, headwise::KvStorage cache) {
  std::mt19937 rng(3);
  const auto keep = [&](const Mat& m) {
    return headwise::is_fp8(type) ? headwise::StoredMatrix::from(m, type, fp8_scales_of(m)) : headwise::StoredMatrix::from(m, type);
  };
  const auto stored = [&](Index rows, Index cols) { return keep(random_matrix(rows, cols, rng, 0.02f)); };
  headwise::model::DecoderModel<float> m;
  m.embedding = headwise::StoredMatrix::from(random_matrix(l_vocab, l_d, rng, 0.02f), headwise::is_fp8(type) ? headwise::WeightType::bf16 : type);
  using Norm = headwise::model::Norm<float>;
  Norm rms;
  rms.kind = Norm::Kind::rms, rms.eps = 1e-5, rms.weight = Row::Ones(l_d);
  headwise::LayerConfig config;
  headwise::RopeConfig rope;
  rope.theta = 500000.0;
  config.rope = rope;
  config.kv_storage = cache;
  for (Index l = 0; l < l_layers; ++l) {
    headwise::MultiHeadWeights<float> w;
    w.w_q = random_matrix(l_d, l_heads * l_head_dim, rng, 0.02f), w.w_k = random_matrix(l_d, l_kv * l_head_dim, rng, 0.02f);
    w.w_v = random_matrix(l_d, l_kv * l_head_dim, rng, 0.02f), w.w_o = random_matrix(l_heads * l_head_dim, l_d, rng, 0.02f);
    w.kept_as = type;
    if (headwise::is_fp8(type))
      w.fp8_scales = headwise::MultiHeadWeights<float>::Fp8Scales{fp8_scales_of(w.w_q.transpose()), fp8_scales_of(w.w_k.transpose()),
                                                                   fp8_scales_of(w.w_v.transpose()), fp8_scales_of(w.w_o.transpose()), {}};
    headwise::model::FeedForward<float> mlp;
    mlp.w_gate = stored(l_inner, l_d), mlp.w_up = stored(l_inner, l_d), mlp.w_down = stored(l_d, l_inner);
    m.blocks.push_back({rms, headwise::MultiHeadAttention<float>(l_heads, std::move(w), config), std::nullopt, rms, std::move(mlp),
                        std::nullopt, std::nullopt, std::nullopt});
  }
  m.final_norm = rms;
  m.unembedding = m.embedding;
  return m;
}

/// The bytes of weights a decoding step reads: every block's projections and MLP, and the LM head
/// (the embedding's one row is not counted).
double llama_step_weight_bytes(const headwise::model::DecoderModel<float>& m) {
  double bytes = double(m.unembedding.bytes());
  for (const auto& b : m.blocks)
    bytes += double(b.mlp.w_gate.bytes() + b.mlp.w_up.bytes() + b.mlp.w_down.bytes() + b.attention.stored_w_qkv().bytes() +
                    b.attention.stored_w_o().bytes());
  return bytes;
}

/// The model of `weights` (0: F32, 1: BF16, 2: BF16 with BF16 caches, 3: FP8), one at a time:
/// the last one asked for is kept, the one before freed first (an F32 model is 5.5 GB).
const headwise::model::DecoderModel<float>& llama_1b_shaped(Index weights) {
  static std::optional<std::pair<Index, headwise::model::DecoderModel<float>>> kept;
  if (!kept || kept->first != weights) {
    kept.reset();
    kept.emplace(weights, make_llama_1b_shaped(weights == 0   ? headwise::WeightType::f32
                                               : weights == 3 ? headwise::WeightType::f8_e4m3
                                                              : headwise::WeightType::bf16,
                                               weights == 2 ? headwise::KvStorage::bf16 : headwise::KvStorage::as_computed));
  }
  return kept->second;
}

/// The useful FLOPs of tokens at positions [first, first + n): per token 2 x the weights it is
/// multiplied by (the projections, the MLP, the LM head), and per layer 2 x 2 x (its keys) x
/// heads x head_dim for Q Kᵀ and A V.
double llama_flops(Index first, Index n) {
  const double q = double(l_heads * l_head_dim), kv = double(l_kv * l_head_dim);
  const double weights = double(l_layers) * (double(l_d) * (2.0 * q + 2.0 * kv) + 3.0 * double(l_d) * double(l_inner)) + double(l_d) * double(l_vocab);
  const double keys = double(n) * double(first) + double(n) * double(n + 1) / 2.0;
  return 2.0 * weights * double(n) + 4.0 * double(l_layers) * q * keys;
}

/// weights 0: F32, 1: BF16, 3: FP8 (E4M3, 128 x 128 blocks); threads; logits 0: for every token, 1:
/// for the last only (RunOptions::logits_to_keep, what generation needs). The prefill of 512 tokens.
void BM_LlamaPrefill(benchmark::State& state) {
  const auto& model = llama_1b_shaped(state.range(0));
  headwise::model::RunOptions<float> options;
  options.threads = static_cast<int>(state.range(1));
  options.logits_to_keep = state.range(2);
  const std::vector<Index> ids = tokens(l_context);
  for (auto _ : state) benchmark::DoNotOptimize(model.run(ids, options).logits.data());
  // (the LM head's FLOPs only for the tokens whose logits are made)
  const double head = 2.0 * double(l_d) * double(l_vocab) * double(l_context - (options.logits_to_keep ? options.logits_to_keep : l_context));
  state.counters["tokens/s"] = benchmark::Counter(double(l_context), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOPs"] = benchmark::Counter((llama_flops(0, l_context) - head) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(state.range(0) == 0 ? "F32" : state.range(0) == 3 ? "FP8" : "BF16") +
                 (options.logits_to_keep ? ", the last token's logits" : ", every token's logits"));
}

/// Eigen's float GEMM at the prefill's MLP product (512 x 2048 by 2048 x 8192): the ceiling.
void BM_LlamaGemmCeiling(benchmark::State& state) {
  const int eigen_threads = Eigen::nbThreads();
  Eigen::setNbThreads(static_cast<int>(state.range(0)));
  std::mt19937 rng(4);
  const Mat x = random_matrix(l_context, l_d, rng, 1.0f), w = random_matrix(l_d, l_inner, rng, 0.02f);
  Mat y(l_context, l_inner);
  for (auto _ : state) {
    y.noalias() = x * w;
    benchmark::DoNotOptimize(y.data());
  }
  Eigen::setNbThreads(eigen_threads);
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * l_context * l_d * l_inner * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// weights 0: F32, 1: BF16, 2: BF16 with BF16 KV caches, 3: FP8 (E4M3); the context (the prompt decoded once
/// before the timing; each iteration adds one token); threads.
void BM_LlamaDecodeStep(benchmark::State& state) {
  const Index weights = state.range(0), context = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const auto& model = llama_1b_shaped(weights);
  auto caches = model.make_caches(context + 64);
  model.decode(tokens(context), caches, 2);  // (the prompt on both cores: the same bits as on one)
  Index next = 7;
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.decode({next}, caches, threads).data());
    next = (next * 31 + 11) % l_vocab;
  }
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["Weight_GBps"] = benchmark::Counter(llama_step_weight_bytes(model) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(weights == 0 ? "F32" : weights == 1 ? "BF16" : weights == 2 ? "BF16, BF16 cache" : "FP8");
}
BENCHMARK(BM_StreamTriad)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LlamaGemmCeiling)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
// (Each type's runs together: the model is built once for them, llama_1b_shaped keeping one.)
void llama_prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"weights", "threads", "logits"});
  for (const Index weights : {0, 1, 3})
    for (const Index threads : {1, 2})
      for (const Index logits : {0, 1}) b->Args({weights, threads, logits});
}
void llama_decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"weights", "context", "threads"});
  for (const Index weights : {0, 1, 3, 2})
    for (const Index context : {512, 4096})
      for (const Index threads : {1, 2})
        if (weights != 2 || context == 4096) b->Args({weights, context, threads});
}
BENCHMARK(BM_LlamaPrefill)->Apply(llama_prefill_args)->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime();
BENCHMARK(BM_LlamaDecodeStep)->Apply(llama_decode_args)->Unit(benchmark::kMillisecond)->Iterations(16)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
