// The fused kernel: the same function as the step-by-step path, at every size, on every fixture,
// and bitwise the same whatever the number of threads, in a process forked after threaded calls too.
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "headwise/attention_core.hpp"
#include "headwise/attend.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/child_process.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

TEMPLATE_TEST_CASE("fused == step by step over sizes around the tile edges", "[fused][property]", float, double) {
  const FusedTiles tiles;  // the default tiles: n runs over 0, 1, 2, tile - 1, tile, tile + 1, ...
  REQUIRE(tiles.queries == 128);
  REQUIRE(!tiles.keys);  // unset: the store's default, for these (as computed) 512 with AVX-512, 128 elsewhere: both tiles' edges are below
  REQUIRE(default_key_tile(StoreFormat{}) == (detail::TileShape<float>::registers >= 32 ? 512 : 128));
#ifdef HEADWISE_TESTS_UNDER_SANITIZERS
  const Index n = GENERATE(0, 1, 2, 127, 128, 129, 257);  // (1000 in the native builds: ASan sees three tiles' edges here)
#else
  const Index n = GENERATE(0, 1, 2, 127, 128, 129, 257, 511, 512, 513, 1000);
#endif
  const Index d_head = GENERATE(24, 64);
  const bool causal = GENERATE(true, false);
  CAPTURE(n, d_head, causal);
  std::mt19937 rng(static_cast<unsigned>(n * 3 + d_head));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, d_head, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, d_head, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n, d_head, rng);
  AttentionOptions options;
  options.causal = causal;
  AttentionCall call;
  call.heads = {1, 1}, call.options = &options, call.logsumexp = true, call.tiles = tiles;
  const AttentionResult<TestType> fused = attend<TestType>(q, k, v, call);
  const auto reference = attention(q, k, v, options);
  CHECK_THAT(headwise_test::as_double(fused.z), IsNear(reference.z, tolerance<TestType>()));
  CHECK_THAT(headwise_test::as_double(fused.logsumexp.row(0).transpose()), IsNear(reference.logsumexp, tolerance<TestType>()));
  if (n > 0) CHECK(fused.z.row(0) == (causal ? v.row(0) : fused.z.row(0)));  // row 1 sees only key 1
}

TEMPLATE_TEST_CASE("fused: odd tile sizes, more keys than queries, more queries than keys", "[fused][property]",
                   float, double) {
  const Index tq = GENERATE(1, 7, 64), tk = GENERATE(1, 5, 64);
  const Index n_q = GENERATE(1, 9, 70);
  const Index n_k = GENERATE(1, 9, 75);
  CAPTURE(tq, tk, n_q, n_k);
  std::mt19937 rng(static_cast<unsigned>(tq * 1000 + tk * 100 + n_q + n_k));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n_q, 24, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n_k, 24, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n_k, 24, rng);
  AttentionCall call;
  call.heads = {1, 1}, call.logsumexp = true, call.tiles = FusedTiles{tq, tk};
  const AttentionResult<TestType> fused = attend<TestType>(q, k, v, call);
  const Eigen::MatrixXd expected = headwise_test::reference_attention(
      q.template cast<double>(), k.template cast<double>(), v.template cast<double>(), std::sqrt(24.0), true);
  CHECK_THAT(headwise_test::as_double(fused.z), IsNear(expected, 10 * tolerance<TestType>()));
  for (Index i = 0; i < n_q; ++i)
    if (visible_keys(i, n_q, n_k, true) == 0) {
      CHECK((fused.z.row(i).array() == TestType(0)).all());
      CHECK(fused.logsumexp(0, i) == -std::numeric_limits<TestType>::infinity());
    }
}

TEMPLATE_TEST_CASE("fused kernel reproduces PyTorch on every sdpa-reference case", "[fused][fixture]", float, double) {
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  const Matrix<double> lse = file.matrix<double>("causal.logsumexp");
  struct Case {
    const char* prefix;
    const char* out;
    bool causal;
    std::optional<double> divisor;
  };
  const Case cases[] = {{"causal.", "causal.out", true, std::nullopt},
                        {"causal.", "scale8.out", true, 8.0},
                        {"causal.", "nomask.out", false, 4.0},
                        {"decode.", "decode.out", true, std::nullopt}};
  for (const Case& c : cases) {
    CAPTURE(c.out);
    AttentionOptions options;
    options.causal = c.causal;
    options.divisor = c.divisor;
    AttentionCall call;
    call.heads = {1, 1}, call.options = &options, call.logsumexp = true, call.tiles = FusedTiles{8, 8};
    for (Index h = 0; h < 4; ++h) {
      CAPTURE(h);
      const std::string p = c.prefix;
      const AttentionResult<TestType> out = attend<TestType>(file.slice<TestType>(p + "q", h), file.slice<TestType>(p + "k", h),
                                                             file.slice<TestType>(p + "v", h), call);
      CHECK_THAT(headwise_test::as_double(out.z), IsNear(file.slice<double>(c.out, h), tolerance<TestType>()));
      if (std::string(c.out) == "causal.out")
        CHECK_THAT(headwise_test::as_double(out.logsumexp), IsNear(lse.row(h), tolerance<TestType>()));
    }
  }
}

TEST_CASE("fused kernel: scores in the tens of thousands (float64)", "[fused][fixture]") {
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  AttentionCall call;
  call.heads = {1, 1}, call.logsumexp = true, call.tiles = FusedTiles{4, 4};
  for (Index h = 0; h < 2; ++h) {
    const AttentionResult<double> out = attend<double>(file.slice<double>("large.q", h), file.slice<double>("large.k", h),
                                                       file.slice<double>("large.v", h), call);
    CHECK_THAT(out.z, IsNear(file.slice<double>("large.out", h), 1e-12));
  }
}

TEMPLATE_TEST_CASE("fused kernel: grouped-query heads read their key/value head by index", "[fused][fixture][gqa]",
                   float, double) {
  // 8 query heads, 2 key/value heads: query head h uses key/value head h / 4.
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  const Index n = 29, d = 16;
  Matrix<TestType> q(n, 8 * d), k(n, 2 * d), v(n, 2 * d);
  for (Index h = 0; h < 8; ++h) q.middleCols(h * d, d) = file.slice<TestType>("gqa.q", h);
  for (Index h = 0; h < 2; ++h) {
    k.middleCols(h * d, d) = file.slice<TestType>("gqa.k", h);
    v.middleCols(h * d, d) = file.slice<TestType>("gqa.v", h);
  }
  AttentionCall call;
  call.heads = {8, 2};
  const AttentionResult<TestType> r = attend<TestType>(q, k, v, call);
  for (Index h = 0; h < 8; ++h) {
    CAPTURE(h);
    CHECK_THAT(headwise_test::as_double(r.z.middleCols(h * d, d)), IsNear(file.slice<double>("gqa.out", h), tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("fused kernel: 1, 2, 3 and 8 threads give bitwise equal results", "[fused][threads]", float, double) {
  const Index n = 300, n_heads = 4, d_head = 24;
  std::mt19937 rng(5);
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, n_heads * d_head, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, n_heads * d_head, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n, n_heads * d_head, rng);
  AttentionOptions options;
  options.threads = 1;
  AttentionCall call;
  call.heads = {n_heads, n_heads}, call.options = &options, call.logsumexp = true, call.tiles = FusedTiles{32, 32};
  const AttentionResult<TestType> one = attend<TestType>(q, k, v, call);
  for (int threads : {2, 3, 8}) {
    CAPTURE(threads);
    options.threads = threads;
    const AttentionResult<TestType> r = attend<TestType>(q, k, v, call);
    CHECK_THAT(headwise_test::as_double(r.z), IsExactly(one.z));
    CHECK_THAT(headwise_test::as_double(r.logsumexp), IsExactly(one.logsumexp));
  }
}

TEMPLATE_TEST_CASE("fused kernel refuses bad shapes, head counts, tiles and divisors", "[fused][errors]", float, double) {
  const Matrix<TestType> q = Matrix<TestType>::Ones(5, 8), kv = Matrix<TestType>::Ones(5, 8);
  using M = Matrix<TestType>;
  AttentionCall call;
  call.heads = {0, 1};
  REQUIRE_THROWS_WITH(attend<TestType>(q, kv, kv, call), "headwise: attend: n_heads and n_kv_heads must be > 0, got 0 and 1");
  call.heads = {4, 3};
  REQUIRE_THROWS_WITH(attend<TestType>(q, kv, kv, call), "headwise: attend: n_heads = 4 is not divisible by n_kv_heads = 3");
  call.heads = {3, 3};
  REQUIRE_THROWS_WITH(attend<TestType>(q, kv, kv, call), "headwise: attend: q has 8 columns, not divisible by n_heads = 3");
  call.heads = {2, 2};
  REQUIRE_THROWS_WITH(attend<TestType>(q, M::Ones(5, 6), kv, call),
                      "headwise: attend: k has 6 columns, expected n_kv_heads d_head = 8");
  REQUIRE_THROWS_WITH(attend<TestType>(q, kv, M::Ones(4, 8), call), "headwise: attend: v has 4 rows but k has 5 (one per key)");
  call.tiles = FusedTiles{0, 8};
  REQUIRE_THROWS_WITH(attend<TestType>(q, kv, kv, call),
                      "headwise: attend: tile sizes must be > 0, got 0 queries, 8 keys and shards of 1024 keys");
  call.tiles = FusedTiles{8, 8, 0};
  REQUIRE_THROWS_WITH(attend<TestType>(q, kv, kv, call),
                      "headwise: attend: tile sizes must be > 0, got 8 queries, 8 keys and shards of 0 keys");
  AttentionOptions options;
  options.divisor = -1.0;
  AttentionCall one_head;
  one_head.heads = {1, 1}, one_head.options = &options;
  REQUIRE_THROWS_WITH(attend<TestType>(q, kv, kv, one_head), "headwise: attend: divisor must be finite and > 0, got -1");
  one_head.options = nullptr;
  REQUIRE_THROWS_WITH(attend<TestType>(q, M::Ones(5, 7), kv, one_head),
                      "headwise: attend: k has 7 columns, expected n_kv_heads d_head = 8");
}

// (Pre-forking servers, multiprocessing: a child has only the forking thread. The parent's thread
// team has workers there that do not exist, and GCC's OpenMP runtime, under Eigen's products, a
// pool it waits for: both hung the child's first multi-threaded call.)
TEST_CASE("a process forked after multi-threaded calls runs multi-threaded calls of its own", "[fused][parallel]") {
  const auto region_on_three_threads = [] {
    std::vector<std::thread::id> ids(3);
    detail::parallel_region(3, [&](int t) { ids[static_cast<std::size_t>(t)] = std::this_thread::get_id(); });
    return !HEADWISE_THREADS || (ids[1] != ids[0] && ids[2] != ids[0] && ids[1] != ids[2]);
  };
  REQUIRE(region_on_three_threads());  // (the team hired here, before the fork)
  std::mt19937 rng(56);
  const Matrix<float> q = headwise_test::random_matrix<float>(512, 64, rng), k = headwise_test::random_matrix<float>(512, 64, rng),
                      v = headwise_test::random_matrix<float>(512, 64, rng), x = headwise_test::random_matrix<float>(512, 256, rng);
  const MultiHeadAttention<float> layer = headwise_test::random_layer<float>(256, 8, 8, rng);
  AttentionOptions two;
  two.threads = 2;
  AttentionCall call;
  call.heads = {2, 2};
  call.options = &two;
  const Matrix<float> z = attend<float>(q, k, v, call).z, out = layer.forward(x, two);  // (Eigen's products on OpenMP's threads)
  const Matrix<double> expected = out.cast<double>();
  CHECK(headwise_test::in_child([&] {
          if (!region_on_three_threads()) return 1;
          if (attend<float>(q, k, v, call).z != z) return 2;  // (the kernel on two threads: the same bits)
          const Matrix<double> again = layer.forward(x, two).cast<double>();
          if ((again - expected).cwiseAbs().maxCoeff() > 1e-5 * expected.cwiseAbs().maxCoeff()) return 3;
          return region_on_three_threads() ? 0 : 4;
        }, std::chrono::seconds(60)) == "exit 0");
#if !defined(HEADWISE_TESTS_UNDER_SANITIZERS)  // (LeakSanitizer counts the parent's other threads' memory, which no child can free)
  // (std::exit destroys the thread's team: one hired in the child, and one the parent hired)
  CHECK(headwise_test::in_child([&]() -> int { std::exit(region_on_three_threads() ? 0 : 1); }, std::chrono::seconds(60)) == "exit 0");
  CHECK(headwise_test::in_child([]() -> int { std::exit(0); }, std::chrono::seconds(60)) == "exit 0");
#endif
  CHECK(region_on_three_threads());  // (the parent's team is untouched)
}
