// Studying a whole model, side by side in one binary (random weights, float32; model/model_shape.hpp):
//   BM_ForwardBackward               a forward (run) and a whole-model backward (gradients: one
//                                    forward keeping what it needs, then every activation and
//                                    parameter gradient) of the next-token loss, alternated, and
//                                    their ratio; the bound: backward <= 3x forward, on 1
//                                    and 2 threads.
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
// --keep_freed_memory (before or among Google Benchmark's flags): glibc's malloc keeps freed memory.
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
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

// Each iteration runs the forward, then the backward, each timed: their ratio from the same
// minutes of this noisy machine.
void BM_ForwardBackward(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  const auto& m = small_model();
  const std::vector<Index> ids = random_ids(state.range(0), m.vocab_size(), 2);
  hm::RunOptions<float> forward;
  hm::GradientOptions backward;
  forward.threads = backward.threads = int(state.range(1));
  const auto metric = hm::Metric<float>::next_token_loss(ids);
  std::chrono::duration<double, std::milli> f{0}, b{0};
  for (auto _ : state) {
    const auto t0 = Clock::now();
    benchmark::DoNotOptimize(m.run(ids, forward).logits.data());
    const auto t1 = Clock::now();
    benchmark::DoNotOptimize(hm::gradients(m, ids, metric, backward).metric);
    f += t1 - t0, b += Clock::now() - t1;
  }
  state.counters["forward_ms"] = f.count() / double(state.iterations());
  state.counters["backward_ms"] = b.count() / double(state.iterations());
  state.counters["backward_over_forward"] = b / f;
}
BENCHMARK(BM_ForwardBackward)->ArgNames({"n", "threads"})->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMillisecond);

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

/// --keep_freed_memory: glibc's malloc keeps what is freed for the next allocations instead of
/// returning it to the system (M_TRIM_THRESHOLD and M_MMAP_THRESHOLD at their largest), as jemalloc
/// and tcmalloc do and as a training loop wants. By default glibc trims its heap and unmaps large
/// blocks on free, so each backward's activations and gradients are faulted in afresh.
bool keep_freed_memory(int& argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--keep_freed_memory") == 0) {
      std::copy(argv + i + 1, argv + argc + 1, argv + i);  // (argv[argc], null, too)
      --argc;
#ifdef __GLIBC__
      if (mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1 && mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1) return true;
      std::fprintf(stderr, "--keep_freed_memory: glibc's mallopt refused the thresholds\n");
      std::exit(1);
#else
      std::fprintf(stderr, "--keep_freed_memory sets glibc's malloc; this C library is not glibc\n");
      std::exit(1);
#endif
    }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const bool kept = keep_freed_memory(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("freed_memory", kept ? "kept (glibc M_TRIM_THRESHOLD, M_MMAP_THRESHOLD)" : "glibc's default");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
