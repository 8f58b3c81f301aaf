// Peak memory of the fused layer at GPT-2 small shapes (d_model 768, 12 heads, float32), n = 16384
// tokens by default: one (n, n) float matrix alone would be 1 GiB; the fused path holds O(n d).
//
// BM_LayerFusedPeakMemory runs one forward, BM_LayerBackwardPeakMemory one forward that keeps what
// the backward needs and one backward (run each in its own process, --benchmark_filter=..., for
// its own peak); each reports the peak resident set (getrusage). With
// --max-peak-mib=M it exits 1 if the peak exceeds M MiB (CTest runs it so). Google Benchmark's
// flags are accepted too.
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
  const Index n = state.range(0), d_model = 768;
  std::mt19937 rng(1);
  const auto layer = random_layer(d_model, 12, rng);
  const Mat x = random_input(n, d_model, rng);
  const double before = peak_rss_mib();
  for (auto _ : state) {
    Mat out = layer.forward(x);
    benchmark::DoNotOptimize(out.data());
  }
  set_memory_counters(state, n, d_model, before);
}
BENCHMARK(BM_LayerFusedPeakMemory)->Arg(16384)->Iterations(1)->Unit(benchmark::kSecond);

// Forward (keeping Q, K, V, Z and the logsumexp: O(n d)) and the fused backward from a random dY.
void BM_LayerBackwardPeakMemory(benchmark::State& state) {
  const Index n = state.range(0), d_model = 768;
  std::mt19937 rng(1);
  const auto layer = random_layer(d_model, 12, rng);
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
BENCHMARK(BM_LayerBackwardPeakMemory)->Arg(16384)->Iterations(1)->Unit(benchmark::kSecond);

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
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const double peak = peak_rss_mib();
  std::printf("peak resident memory: %.1f MiB\n", peak);
  if (max_peak > 0 && peak > max_peak) {
    std::printf("FAILED: over the limit of %.0f MiB\n", max_peak);
    return 1;
  }
  return 0;
}
