// Attention benchmarks at GPT-2 small shapes (d_model 768, 12 heads of 64, float32), with the
// Eigen GEMM ceiling in the same binary so that every figure can be read as a ratio to it.
//
// GFLOPs counters count useful causal FLOPs only:
//   core   2 · 2 · (n(n+1)/2) · d_model     (Q Kᵀ and A V over the visible pairs, all heads)
//   layer  the core + 2·n·d·3d (Q, K, V) + 2·n·d·d (W_O)
#include <array>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "headwise/headwise.hpp"
#include "headwise/interpret.hpp"
#include "headwise/stored_matrix.hpp"

namespace {

using headwise::Index;
using Mat = headwise::Matrix<float>;

constexpr Index d_model = 768, n_heads = 12, d_head = d_model / n_heads;

Mat random_matrix(Index rows, Index cols, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

double core_flops(Index n) { return 2.0 * 2.0 * (double(n) * double(n + 1) / 2.0) * double(d_model); }
double layer_flops(Index n) {
  return core_flops(n) + 2.0 * n * d_model * 3.0 * d_model + 2.0 * n * d_model * d_model;
}

void set_counters(benchmark::State& state, double flops, Index n) {
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

headwise::MultiHeadAttention<float> gpt2_small_layer() {
  const float scale = 1.0f / std::sqrt(float(d_model));
  headwise::MultiHeadWeights<float> w;
  w.w_q = random_matrix(d_model, d_model, 1, scale);
  w.w_k = random_matrix(d_model, d_model, 2, scale);
  w.w_v = random_matrix(d_model, d_model, 3, scale);
  w.w_o = random_matrix(d_model, d_model, 4, scale);
  w.b_q = w.b_k = w.b_v = w.b_o = headwise::RowVector<float>::Zero(d_model);
  return headwise::MultiHeadAttention<float>(n_heads, std::move(w));
}

// Threads for Eigen's own products and for the fused kernel, from the benchmark's argument.
int use_threads(benchmark::State& state, int arg) {
  const int threads = static_cast<int>(state.range(arg));
  Eigen::setNbThreads(threads);
  state.counters["threads"] = threads;
  return threads;
}

// The ceiling: Eigen's own GEMM at the layer's largest product, (2048 x 768) . (768 x 2304).
void BM_GemmCeiling(benchmark::State& state) {
  use_threads(state, 0);
  const Mat a = random_matrix(2048, 768, 5), b = random_matrix(768, 2304, 6);
  Mat c(2048, 2304);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * 2048 * 768 * 2304 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GemmCeiling)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// A prefill's weight product at Llama-3.2-1B's MLP: 512 tokens through gate / up (8192 x 2048),
// y = x Wᵀ with W kept as stored (type 0: F32, 1: BF16; stored_matrix.hpp), against Eigen's GEMM on
// the same shapes (the ceiling) and the deterministic tile product on [in, out] float weights (the
// path before). GFLOPs: 2 n in out.
constexpr Index prefill_n = 512, weight_in = 2048, weight_out = 8192;
constexpr double weight_flops = 2.0 * prefill_n * weight_in * weight_out;

void BM_WeightPrefill(benchmark::State& state) {
  const auto type = state.range(0) == 0 ? headwise::WeightType::f32 : headwise::WeightType::bf16;
  const int threads = use_threads(state, 1);
  const headwise::StoredMatrix w = headwise::StoredMatrix::from(random_matrix(weight_out, weight_in, 8), type);
  const Mat x = random_matrix(prefill_n, weight_in, 9);
  for (auto _ : state) benchmark::DoNotOptimize(headwise::times_transposed<float>(x, w, threads).data());
  state.counters["GFLOPs"] = benchmark::Counter(weight_flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(headwise::weight_type_name(type));
}
BENCHMARK(BM_WeightPrefill)->ArgNames({"type", "threads"})->ArgsProduct({{0, 1}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_WeightPrefillGemmCeiling(benchmark::State& state) {
  use_threads(state, 0);
  const Mat x = random_matrix(prefill_n, weight_in, 9), w = random_matrix(weight_in, weight_out, 8);
  Mat y(prefill_n, weight_out);
  for (auto _ : state) {
    y.noalias() = x * w;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(weight_flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_WeightPrefillGemmCeiling)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_WeightPrefillInOutFloat(benchmark::State& state) {
  const int threads = use_threads(state, 0);
  const Mat x = random_matrix(prefill_n, weight_in, 9), w = random_matrix(weight_in, weight_out, 8);
  Mat y;
  for (auto _ : state) {
    headwise::detail::product<float>(x, w, y, threads);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPs"] = benchmark::Counter(weight_flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_WeightPrefillInOutFloat)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The step-by-step core: every head's full (n, n) pattern, then A V.
void BM_CoreNaive(benchmark::State& state) {
  const Index n = state.range(0);
  Eigen::setNbThreads(1);
  const Mat qkv = random_matrix(n, 3 * d_model, 7);
  Mat z(n, d_model);
  for (auto _ : state) {
    for (Index h = 0; h < n_heads; ++h)
      z.middleCols(h * d_head, d_head) = headwise::attention(qkv.middleCols(h * d_head, d_head),
                                                             qkv.middleCols(d_model + h * d_head, d_head),
                                                             qkv.middleCols(2 * d_model + h * d_head, d_head)).z;
    benchmark::DoNotOptimize(z.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, core_flops(n), n);
}
BENCHMARK(BM_CoreNaive)->RangeMultiplier(2)->Range(128, 4096)->Unit(benchmark::kMillisecond);

// The step-by-step layer: one product for Q, K, V, the naive core, then W_O.
void BM_LayerNaive(benchmark::State& state) {
  const Index n = state.range(0);
  Eigen::setNbThreads(1);
  const auto mha = gpt2_small_layer();
  const Mat x = random_matrix(n, d_model, 8);
  headwise::AttentionOptions options;
  options.threads = 1;
  Mat out;
  for (auto _ : state) {
    out = mha.forward_step_by_step(x, options);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, layer_flops(n), n);
}
BENCHMARK(BM_LayerNaive)->RangeMultiplier(2)->Range(128, 4096)->Unit(benchmark::kMillisecond);

// Arguments (n, threads) for the fused benchmarks: n = 128 ... 8192 on 1 and on 2 threads.
void fused_args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (Index n : {128, 256, 512, 1024, 2048, 4096, 8192}) b->Args({n, threads});
}

// The fused core, once per iteration: every head of a (n, 3 d_model) QKV buffer, no (n, n) matrix.
void run_fused_core(benchmark::State& state, Index n, const headwise::AttentionOptions& options) {
  const Mat qkv = random_matrix(n, 3 * d_model, 7);
  headwise::AttentionCall call;
  call.heads = {n_heads, n_heads}, call.options = &options;
  for (auto _ : state) {
    auto r = headwise::attend<float>(qkv.leftCols(d_model), qkv.middleCols(d_model, d_model), qkv.rightCols(d_model), call);
    benchmark::DoNotOptimize(r.z.data());
    benchmark::ClobberMemory();
  }
}

void BM_CoreFused(benchmark::State& state) {
  const Index n = state.range(0);
  headwise::AttentionOptions options;
  options.threads = use_threads(state, 1);
  run_fused_core(state, n, options);
  set_counters(state, core_flops(n), n);
}
BENCHMARK(BM_CoreFused)->Apply(fused_args)->Unit(benchmark::kMillisecond);

// The fused core on keys and values already packed (a prefill into a cache, or a second call on
// the same keys): BM_CoreFused without the packing, to tell the kernel's scaling from the pack's.
void run_packed_core(benchmark::State& state, Index n, const headwise::AttentionOptions& options) {
  const Mat qkv = random_matrix(n, 3 * d_model, 7);
  headwise::PackedKeysValues<float> kv(n, n_heads, d_head, d_head);
  kv.append(qkv.middleCols(d_model, d_model), qkv.rightCols(d_model));
  headwise::AttentionCall call;
  call.heads = {n_heads, n_heads}, call.options = &options;
  for (auto _ : state) {
    auto r = headwise::attend<float>(qkv.leftCols(d_model), kv, call);
    benchmark::DoNotOptimize(r.z.data());
    benchmark::ClobberMemory();
  }
}

void BM_CorePacked(benchmark::State& state) {
  const Index n = state.range(0);
  headwise::AttentionOptions options;
  options.threads = use_threads(state, 1);
  run_packed_core(state, n, options);
  set_counters(state, core_flops(n), n);
}
BENCHMARK(BM_CorePacked)->Apply(fused_args)->Unit(benchmark::kMillisecond);

// The fused backward of the core (kernels/fused_attention_backward.hpp): dQ, dK, dV from the
// forward's output and logsumexp and a random dO. GFLOPs counts the five causal-triangle products
// a backward needs (2.5 x the forward's): the kernel computes seven (P and dS once per pass).
void BM_CoreBackward(benchmark::State& state) {
  const Index n = state.range(0);
  headwise::AttentionOptions options;
  options.threads = use_threads(state, 1);
  const Mat qkv = random_matrix(n, 3 * d_model, 7), d_o = random_matrix(n, d_model, 8);
  headwise::AttentionCall call;
  call.heads = {n_heads, n_heads}, call.options = &options, call.logsumexp = true;
  const auto q = qkv.leftCols(d_model), k = qkv.middleCols(d_model, d_model), v = qkv.rightCols(d_model);
  const headwise::AttentionResult<float> forward = headwise::attend<float>(q, k, v, call);
  for (auto _ : state) {
    const auto g = headwise::attend_backward<float>(q, k, v, forward, d_o, call);
    benchmark::DoNotOptimize(g.dq.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 2.5 * core_flops(n), n);
}
BENCHMARK(BM_CoreBackward)->ArgsProduct({{512, 1024, 2048, 4096}, {1, 2}})->Unit(benchmark::kMillisecond);

// The fused core with a sliding window of W = 256 keys (Mistral's rule), on keys and values
// already packed (packing, O(n d) per call, is BM_CoreFused's and the cache's business): the work is
// O(n W), so the time per token stays flat as n grows, where the full causal core's
// (BM_CorePacked) grows with n. GFLOPs counts the visible pairs only: Σ_i min(i + 1, W).
void BM_CoreWindow(benchmark::State& state) {
  const Index n = state.range(0), window = 256;
  headwise::AttentionOptions options;
  options.threads = use_threads(state, 1);
  options.window = window;
  run_packed_core(state, n, options);
  const double pairs = double(std::min(n, window)) * double(std::min(n, window) + 1) / 2.0 + double(std::max<Index>(n - window, 0)) * double(window);
  state.counters["GFLOPs"] = benchmark::Counter(4.0 * pairs * double(d_model) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["time_per_token"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CoreWindow)->ArgNames({"n", "threads"})->ArgsProduct({{2048, 4096, 8192, 16384}, {1}})->Unit(benchmark::kMillisecond);

// Where the fused core's time goes, phase by phase, on one thread: attend() on the packed keys with
// a public phase observer (headwise::FusedPhase) that reads the time at every phase change.
// Counters: each phase's share of the time in percent (query: scale and pack the query tile;
// scores: the Q Kᵀ tile product; softmax: row maxima, exp, sums, rescaling, P written for the
// product; values: P V; normalise: Z = acc / l, and the next job's set-up), and the GFLOP/s of the
// whole (timing costs ~1%). Issue 9's "before" kernel had a sixth phase, packing P; see
// bench/RESULTS.md.
struct PhaseClock {
  using clock = std::chrono::steady_clock;
  std::array<double, headwise::fused_phase_count> seconds{};
  int current = -1;
  clock::time_point since;
  void enter(headwise::FusedPhase phase) {
    const auto now = clock::now();
    if (current >= 0) seconds[static_cast<std::size_t>(current)] += std::chrono::duration<double>(now - since).count();
    current = static_cast<int>(phase), since = now;
  }
};

void BM_CorePhases(benchmark::State& state) {
  const Index n = state.range(0);
  const Mat qkv = random_matrix(n, 3 * d_model, 7);
  headwise::PackedKeysValues<float> kv(n, n_heads, d_head, d_head);
  kv.append(qkv.middleCols(d_model, d_model), qkv.rightCols(d_model));
  const Mat q = qkv.leftCols(d_model);
  headwise::AttentionOptions one_thread;
  one_thread.threads = 1;
  headwise::AttentionCall call;
  call.heads = {n_heads, n_heads};
  call.options = &one_thread;
  std::array<double, headwise::fused_phase_count> seconds{};
  std::vector<PhaseClock> clocks;
  for (auto _ : state) {
    const auto result = headwise::attend<float>(q, kv, call, clocks);
    PhaseClock last = clocks[0];
    last.enter(headwise::FusedPhase::query);  // closes the last phase
    for (std::size_t p = 0; p < seconds.size(); ++p) seconds[p] += last.seconds[p];
    benchmark::DoNotOptimize(result.z.data());
    benchmark::ClobberMemory();
  }
  double total = 0;
  for (double t : seconds) total += t;
  const std::array<const char*, headwise::fused_phase_count> names = {"query%", "scores%", "softmax%", "values%", "normalise%"};
  for (std::size_t p = 0; p < seconds.size(); ++p) state.counters[names[p]] = 100.0 * seconds[p] / total;
  set_counters(state, core_flops(n), n);
}
BENCHMARK(BM_CorePhases)->ArgName("n")->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

// The fused layer: one product for Q, K, V, the fused core, then W_O.
void BM_LayerFused(benchmark::State& state) {
  const Index n = state.range(0);
  headwise::AttentionOptions options;
  options.threads = use_threads(state, 1);
  const auto mha = gpt2_small_layer();
  const Mat x = random_matrix(n, d_model, 8);
  Mat out;
  for (auto _ : state) {
    out = mha.forward(x, options);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, layer_flops(n), n);
}
BENCHMARK(BM_LayerFused)->Apply(fused_args)->Unit(benchmark::kMillisecond);

// The fused layer kept for study (issue 5): per-row statistics computed in the kernel, and Q, the
// packed K and V, Z and the logsumexp kept: what it costs next to BM_LayerFused.
void BM_LayerInspect(benchmark::State& state) {
  const Index n = state.range(0);
  headwise::AttentionOptions options;
  options.threads = use_threads(state, 1);
  const auto mha = gpt2_small_layer();
  const Mat x = random_matrix(n, d_model, 8);
  for (auto _ : state) {
    auto run = headwise::interpret::inspect(mha, x, options);
    benchmark::DoNotOptimize(run.output.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, layer_flops(n), n);
}
BENCHMARK(BM_LayerInspect)->Args({512, 1})->Args({2048, 1})->Args({512, 2})->Args({2048, 2})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
