// The memory's pace in the same run as what is compared with it: a STREAM-like triad
// a = b + s c over three arrays of 64 Mi floats each (768 MiB in all, past the caches) on
// headwise's threads, GBps counting the three arrays. A read-only stream (a decoding step's
// weights) can pass it, since the triad also writes.
#pragma once

#include <vector>

#include <benchmark/benchmark.h>

#include "headwise/detail/parallel.hpp"

inline void BM_StreamTriad(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const std::size_t n = std::size_t(1) << 26;
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  const float s = 3.0f;
  for (auto _ : state) {
    headwise::detail::parallel_region(threads, [&](int t) {  // headwise's threads, as the kernel's
      const auto part = static_cast<std::size_t>(t), parts = static_cast<std::size_t>(threads);
      for (std::size_t i = n * part / parts; i < n * (part + 1) / parts; ++i) a[i] = b[i] + s * c[i];
    });
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(3.0 * n * sizeof(float) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
