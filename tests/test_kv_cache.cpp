// Incremental decoding with a KV cache: token by token and in chunks of any sizes, bitwise equal to
// the full forward; the decode case of PyTorch; capacity, truncate and reset.
#include <random>

#include "headwise/attend.hpp"
#include "headwise/kv_cache.hpp"
#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;

TEMPLATE_TEST_CASE("decoding in random chunks is bitwise equal to the full forward", "[kv-cache][property]",
                   float, double) {
  const unsigned seed = GENERATE(1u, 3u);  // n = 187 and 261: across several key tiles
  const Index n_kv_heads = GENERATE(4, 2, 1);  // multi-head, grouped-query, multi-query
  CAPTURE(seed, n_kv_heads);
  std::mt19937 rng(seed);
  const auto mha = headwise_test::random_layer<TestType>(64, 4, n_kv_heads, rng);
  const Index n = 150 + static_cast<Index>(seed) * 37;  // crosses several key tiles
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, 64, rng);
  const Matrix<TestType> full = mha.forward(x);

  // Token by token.
  auto cache = mha.make_cache(n);
  Matrix<TestType> stepwise(n, 64);
  for (Index t = 0; t < n; ++t) stepwise.row(t) = mha.forward_incremental(x.row(t), cache);
  CHECK(cache.size() == n);
  CHECK_THAT(headwise_test::as_double(stepwise), IsExactly(full));

  // Random chunks, on 1 thread and on 2.
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    AttentionOptions options;
    options.threads = threads;
    cache.reset();
    Matrix<TestType> chunked(n, 64);
    std::uniform_int_distribution<Index> size(1, 70);
    for (Index t = 0; t < n;) {
      const Index m = std::min(size(rng), n - t);
      chunked.middleRows(t, m) = mha.forward_incremental(x.middleRows(t, m), cache, options);
      t += m;
    }
    CHECK_THAT(headwise_test::as_double(chunked), IsExactly(full));
  }
}

TEMPLATE_TEST_CASE("truncate rolls back: re-decoding after it gives the full forward again", "[kv-cache]", float,
                   double) {
  std::mt19937 rng(9);
  const auto mha = headwise_test::random_layer<TestType>(32, 2, 2, rng);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(40, 32, rng);
  const Matrix<TestType> full = mha.forward(x);
  auto cache = mha.make_cache(64);
  mha.forward_incremental(x.topRows(30), cache);
  // A speculative draft of 8 wrong tokens, rejected.
  mha.forward_incremental(headwise_test::random_matrix<TestType>(8, 32, rng), cache);
  CHECK(cache.size() == 38);
  cache.truncate(30);
  CHECK(cache.size() == 30);
  const Matrix<TestType> rest = mha.forward_incremental(x.bottomRows(10), cache);
  CHECK_THAT(headwise_test::as_double(rest), IsExactly(full.bottomRows(10)));
}

TEMPLATE_TEST_CASE("the cache never reallocates and refuses to overflow", "[kv-cache][errors]", float, double) {
  std::mt19937 rng(10);
  const auto mha = headwise_test::random_layer<TestType>(16, 2, 1, rng);
  auto cache = mha.make_cache(5);
  CHECK(cache.capacity() == 5);
  CHECK(cache.n_kv_heads() == 1);
  const TestType* storage = cache.packed().keys(0);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(6, 16, rng);
  for (Index t = 0; t < 5; ++t) mha.forward_incremental(x.row(t), cache);
  CHECK(cache.packed().keys(0) == storage);
  REQUIRE_THROWS_WITH(mha.forward_incremental(x.row(5), cache),
                      "headwise: MultiHeadAttention::forward_incremental: appending 1 tokens to 5 would exceed "
                      "the cache's capacity of 5 tokens");
  CHECK(cache.size() == 5);
  REQUIRE_THROWS_WITH(cache.truncate(6), "headwise: PackedKeysValues::truncate: position 6 is outside [0, 5]");
  REQUIRE_THROWS_WITH(cache.append(Matrix<TestType>::Zero(1, 8), Matrix<TestType>::Zero(1, 8)),
                      "headwise: PackedKeysValues::append: appending 1 tokens to 5 would exceed the capacity of 5 tokens");
  REQUIRE_THROWS_WITH(cache.append(Matrix<TestType>::Zero(1, 7), Matrix<TestType>::Zero(1, 8)),
                      "headwise: PackedKeysValues::append: k has 7 columns, expected n_kv_heads d_head = 8");
  cache.reset();
  CHECK(cache.size() == 0);
  const auto other = headwise_test::random_layer<TestType>(16, 2, 2, rng);
  REQUIRE_THROWS_WITH(other.forward_incremental(x.row(0), cache),
                      "headwise: MultiHeadAttention::forward_incremental: the cache holds 1 heads of keys 8 wide and values 8 wide of "
                      "their own; this layer keeps 2 heads of keys 8 and values 8 of their own (the layer's make_cache or "
                      "make_paged_cache gives its own)");
  REQUIRE_THROWS_WITH(KvCache<TestType>(-1, 1, 8), "headwise: PackedKeysValues: capacity must be >= 0, got -1");
}

TEMPLATE_TEST_CASE("the cache holds each key and value where it was appended", "[kv-cache]", float, double) {
  std::mt19937 rng(11);
  KvCache<TestType> cache(40, 2, 24);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(37, 48, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(37, 48, rng);
  cache.append(k.topRows(20), v.topRows(20));
  cache.append(k.bottomRows(17), v.bottomRows(17));
  for (Index h = 0; h < 2; ++h)
    for (Index j = 0; j < 37; ++j)
      for (Index c = 0; c < 24; ++c) {
        REQUIRE(cache.key(h, j, c) == k(j, h * 24 + c));
        REQUIRE(cache.value(h, j, c) == v(j, h * 24 + c));
      }
}

TEMPLATE_TEST_CASE("PyTorch's decode case through a KV cache", "[kv-cache][fixture]", float, double) {
  // 3 queries at positions 50, 51, 52 against 53 cached keys: query i sees keys 0..50+i.
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  const Index heads = 4, d = 16;
  KvCache<TestType> cache(64, heads, d);
  Matrix<TestType> k(53, heads * d), v(53, heads * d), q(3, heads * d);
  for (Index h = 0; h < heads; ++h) {
    k.middleCols(h * d, d) = file.slice<TestType>("decode.k", h);
    v.middleCols(h * d, d) = file.slice<TestType>("decode.v", h);
    q.middleCols(h * d, d) = file.slice<TestType>("decode.q", h);
  }
  cache.append(k, v);
  AttentionCall call;
  call.heads = {heads, heads};
  const Matrix<TestType> z = attend<TestType>(q, cache.packed(), call).z;
  for (Index h = 0; h < heads; ++h)
    CHECK_THAT(headwise_test::as_double(z.middleCols(h * d, d)),
               IsNear(file.slice<double>("decode.out", h), headwise_test::tolerance<TestType>()));
}
