// The arithmetic's physical limit in the same run as what is compared with it: a register-only
// loop of independent float32 multiply-adds (chains x one SIMD register each, enough chains to
// cover the FMA's latency on every port), on headwise's threads, GFLOPs counting 2 per lane. Not
// Eigen's GEMM, which loads and stores: a kernel bound by arithmetic is measured against this.
#pragma once

#include <utility>

#include <benchmark/benchmark.h>

#include "headwise/detail/parallel.hpp"
#include "headwise/detail/tile_product.hpp"

namespace headwise_bench {

/// `rounds` x `chains` multiply-adds acc = acc x b + c, the chains independent and in registers
/// (spelled out by a pack expansion, as the kernel's micro-tile is); returns their sum.
template <headwise::Index... i>
float fma_chains(std::integer_sequence<headwise::Index, i...>, long rounds, float seed) {
  using namespace Eigen::internal;
  using Packet = headwise::detail::TileShape<float>::Packet;
  float b_value = 0.999999f, c_value = 1e-7f;
  benchmark::DoNotOptimize(b_value), benchmark::DoNotOptimize(c_value);  // (not constants the compiler could fold)
  const Packet b = pset1<Packet>(b_value), c = pset1<Packet>(c_value);
  Packet acc[sizeof...(i)] = {pset1<Packet>(seed + float(i))...};
  for (long r = 0; r < rounds; ++r) ((acc[i] = pmadd(acc[i], b, c)), ...);  // (float multiply-adds do not reassociate)
  Packet total = pset1<Packet>(0.0f);
  ((total = padd(total, acc[i])), ...);
  return predux(total);
}

}  // namespace headwise_bench

/// The FMA peak on `threads` threads: 16 chains where there are 32 vector registers, 10 with 16.
inline void BM_FmaPeak(benchmark::State& state) {
  using headwise::detail::TileShape;
  constexpr headwise::Index chains = TileShape<float>::registers >= 32 ? 16 : 10;
  const int threads = static_cast<int>(state.range(0));
  const long rounds = 1L << 24;
  for (auto _ : state)
    headwise::detail::parallel_region(threads, [&](int t) {
      benchmark::DoNotOptimize(headwise_bench::fma_chains(std::make_integer_sequence<headwise::Index, chains>{}, rounds, float(t)));
    });
  const double flops = 2.0 * double(TileShape<float>::packet) * double(chains) * double(rounds) * double(threads);
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
