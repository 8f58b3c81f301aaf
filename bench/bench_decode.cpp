// Incremental decoding at GPT-2 small shapes (d_model 768, 12 heads of 64, float32): one decoding
// step, a single query against a KV cache of `context` tokens, next to a STREAM-like triad that
// measures the memory bandwidth in the same binary.
//
// A step must read every cached key and value once: 2 * context * d_model * 4 bytes. The counter
// `KV_GBps` is that amount over the step's time; `BM_StreamTriad`'s `GBps` is the floor it is
// compared with (bench/RESULTS.md). At context 4096 the cache is 24 MiB, inside this machine's
// 32 MiB L3: the DRAM triad is then a conservative floor.
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "headwise/headwise.hpp"

namespace {

using headwise::Index;
using Mat = headwise::Matrix<float>;
constexpr Index d_model = 768, n_heads = 12, d_head = d_model / n_heads;

Mat random_matrix(Index rows, Index cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

// a = b + s c over three arrays of 64 Mi floats each (768 MiB in all, far past the caches).
void BM_StreamTriad(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const std::size_t n = std::size_t(1) << 26;
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  const float s = 3.0f;
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(n); ++i) a[i] = b[i] + s * c[i];
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(3.0 * n * sizeof(float) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
BENCHMARK(BM_StreamTriad)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// One decoding step of the fused core: 1 query, 12 heads, against `context` cached tokens.
void BM_DecodeStep(benchmark::State& state) {
  const Index context = state.range(0);
  headwise::AttentionOptions options;
  options.threads = static_cast<int>(state.range(1));
  headwise::KvCache<float> cache(context, n_heads, d_head);
  cache.append(random_matrix(context, d_model, 1), random_matrix(context, d_model, 2));
  const Mat q = random_matrix(1, d_model, 3);
  Mat z(1, d_model);
  for (auto _ : state) {
    headwise::fused_attention_packed<float>(q, n_heads, cache.packed(), z, nullptr, options);
    benchmark::DoNotOptimize(z.data());
    benchmark::ClobberMemory();
  }
  const double bytes = 2.0 * context * d_model * sizeof(float);
  state.counters["KV_GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["KV_MiB"] = bytes / (1 << 20);
  state.counters["threads"] = static_cast<double>(options.threads);
}
BENCHMARK(BM_DecodeStep)
    ->ArgNames({"context", "threads"})
    ->ArgsProduct({{512, 1024, 2048, 4096, 8192}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
