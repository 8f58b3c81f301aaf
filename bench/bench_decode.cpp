// Incremental decoding, float32: one decoding step, a single query against a KV cache of `context`
// tokens, at GPT-2 small's shapes (12 heads of 64) and at Llama 3 8B's (32 query heads, 8 key/value
// heads of 128), split by key and not, next to a STREAM-like triad that measures the memory
// bandwidth in the same binary.
//
// A step must read every cached key and value once: 2 * context * n_kv_heads * d_head * 4 bytes.
// The counter `KV_GBps` is that amount over the step's time; `BM_StreamTriad`'s `GBps` is the
// floor it is compared with (bench/RESULTS.md). Up to context 4096 the GPT-2 cache (24 MiB) fits a 32 MiB L3:
// the DRAM triad is then a conservative floor. And DeepSeek-V3's multi-head latent attention: the
// absorbed step over the latent cache against the expanded step over per-head keys and values. And
// serving: a batch of sequences of mixed lengths in a paged cache, in one call against one call
// each, and a shared prompt attended once against by every sequence. And a decoding step's weight
// products: one token through a matrix of Llama-3.2-1B's MLP kept as stored (F32, BF16, F16:
// stored_matrix.hpp), its bytes per second against the triad, beside the float [in, out] product
// the model used before.
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "headwise/headwise.hpp"
#include "headwise/stored_matrix.hpp"
#include "fma_peak.hpp"
#include "stream_triad.hpp"

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

BENCHMARK(BM_StreamTriad)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FmaPeak)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// One decoding step of the fused core: 1 query of n_heads heads against `context` cached tokens of
// n_kv_heads heads of width d_head. split 1: the keys split into shards attended in parallel and
// merged (split-key decoding, the default); split 0: the same shards one after the other inside one
// job per head (the schedule before split-key decoding; the same bits). KV_GBps: the bytes of K and
// V a step must read, over its time.
void decode_step(benchmark::State& state, Index n_heads_, Index n_kv_heads, Index d) {
  const Index context = state.range(0);
  headwise::AttentionOptions options;
  options.threads = static_cast<int>(state.range(1));
  headwise::KvCache<float> cache(context, n_kv_heads, d);
  for (Index t = 0; t < context; t += 4096) {  // in blocks: the random fill stays small
    const Index m = std::min<Index>(4096, context - t);
    cache.append(random_matrix(m, n_kv_heads * d, unsigned(t) + 1), random_matrix(m, n_kv_heads * d, unsigned(t) + 2));
  }
  const Mat q = random_matrix(1, n_heads_ * d, 3);
  headwise::AttentionCall call;
  call.heads = {n_heads_, n_kv_heads}, call.options = &options;
  call.tiles.split_keys = state.range(2) != 0;
  for (auto _ : state) {
    auto r = headwise::attend<float>(q, cache.packed(), call);
    benchmark::DoNotOptimize(r.z.data());
    benchmark::ClobberMemory();
  }
  const double bytes = 2.0 * double(context) * double(n_kv_heads * d) * sizeof(float);
  state.counters["KV_GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["KV_MiB"] = bytes / (1 << 20);
}

// GPT-2 small: 12 heads of 64, each with its own keys and values.
void BM_DecodeStep(benchmark::State& state) { decode_step(state, n_heads, n_heads, d_head); }
BENCHMARK(BM_DecodeStep)
    ->ArgNames({"context", "threads", "split"})
    ->ArgsProduct({{1024, 4096, 16384, 65536}, {1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Grouped-query attention at Llama 3 8B's shapes: 32 query heads of 128 sharing 8 key/value heads.
void BM_DecodeStepGqa(benchmark::State& state) { decode_step(state, 32, 8, 128); }
BENCHMARK(BM_DecodeStepGqa)
    ->ArgNames({"context", "threads", "split"})
    ->ArgsProduct({{4096, 16384, 65536}, {1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// A decoding step at Llama 3 8B's shapes (32 query heads, 8 key/value heads of 128) with the
// keys and values stored as computed (float32), BF16, F16 or int8 (one scale per token and head):
// the bytes a step reads shrink to a half or a quarter (int8's scales: 8 bytes a token and head
// more), widened to float in registers as the kernel loads them (arithmetic 0), or multiplied in
// the stored precision (arithmetic 1: KvArithmetic::stored): int8 as integers (the query rounded
// to int8), BF16 by pairs, F16 by F16 chains (only where the build has AVX512-FP16).
#if defined(HEADWISE_F16_FMA)
constexpr bool f16_products_in_registers = true;
#else
constexpr bool f16_products_in_registers = false;
#endif
/// A cache of `context` random tokens at Llama 3 8B's key/value heads (8 of 128), stored as asked.
headwise::PackedKeysValues<float> stored_cache(Index context, headwise::KvStorage storage, headwise::KvArithmetic arithmetic) {
  constexpr Index G = 8, d = 128;
  headwise::PackedKeysValues<float> cache(context, G, d, d, {headwise::ValueStorage::own, storage, arithmetic});
  const Index rows = std::min<Index>(4096, context);
  const Mat keys = random_matrix(rows, G * d, 1), values = random_matrix(rows, G * d, 2);
  for (Index t = 0; t < context; t += rows) {
    const Index m = std::min(rows, context - t);
    cache.append(keys.topRows(m), values.topRows(m), 2);
  }
  return cache;
}

void BM_DecodeStepStorage(benchmark::State& state) {
  const Index context = state.range(0), G = 8, H = 32, d = 128;
  const auto storage = static_cast<headwise::KvStorage>(state.range(2));
  const auto arithmetic = static_cast<headwise::KvArithmetic>(state.range(3));
  headwise::AttentionOptions options;
  options.threads = static_cast<int>(state.range(1));
  const headwise::PackedKeysValues<float> cache = stored_cache(context, storage, arithmetic);
  const Mat q = random_matrix(1, H * d, 3) * 0.1f;
  headwise::AttentionCall call;
  call.heads = {H, G}, call.options = &options;
  for (auto _ : state) {
    auto r = headwise::attend<float>(q, cache, call);
    benchmark::DoNotOptimize(r.z.data());
    benchmark::ClobberMemory();
  }
  const double element = storage == headwise::KvStorage::as_computed ? 4.0 : storage == headwise::KvStorage::int8 ? 1.0 : 2.0;
  const double bytes = 2.0 * double(context) * double(G) * (double(d) * element + (storage == headwise::KvStorage::int8 ? 4.0 : 0.0));
  state.counters["KV_GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["KV_MiB"] = bytes / (1 << 20);
  state.SetLabel(std::string(headwise::storage_name(storage)) + ", " + headwise::arithmetic_name(arithmetic));
}
BENCHMARK(BM_DecodeStepStorage)
    ->ArgNames({"context", "threads", "storage", "arithmetic"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (const Index context : {4096, 32768, 131072})
        for (const Index threads : {1, 2})
          for (const Index storage : {0, 1, 2, 3})  // float32, BF16, F16, int8: widened, and BF16 and int8 stored
            for (const Index arithmetic : {0, 1})  // (F16 stored where the build has AVX512-FP16: elsewhere it is emulated)
              if (arithmetic == 0 || storage == 1 || storage == 3 || (storage == 2 && f16_products_in_registers))
                b->Args({context, threads, storage, arithmetic});
    })
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// A chunk of 256 queries (a chunked prefill's) against the same stores of 4096 tokens, one thread:
// the kernel's tall slivers over stored keys and values, where a decoding step has one short one.
void BM_ChunkStorage(benchmark::State& state) {
  const Index H = 32, d = 128, chunk = 256;
  const auto storage = static_cast<headwise::KvStorage>(state.range(0));
  const auto arithmetic = static_cast<headwise::KvArithmetic>(state.range(1));
  headwise::AttentionOptions options;
  options.threads = 1;
  const headwise::PackedKeysValues<float> cache = stored_cache(4096, storage, arithmetic);
  const Mat q = random_matrix(chunk, H * d, 3) * 0.1f;
  headwise::AttentionCall call;
  call.heads = {H, 8}, call.options = &options;
  for (auto _ : state) {
    auto r = headwise::attend<float>(q, cache, call);
    benchmark::DoNotOptimize(r.z.data());
  }
  state.SetLabel(std::string(headwise::storage_name(storage)) + ", " + headwise::arithmetic_name(arithmetic));
}
BENCHMARK(BM_ChunkStorage)
    ->ArgNames({"storage", "arithmetic"})
    ->Args({0, 0})->Args({1, 0})->Args({1, 1})->Args({3, 0})->Args({3, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Multi-head latent attention at DeepSeek-V3's shapes: 128 heads; kv_lora_rank 512, qk_rope 64,
// qk_nope 128, v_head 128. A block of 4096 random tokens, appended again and again, fills a cache of
// `context` tokens (a bandwidth benchmark: what is read matters, not what it says).
constexpr Index mla_heads = 128, mla_rank = 512, mla_rope = 64, mla_nope = 128, mla_v = 128;

// The absorbed step: the 128 heads' absorbed queries (q_nope W_UK | RoPE(q_pe), 576 wide) folded
// into rows over one latent key/value head (keys [c_kv | RoPE(k_pe)], values c_kv stored once in
// the keys): the cache, context x 576 floats, read once for all heads. W_UK and W_UV (applied
// before and after, 2 x 128 x 128 x 512 floats) are the layer's weights, read by any form.
void BM_DecodeStepLatent(benchmark::State& state) {
  const Index context = state.range(0), width = mla_rank + mla_rope;
  const bool int8 = state.range(3) != 0;  // int8 under the stored arithmetic, or float32
  headwise::AttentionOptions options;
  options.threads = static_cast<int>(state.range(1));
  options.query_rows_per_position = mla_heads;
  const headwise::StoreFormat format{headwise::ValueStorage::key_prefix, int8 ? headwise::KvStorage::int8 : headwise::KvStorage::as_computed,
                                     int8 ? headwise::KvArithmetic::stored : headwise::KvArithmetic::widened};
  headwise::PackedKeysValues<float> latent(context, 1, width, mla_rank, format);
  const Mat block = random_matrix(std::min<Index>(4096, context), width, 1);
  for (Index t = 0; t < context; t += block.rows()) latent.append(block.topRows(std::min(block.rows(), context - t)));
  const Mat q = random_matrix(mla_heads, width, 3) * 0.05f;
  headwise::AttentionCall call;
  call.options = &options;
  if (state.range(2)) call.tiles.key_shard = state.range(2);
  for (auto _ : state) {
    auto r = headwise::attend<float>(q, latent, call);
    benchmark::DoNotOptimize(r.z.data());
    benchmark::ClobberMemory();
  }
  const double bytes = double(context) * (int8 ? double(width) + 4.0 : double(width) * sizeof(float));
  state.counters["KV_GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["KV_MiB"] = bytes / (1 << 20);
  state.SetLabel(int8 ? "int8, stored" : "as computed, widened");
  // Useful FLOPs: every head's scores over every key (576 wide) and its mix of the values (512).
  const double flops = 2.0 * double(mla_heads) * double(context) * double(width + mla_rank);
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeStepLatent)
    ->ArgNames({"context", "threads", "shard", "int8"})
    // 262144: 576 MiB, past a 300 MiB LLC; 2048: the layer's shards (0: the kernel's 1024); int8: the latent in int8 under
    // the stored arithmetic (its useful FLOPs counted as the float32 step's)
    ->ArgsProduct({{4096, 16384, 65536, 262144}, {1, 2}, {0, 2048}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The baseline for the absorbed step's arithmetic: Eigen's GEMM on the same products, S = Q Kᵀ
// (128 x 576 by 576 x context) and Z = S V (128 x context by context x 512), V the first 512
// columns of K, nothing fused. The absorbed step does 121 FLOPs per byte of cache: it is bounded
// by arithmetic, not by bandwidth, so its figure is this ratio.
void BM_LatentStepGemmBaseline(benchmark::State& state) {
  const Index context = state.range(0), width = mla_rank + mla_rope;
  Eigen::setNbThreads(static_cast<int>(state.range(1)));
  const Mat k = random_matrix(context, width, 1), q = random_matrix(mla_heads, width, 3);
  Mat s(mla_heads, context), z(mla_heads, mla_rank);
  for (auto _ : state) {
    s.noalias() = q * k.transpose();
    z.noalias() = s * k.leftCols(mla_rank);
    benchmark::DoNotOptimize(z.data());
    benchmark::ClobberMemory();
  }
  Eigen::setNbThreads(0);
  const double flops = 2.0 * double(mla_heads) * double(context) * double(width + mla_rank);
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LatentStepGemmBaseline)
    ->ArgNames({"context", "threads"})
    ->ArgsProduct({{4096, 65536}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The expanded step (Hugging Face's form, a cache of the per-head keys and values): 128 key/value
// heads, keys 192 wide (nope 128 + rope 64), values 128: context x 128 x 320 floats a step.
void BM_DecodeStepLatentExpanded(benchmark::State& state) {
  const Index context = state.range(0), d_k = mla_nope + mla_rope;
  headwise::AttentionOptions options;
  options.threads = static_cast<int>(state.range(1));
  headwise::PackedKeysValues<float> cache(context, mla_heads, d_k, mla_v);
  const Index rows = std::min<Index>(1024, context);
  const Mat keys = random_matrix(rows, mla_heads * d_k, 1), values = random_matrix(rows, mla_heads * mla_v, 2);
  for (Index t = 0; t < context; t += rows) {
    const Index m = std::min(rows, context - t);
    cache.append(keys.topRows(m), values.topRows(m), 2);
  }
  const Mat q = random_matrix(1, mla_heads * d_k, 3) * 0.05f;
  headwise::AttentionCall call;
  call.heads = {mla_heads, mla_heads};
  call.options = &options;
  for (auto _ : state) {
    auto r = headwise::attend<float>(q, cache, call);
    benchmark::DoNotOptimize(r.z.data());
    benchmark::ClobberMemory();
  }
  const double bytes = double(context) * double(mla_heads) * double(d_k + mla_v) * sizeof(float);
  state.counters["KV_GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["KV_MiB"] = bytes / (1 << 20);
}
BENCHMARK(BM_DecodeStepLatentExpanded)
    ->ArgNames({"context", "threads"})
    ->ArgsProduct({{4096, 16384, 65536}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Serving (paged_kv_cache.hpp, attend on an AttentionBatch) at Llama 3 8B's shapes: a pool of
// blocks of 64 tokens holding many sequences of mixed lengths.
constexpr Index serve_heads = 32, serve_kv_heads = 8, serve_d = 128, serve_block = 64;

/// A pool of `count` sequences of lengths drawn in [16, longest) (the same on every run) and each one's query.
struct ServingBatch {
  ServingBatch(Index count, Index longest)
      : pool(shape(count * (longest / serve_block + 1))), keys(random_matrix(longest, serve_kv_heads * serve_d, 1)),
        values(random_matrix(longest, serve_kv_heads * serve_d, 2)) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<Index> lengths(16, longest - 1);
    for (Index i = 0; i < count; ++i) {
      const Index s = pool.add_sequence(), length = lengths(rng);
      pool.append(s, keys.topRows(length), values.topRows(length), 2);
      tokens += length;
      batch.sequences.emplace_back(random_matrix(1, serve_heads * serve_d, unsigned(i) + 3) * 0.1f, pool.sequence(s));
    }
  }
  static headwise::PagedKvShape shape(Index blocks) {
    headwise::PagedKvShape s;
    s.blocks = blocks, s.block_tokens = serve_block, s.kv.n_kv_heads = serve_kv_heads, s.kv.d_head = serve_d;
    return s;
  }
  headwise::PagedKvCache<float> pool;
  Mat keys, values;
  headwise::AttentionBatch<float> batch;
  Index tokens = 0;
};

// A decoding step of `sequences` sequences of up to `longest` tokens: batched (one call, one job
// list) or one by one (a call each). KV_GBps: the bytes of K and V the step reads, over its time.
void BM_DecodeBatch(benchmark::State& state) {
  ServingBatch serving(state.range(0), state.range(3));
  headwise::AttentionOptions options;
  options.threads = static_cast<int>(state.range(1));
  headwise::AttentionCall call;
  call.heads = {serve_heads, serve_kv_heads}, call.options = &options;
  const bool batched = state.range(2) != 0;
  for (auto _ : state) {
    if (batched) {
      auto r = headwise::attend(serving.batch, call);
      benchmark::DoNotOptimize(r.data());
    } else {
      for (const auto& s : serving.batch.sequences) {
        auto r = headwise::attend<float>(s.q, s.kv, call);
        benchmark::DoNotOptimize(r.z.data());
      }
    }
    benchmark::ClobberMemory();
  }
  const double bytes = 2.0 * double(serving.tokens) * double(serve_kv_heads * serve_d) * sizeof(float);
  state.counters["KV_GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["KV_MiB"] = bytes / (1 << 20);
  state.SetLabel(batched ? "batched" : "one by one");
}
BENCHMARK(BM_DecodeBatch)
    ->ArgNames({"sequences", "threads", "batched", "longest"})
    ->ArgsProduct({{16, 64}, {1, 2}, {0, 1}, {256, 4096}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// 16 sequences forked from one 4096-token prompt, each with its own 16 .. 316 tokens after it: a
// decoding step with the prompt attended once for all (shared 1: AttentionBatch::shared_prefix)
// or by each sequence (shared 0). Read_MiB: the keys and values the step reads.
void BM_DecodeSharedPrefix(benchmark::State& state) {
  constexpr Index prompt = 4096, count = 16;
  headwise::PagedKvCache<float> pool(ServingBatch::shape(count * 8 + prompt / serve_block));
  const Mat keys = random_matrix(prompt, serve_kv_heads * serve_d, 1), values = random_matrix(prompt, serve_kv_heads * serve_d, 2);
  const Index root = pool.add_sequence();
  pool.append(root, keys, values, 2);
  const bool shared = state.range(1) != 0;
  headwise::AttentionBatch<float> batch;
  batch.shared_prefix = shared ? prompt : 0;
  Index own = 0;
  for (Index i = 0; i < count; ++i) {
    const Index s = pool.fork(root), length = 16 + 20 * i;
    pool.append(s, keys.topRows(length), values.topRows(length));
    own += length;
    batch.sequences.emplace_back(random_matrix(1, serve_heads * serve_d, unsigned(i) + 3) * 0.1f, pool.sequence(s), shared);
  }
  headwise::AttentionOptions options;
  options.threads = static_cast<int>(state.range(0));
  headwise::AttentionCall call;
  call.heads = {serve_heads, serve_kv_heads}, call.options = &options;
  for (auto _ : state) {
    auto r = headwise::attend(batch, call);
    benchmark::DoNotOptimize(r.data());
    benchmark::ClobberMemory();
  }
  const double tokens = shared ? double(prompt + own) : double(count * prompt + own);
  state.counters["Read_MiB"] = 2.0 * tokens * double(serve_kv_heads * serve_d) * sizeof(float) / (1 << 20);
  state.SetLabel(shared ? "prompt read once" : "prompt read by each");
}
BENCHMARK(BM_DecodeSharedPrefix)
    ->ArgNames({"threads", "shared"})
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

// One token through a weight matrix of Llama-3.2-1B's MLP (gate / up: 8192 x 2048), as a decoding
// step multiplies by it: y = x Wᵀ with W kept as stored (type 0: F32, 1: BF16, 2: F16). A step
// must read every weight byte once; Weight_GBps is that over the step's time, for BM_StreamTriad
// beside it. Each iteration takes the next of copies of the matrix filling 1.5 GB, as a model's
// decoding step moves from matrix to matrix: past the caches (this Xeon's L3 is 480 MiB).
constexpr double weights_bytes = 1.5e9;

void BM_WeightStep(benchmark::State& state) {
  const auto type = std::vector<headwise::WeightType>{headwise::WeightType::f32, headwise::WeightType::bf16,
                                                      headwise::WeightType::f16}[static_cast<std::size_t>(state.range(0))];
  const int threads = static_cast<int>(state.range(1));
  const headwise::StoredMatrix first = headwise::StoredMatrix::from(random_matrix(8192, 2048, 3), type);
  std::vector<headwise::StoredMatrix> copies;
  for (double bytes = 0; bytes < weights_bytes; bytes += double(first.bytes())) {
    const auto* begin = static_cast<const unsigned char*>(first.data());
    auto owned = std::make_shared<std::vector<unsigned char>>(begin, begin + first.bytes());
    copies.push_back(headwise::StoredMatrix::view(owned, owned->data(), type, {first.rows(), first.cols()}));
  }
  const Mat x = random_matrix(1, 2048, 4);
  std::size_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(headwise::times_transposed<float>(x, copies[next], threads).data());
    next = (next + 1) % copies.size();
  }
  state.counters["Weight_GBps"] = benchmark::Counter(double(first.bytes()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(headwise::weight_type_name(type));
}
BENCHMARK(BM_WeightStep)->ArgNames({"type", "threads"})->ArgsProduct({{0, 1, 2}, {1, 2}})->Unit(benchmark::kMicrosecond)->UseRealTime();

// The baseline: the same step as DecoderModel computed it before weights were kept as stored, the
// float weights widened at load and transposed to [in, out], through the deterministic tile product.
void BM_WeightStepInOutFloat(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const Mat w = random_matrix(2048, 8192, 3);
  std::vector<Mat> copies(static_cast<std::size_t>(weights_bytes / (double(w.size()) * 4)) + 1, w);
  const Mat x = random_matrix(1, 2048, 4);
  Mat y;
  std::size_t next = 0;
  for (auto _ : state) {
    headwise::detail::product<float>(x, copies[next], y, threads);
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies.size();
  }
  state.counters["Weight_GBps"] = benchmark::Counter(double(w.size()) * 4e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_WeightStepInOutFloat)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
