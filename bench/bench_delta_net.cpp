// The gated delta rule (Qwen3-Next's Gated DeltaNet layers) at Qwen3-Next-80B-A3B's head shape
// (d_k = d_v = 128; 32 value heads a layer, 36 linear layers), side by side in one run:
//   BM_DeltaRuleRecurrent  recurrent_delta_rule, the rule token by token as written (Hugging
//                          Face's torch_recurrent_gated_delta_rule), one head over n tokens
//   BM_DeltaRuleChunked    DeltaRuleState::advance over the same n tokens in one call, in the
//                          layer's chunks (the bound: >= 2x the recurrence's tokens per second at
//                          n = 4096)
//   BM_DeltaNetDecodeStep  one token through every head of the 36 layers (1,152 states, 184 MB,
//                          past the caches), heads split over the threads as a layer splits them:
//                          the state bytes moved (S_0 and the open chunk's keys and δ read; at a
//                          chunk's end S_0 read and written again) per second, beside
//                          BM_StreamTriad's (the bound: >= 0.8 of it)
//   BM_StreamTriad         the memory's pace (stream_triad.hpp)
// The rule alone (the projections and the conv before it, the gated norm after it, are the model's
// products, measured by bench_model); flops counted as the recurrence's 7 d_k d_v per token.
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "headwise/delta_rule.hpp"
#include "headwise/gated_delta_net.hpp"
#include "headwise/detail/parallel.hpp"
#include "stream_triad.hpp"

namespace {

using headwise::Index;
using headwise::Matrix;
constexpr Index d_k = 128, d_v = 128, heads_per_layer = 32, linear_layers = 36;
const Index chunk = headwise::GatedDeltaNetShape{}.chunk;  // the layer's default

/// Random inputs for n tokens of one head: unit keys, scaled queries, β in (0, 1), g in (-0.3, 0].
struct Inputs {
  Matrix<float> q, k, v, beta, g;
  explicit Inputs(Index n, unsigned seed = 1) : q(n, d_k), k(n, d_k), v(n, d_v), beta(n, 1), g(n, 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (Index t = 0; t < n; ++t) {
      for (Index i = 0; i < d_k; ++i) q(t, i) = normal(rng) / 11.3f, k(t, i) = normal(rng);
      k.row(t).normalize();
      for (Index c = 0; c < d_v; ++c) v(t, c) = normal(rng);
      beta(t, 0) = unit(rng), g(t, 0) = -0.3f * unit(rng);
    }
  }
  headwise::DeltaRuleInputs<float> rows(Index first, Index n) const {
    return {{q.data() + first * d_k, d_k}, {k.data() + first * d_k, d_k}, {v.data() + first * d_v, d_v}, {beta.data() + first, 1}, {g.data() + first, 1}, n};
  }
};

void tokens_counters(benchmark::State& state, Index n) {
  state.counters["tokens_per_s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOPs"] = benchmark::Counter(7.0 * double(d_k * d_v) * double(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DeltaRuleRecurrent(benchmark::State& state) {
  const Index n = state.range(0);
  const Inputs in(n);
  for (auto _ : state) {
    Matrix<float> s = Matrix<float>::Zero(d_k, d_v);
    benchmark::DoNotOptimize(headwise::recurrent_delta_rule(in.rows(0, n), s).data());
  }
  tokens_counters(state, n);
}

void BM_DeltaRuleChunked(benchmark::State& state) {
  const Index n = state.range(0);
  const Inputs in(n);
  Matrix<float> o(n, d_v);
  headwise::DeltaRuleScratch<float> scratch;
  for (auto _ : state) {
    headwise::DeltaRuleState<float> head(d_k, d_v, chunk);
    head.advance(in.rows(0, n), o.data(), d_v, scratch);
    benchmark::DoNotOptimize(o.data());
  }
  tokens_counters(state, n);
}

void BM_DeltaNetDecodeStep(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const Index heads = heads_per_layer * linear_layers;
  std::vector<headwise::DeltaRuleState<float>> states(static_cast<std::size_t>(heads), headwise::DeltaRuleState<float>(d_k, d_v, chunk));
  const Inputs in(chunk, 2);
  std::vector<headwise::DeltaRuleScratch<float>> scratch(static_cast<std::size_t>(threads));
  Matrix<float> o(heads, d_v);
  double bytes = 0;
  Index position = 0;
  for (auto _ : state) {
    const Index open = states.front().open_rows();  // every head's the same
    for (Index layer = 0; layer < linear_layers; ++layer)
      headwise::detail::parallel_region(threads, [&](int part) {
        for (Index h = heads_per_layer * part / threads; h < heads_per_layer * (part + 1) / threads; ++h) {
          const Index at = layer * heads_per_layer + h;
          states[std::size_t(at)].advance(in.rows(position % chunk, 1), o.data() + at * d_v, d_v, scratch[std::size_t(part)]);
        }
      });
    bytes += double(heads) * 4.0 * double(d_k * d_v + (open + 1) * (d_k + d_v));
    if (open + 1 == chunk) bytes += double(heads) * 4.0 * double(2 * d_k * d_v);  // (the close: S_0 read and written)
    ++position;
    benchmark::DoNotOptimize(o.data());
  }
  state.counters["State_GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_DeltaRuleRecurrent)->ArgName("n")->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeltaRuleChunked)->ArgName("n")->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamTriad)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DeltaNetDecodeStep)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(256)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
