// Split-key decoding: a decoding step (or a short chunk) attends to the cache's keys in fixed
// shards, in parallel, and merges them in key order. Its results are bitwise the same split or
// shard after shard, on any thread count, with every mask and modifier and the statistics; they
// match the step-by-step path; and a layer decoding across shard boundaries reproduces its full
// forward bitwise.
#include <random>
#include <string>

#include "headwise/attention_core.hpp"
#include "headwise/attend.hpp"
#include "headwise/kernels/packed_keys_values.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/variants/alibi.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {

struct Decoded {
  Eigen::MatrixXd z, lse, entropy, first, previous, largest, argmax;
};

/// One call of the kernel on queries q against the packed keys, with statistics.
template <class Scalar>
Decoded decode(const Matrix<Scalar>& q, Index heads, const PackedKeysValues<Scalar>& kv, const AttentionOptions& options,
               const FusedTiles& tiles) {
  AttentionCall call;
  call.heads = {heads, kv.n_kv_heads()}, call.options = &options, call.tiles = tiles;
  call.logsumexp = true, call.statistics = true;
  const AttentionResult<Scalar> r = attend<Scalar>(q, kv, call);
  const RowStatistics<Scalar>& stats = r.statistics;
  return {headwise_test::as_double(r.z), headwise_test::as_double(r.logsumexp), headwise_test::as_double(stats.entropy),
          headwise_test::as_double(stats.first_token_mass), headwise_test::as_double(stats.previous_token_mass),
          headwise_test::as_double(stats.max_weight), stats.argmax.template cast<double>()};
}

void check_same_bits(const Decoded& got, const Decoded& expected) {
  CHECK_THAT(got.z, IsExactly(expected.z));
  CHECK_THAT(got.lse, IsExactly(expected.lse));
  CHECK_THAT(got.entropy, IsExactly(expected.entropy));
  CHECK_THAT(got.first, IsExactly(expected.first));
  CHECK_THAT(got.previous, IsExactly(expected.previous));
  CHECK_THAT(got.largest, IsExactly(expected.largest));
  CHECK_THAT(got.argmax, IsExactly(expected.argmax));
}

AttentionOptions options_named(const std::string& name, Index heads, Index n_k) {
  AttentionOptions o;
  if (name == "window") o.window = 300;
  if (name == "alibi+softcap") o.alibi_slopes = alibi_slopes(heads), o.softcap = 4.0;
  if (name == "sinks") o.sinks = Vector<double>::LinSpaced(heads, -3.0, 5.0);
  if (name == "padding") {  // keys 100 .. 399 hidden: whole shards no query sees
    o.key_valid = Eigen::Array<bool, Eigen::Dynamic, 1>::Constant(n_k, true);
    o.key_valid.segment(100, 300).setConstant(false);
  }
  return o;
}

}  // namespace

TEMPLATE_TEST_CASE("split-key decoding: the same bits split or shard by shard, on 1, 2, 3 and 8 threads",
                   "[split-key][threads]", float, double) {
  const std::string name = GENERATE(as<std::string>{}, "causal", "window", "alibi+softcap", "sinks", "padding");
  const Index n_kv_heads = GENERATE(8, 2, 1);  // multi-head, grouped-query, multi-query
  const Index n_q = GENERATE(1, 6);            // a decoding step, a short chunk
  CAPTURE(name, n_kv_heads, n_q);
  constexpr Index heads = 8, d = 16, n_k = 900;
  std::mt19937 rng(static_cast<unsigned>(n_kv_heads * 7 + n_q + name.size()));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n_q, heads * d, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n_k, n_kv_heads * d, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n_k, n_kv_heads * d, rng);
  PackedKeysValues<TestType> kv(n_k, n_kv_heads, d, d);
  kv.append(k, v);
  AttentionOptions options = options_named(name, heads, n_k);
  const FusedTiles split{128, 32, 64}, in_turn{128, 32, 64, /*split_keys=*/false};  // 15 shards of 64 keys

  options.threads = 1;
  const Decoded expected = decode(q, heads, kv, options, in_turn);
  for (int threads : {1, 2, 3, 8}) {
    CAPTURE(threads);
    options.threads = threads;
    check_same_bits(decode(q, heads, kv, options, split), expected);
  }

  // And the step-by-step path, head by head (queries at the last positions).
  const Index group = heads / n_kv_heads;
  for (Index h = 0; h < heads; ++h) {
    CAPTURE(h);
    const Index g = h / group;
    const auto step = attention(q.middleCols(h * d, d), k.middleCols(g * d, d), v.middleCols(g * d, d),
                                options_of_head(options, h, heads, "test"));
    CHECK_THAT(expected.z.middleCols(h * d, d), IsNear(step.z.template cast<double>(), tolerance<TestType>()));
    CHECK_THAT(expected.lse.row(h), IsNear(step.logsumexp.transpose().template cast<double>(), tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("decoding across the default key shards is bitwise equal to the full forward",
                   "[split-key][kv-cache]", float, double) {
  const Index n_kv_heads = GENERATE(4, 2);
  const bool windowed = GENERATE(false, true);
  CAPTURE(n_kv_heads, windowed);
  std::mt19937 rng(static_cast<unsigned>(n_kv_heads * 3 + windowed));
  LayerConfig config;
  if (windowed) config.window = 1500;
  const auto layer = headwise_test::random_layer<TestType>(32, 4, n_kv_heads, rng, 1.0, config);
  const Index n = 2300;  // three shards of 1024 keys
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, 32, rng);
  const Matrix<TestType> full = layer.forward(x);
  // One thread count per configuration, both counts over the four (the bits do not depend on it:
  // the test above shows that for split-key decoding on 1, 2, 3 and 8 threads).
  for (int threads : {windowed == (n_kv_heads == 4) ? 1 : 2}) {
    CAPTURE(threads);
    AttentionOptions options;
    options.threads = threads;
    auto cache = layer.make_cache(n);
    Matrix<TestType> decoded(n, 32);
    decoded.topRows(1000) = layer.forward_incremental(x.topRows(1000), cache, options);
    for (Index t = 1000; t < 1100; ++t)  // token by token across the first shard boundary
      decoded.row(t) = layer.forward_incremental(x.row(t), cache, options);
    std::uniform_int_distribution<Index> size(1, 200);  // chunks of one query tile and of two
    for (Index t = 1100; t < n;) {
      const Index m = std::min(size(rng), n - t);
      decoded.middleRows(t, m) = layer.forward_incremental(x.middleRows(t, m), cache, options);
      t += m;
    }
    CHECK_THAT(headwise_test::as_double(decoded), IsExactly(full));
  }
}
