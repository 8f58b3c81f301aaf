// Peak memory of the fused layer at n = 16384 tokens, float32: one (n, n) float matrix alone would
// be 1 GiB; the fused path holds O(n d). Two shapes: GPT-2 small's (d_model 768, 12 heads: the
// figure bench/RESULTS.md reports) and one head of 64 (what CTest checks: the same n, so the same
// 1 GiB an (n, n) matrix would take, in 0.2 s where GPT-2 small's takes seconds).
//
// BM_LayerFusedPeakMemory runs one forward, BM_LayerBackwardPeakMemory one forward that keeps what
// the backward needs and one backward (run each in its own process, --benchmark_filter=..., for
// its own peak); each reports the peak resident set (getrusage). With --max-peak-mib=M it exits 1
// if the peak exceeds M MiB, or if no benchmark ran (CTest runs it so). Google Benchmark's flags
// are accepted too.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include <benchmark/benchmark.h>

#include "headwise/headwise.hpp"

namespace {

using headwise::Index;
using Mat = headwise::Matrix<float>;

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

headwise::MultiHeadAttention<float> random_layer(Index d_model, Index n_heads, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f / 28.0f);
  auto random = [&](Index rows, Index cols) {
    Mat m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
  };
  headwise::MultiHeadWeights<float> w;
  w.w_q = random(d_model, d_model);
  w.w_k = random(d_model, d_model);
  w.w_v = random(d_model, d_model);
  w.w_o = random(d_model, d_model);
  return headwise::MultiHeadAttention<float>(n_heads, std::move(w));
}

Mat random_input(Index n, Index d_model, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Mat x(n, d_model);
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = normal(rng);
  return x;
}

void set_memory_counters(benchmark::State& state, Index n, Index d_model, double before) {
  state.counters["peak_RSS_MiB"] = peak_rss_mib();
  state.counters["input_MiB"] = double(n * d_model) * sizeof(float) / (1 << 20);
  state.counters["before_MiB"] = before;
  state.counters["nxn_MiB"] = double(n) * double(n) * sizeof(float) / (1 << 20);
}

void BM_LayerFusedPeakMemory(benchmark::State& state) {
  const Index n = state.range(0), d_model = state.range(1), n_heads = state.range(2);
  std::mt19937 rng(1);
  const auto layer = random_layer(d_model, n_heads, rng);
  const Mat x = random_input(n, d_model, rng);
  const double before = peak_rss_mib();
  for (auto _ : state) {
    Mat out = layer.forward(x);
    benchmark::DoNotOptimize(out.data());
  }
  set_memory_counters(state, n, d_model, before);
}
// n, d_model, n_heads: GPT-2 small's shapes, and one head of 64.
BENCHMARK(BM_LayerFusedPeakMemory)->ArgNames({"n", "d_model", "heads"})->Args({16384, 768, 12})->Args({16384, 64, 1})
    ->Iterations(1)->Unit(benchmark::kSecond);

// Forward (keeping Q, K, V, Z and the logsumexp: O(n d)) and the fused backward from a random dY.
void BM_LayerBackwardPeakMemory(benchmark::State& state) {
  const Index n = state.range(0), d_model = state.range(1), n_heads = state.range(2);
  std::mt19937 rng(1);
  const auto layer = random_layer(d_model, n_heads, rng);
  const Mat x = random_input(n, d_model, rng), dy = random_input(n, d_model, rng);
  const double before = peak_rss_mib();
  for (auto _ : state) {
    headwise::ForwardRecord<float> record;
    Mat out = headwise::forward_for_backward(layer, x, record);
    benchmark::DoNotOptimize(out.data());
    const headwise::MultiHeadGradients<float> grads = headwise::layer_backward(layer, x, dy, {}, &record);
    benchmark::DoNotOptimize(grads.dx.data());
  }
  set_memory_counters(state, n, d_model, before);
}
BENCHMARK(BM_LayerBackwardPeakMemory)->ArgNames({"n", "d_model", "heads"})->Args({16384, 768, 12})->Args({16384, 64, 1})
    ->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  double max_peak = 0;
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--max-peak-mib=", 15) == 0) max_peak = std::atof(argv[i] + 15);
    else argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (max_peak > 0 && ran == 0) {  // a bound on nothing: the filter matched no benchmark
    std::printf("FAILED: --max-peak-mib given, but no benchmark ran (check --benchmark_filter)\n");
    return 1;
  }
  const double peak = peak_rss_mib();
  std::printf("peak resident memory: %.1f MiB\n", peak);
  if (max_peak > 0 && peak > max_peak) {
    std::printf("FAILED: over the limit of %.0f MiB\n", max_peak);
    return 1;
  }
  return 0;
}
