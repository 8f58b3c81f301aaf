// Studying a whole model, side by side in one binary (random weights, float32; model/model_shape.hpp):
//   BM_Forward / BM_Backward         a forward (run) and a whole-model backward (gradients: one
//                                    forward keeping what it needs, then every activation and
//                                    parameter gradient) of the next-token loss; the bound:
//                                    backward <= 3x forward, on 1 and 2 threads.
//   BM_Sweep/resumed, /full_reruns   an activation-patching sweep (hook_resid_pre at every layer and
//                                    position) resumed from the unpatched run's caches, and the same
//                                    sweep as full reruns with the same hook functions, on a
//                                    12-layer GPT-2-small-shaped model (d 768, 12 heads, MLP 3072;
//                                    the MLP gated SiLU); bound: resumed <= 0.6 of full.
//   BM_HeadStudy/n                   the O(n d) head study (score_model_heads, PatternSource::rows)
//                                    of a Llama-3.2-1B-shaped model (16 layers, d 2048, 32 query and
//                                    8 key/value heads of 64, MLP 8192, vocabulary 128256, tied),
//                                    its time and peak resident set; n = 32768 takes minutes: run it
//                                    alone (--benchmark_filter=BM_HeadStudy/32768).
#include <sys/resource.h>

#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "headwise/interpret/activation_patching.hpp"
#include "headwise/interpret/model_head_scores.hpp"
#include "headwise/model/backward.hpp"
#include "headwise/model/model_shape.hpp"

namespace {

using headwise::Index;
namespace hm = headwise::model;

std::vector<Index> random_ids(Index n, Index vocab, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<Index> draw(0, vocab - 1);
  std::vector<Index> ids(static_cast<std::size_t>(n));
  for (Index& t : ids) t = draw(rng);
  return ids;
}

const hm::DecoderModel<float>& small_model() {  // forward and backward: a Llama-shaped model of 8 layers
  static const hm::DecoderModel<float> m = [] {
    hm::ModelShape s;
    s.vocab = 8192, s.d_model = 512, s.layers = 8, s.heads = 8, s.kv_heads = 2, s.d_mlp = 1536;
    return hm::make_model<float>(s, 1);
  }();
  return m;
}

void BM_Forward(benchmark::State& state) {
  const auto& m = small_model();
  const std::vector<Index> ids = random_ids(state.range(0), m.vocab_size(), 2);
  hm::RunOptions<float> o;
  o.threads = int(state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(m.run(ids, o).logits.data());
}
void BM_Backward(benchmark::State& state) {
  const auto& m = small_model();
  const std::vector<Index> ids = random_ids(state.range(0), m.vocab_size(), 2);
  hm::GradientOptions o;
  o.threads = int(state.range(1));
  const auto metric = hm::Metric<float>::next_token_loss(ids);
  for (auto _ : state) benchmark::DoNotOptimize(hm::gradients(m, ids, metric, o).metric);
}
BENCHMARK(BM_Forward)->ArgNames({"n", "threads"})->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Backward)->ArgNames({"n", "threads"})->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMillisecond);

const hm::DecoderModel<float>& gpt2_small_shaped() {
  static const hm::DecoderModel<float> m = [] {
    hm::ModelShape s;
    s.vocab = 50257, s.d_model = 768, s.layers = 12, s.heads = 12, s.d_mlp = 3072, s.context = 1024, s.tied = true;
    return hm::make_model<float>(s, 3);
  }();
  return m;
}

void BM_Sweep(benchmark::State& state) {
  const auto& m = gpt2_small_shaped();
  const Index n = state.range(0);
  const std::vector<Index> clean = random_ids(n, m.vocab_size(), 4), corrupted = random_ids(n, m.vocab_size(), 5);
  const auto metric = hm::Metric<float>::logit_difference(11, 12);
  const headwise::interpret::ActivationPatching<float> patching(m, clean, corrupted, metric);
  const bool resumed = state.range(1) == 1;
  for (auto _ : state) {
    if (resumed) {
      benchmark::DoNotOptimize(patching.positions(headwise::interpret::Stream::resid_pre).values.data());
      continue;
    }
    double sum = 0;
    for (Index l = 0; l < m.n_layers(); ++l)
      for (Index p = 0; p < n; ++p) {
        const std::string hook = "blocks." + std::to_string(l) + ".hook_resid_pre";
        const headwise::Matrix<float>& from = patching.source_run().hooks.at(hook);
        hm::RunOptions<float> o;
        o.hook_functions[hook] = [&from, p](headwise::Matrix<float>& v, const hm::HookPoint& at) { v.row(p - at.first) = from.row(p); };
        sum += metric.value(m.run(clean, o).logits);
      }
    benchmark::DoNotOptimize(sum);
  }
  state.counters["runs"] = double(m.n_layers() * n);
}
BENCHMARK(BM_Sweep)->ArgNames({"n", "resumed"})->Args({32, 1})->Args({32, 0})->Unit(benchmark::kMillisecond)->Iterations(1);

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;
}

void BM_HeadStudy(benchmark::State& state) {
  hm::ModelShape s;
  s.vocab = 128256, s.d_model = 2048, s.layers = 16, s.heads = 32, s.kv_heads = 8, s.d_head = 64, s.d_mlp = 8192, s.tied = true,
  s.rope_theta = 500000.0;
  const hm::DecoderModel<float> m = hm::make_model<float>(s, 6);
  const double model_mib = peak_rss_mib();
  const std::vector<Index> ids = random_ids(state.range(0), m.vocab_size(), 7);
  double total = 0;
  for (auto _ : state) {
    const auto scores = headwise::interpret::score_model_heads(m, ids);
    total += scores.previous_token.sum();
  }
  benchmark::DoNotOptimize(total);
  state.counters["peak_RSS_MiB"] = peak_rss_mib();
  state.counters["model_MiB"] = model_mib;
  state.counters["nxn_patterns_GiB"] = double(s.layers * s.heads) * double(state.range(0)) * double(state.range(0)) * 4 / (1 << 30);
}
BENCHMARK(BM_HeadStudy)->ArgName("n")->Arg(2048)->Arg(32768)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
