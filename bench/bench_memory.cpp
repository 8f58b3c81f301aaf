// Peak memory of the fused layer at GPT-2 small shapes (d_model 768, 12 heads, float32), n = 16384
// tokens by default: one (n, n) float matrix alone would be 1 GiB; the fused path holds O(n d).
//
// Runs one forward in a fresh process and reports the peak resident set (getrusage). With
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

void BM_LayerFusedPeakMemory(benchmark::State& state) {
  const Index n = state.range(0), d_model = 768, n_heads = 12;
  std::mt19937 rng(1);
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
  const headwise::MultiHeadAttention<float> layer(n_heads, std::move(w));
  const Mat x = random(n, d_model);
  const double before = peak_rss_mib();
  for (auto _ : state) {
    Mat out = layer.forward(x);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["peak_RSS_MiB"] = peak_rss_mib();
  state.counters["input_MiB"] = double(x.size()) * sizeof(float) / (1 << 20);
  state.counters["before_MiB"] = before;
  state.counters["nxn_MiB"] = double(n) * double(n) * sizeof(float) / (1 << 20);
}
BENCHMARK(BM_LayerFusedPeakMemory)->Arg(16384)->Iterations(1)->Unit(benchmark::kSecond);

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
