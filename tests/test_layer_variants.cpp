// A layer with each modern variant (RoPE, sliding window, ALiBi, soft-capping, sinks, and a call's
// masks): the fused path equals the step-by-step one, decoding in random chunks equals the full
// forward bit for bit, results do not depend on the thread count, the study tools stay exact;
// and every invalid option is refused by name.
#include <cmath>
#include <random>
#include <string>

#include "headwise/headwise.hpp"
#include "headwise/interpret.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {

constexpr Index d_model = 32, n_heads = 4;

LayerConfig variant(const std::string& name) {
  LayerConfig c;
  if (name == "rope" || name == "rope+window") c.rope = RopeConfig{}, c.rope->theta = 500.0;
  if (name == "rope yarn, interleaved, partial") {
    c.rope = RopeConfig{};
    c.rope->layout = RopeLayout::interleaved, c.rope->rotary_fraction = 0.5;
    c.rope->scaling.type = RopeScaling::Type::yarn, c.rope->scaling.factor = 4, c.rope->scaling.original_max_position = 64;
  }
  if (name == "window" || name == "rope+window") c.window = 17;
  if (name == "alibi") c.alibi_slopes = alibi_slopes(n_heads);
  if (name == "softcap") c.softcap = 2.0;
  if (name == "sinks") c.sinks = (Vector<double>(n_heads) << -1.0, 0.0, 2.0, 30.0).finished();
  return c;
}

}  // namespace

TEMPLATE_TEST_CASE("each layer variant: fused == step by step, decoding bitwise, statistics exact", "[variants][layer]",
                   float, double) {
  const std::string name = GENERATE(as<std::string>{}, "rope", "rope yarn, interleaved, partial", "window", "rope+window",
                                    "alibi", "softcap", "sinks");
  const Index n = GENERATE(37, 300);
  CAPTURE(name, n);
  std::mt19937 rng(static_cast<unsigned>(n + name.size()));
  const auto layer = headwise_test::random_layer<TestType>(d_model, n_heads, 2, rng, 3.0, variant(name));
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, d_model, rng);
  const Matrix<TestType> full = layer.forward(x);
  const double tol = 10 * tolerance<TestType>();
  CHECK_THAT(headwise_test::as_double(full), IsNear(layer.forward_step_by_step(x).template cast<double>(), tol));

  // Bitwise the same on 1 and 3 threads, and decoding in random chunks.
  AttentionOptions three;
  three.threads = 3;
  CHECK_THAT(headwise_test::as_double(layer.forward(x, three)), IsExactly(full));
  auto cache = layer.make_cache(n);
  Matrix<TestType> decoded(n, d_model);
  for (Index i0 = 0; i0 < n;) {
    const Index m = std::min<Index>(std::uniform_int_distribution<Index>(1, 40)(rng), n - i0);
    decoded.middleRows(i0, m) = layer.forward_incremental(x.middleRows(i0, m), cache);
    i0 += m;
  }
  CHECK_THAT(headwise_test::as_double(decoded), IsExactly(full));

  // The study tools: statistics and patterns from the fused run equal the step-by-step weights.
  const auto run = interpret::inspect(layer, x);
  const auto trace = layer.trace(x);
  for (Index h = 0; h < n_heads; ++h) {
    CAPTURE(h);
    const Matrix<double> a = trace.heads[h].weights.template cast<double>();
    CHECK_THAT(headwise_test::as_double(run.pattern(h)), IsNear(a, tol));
    Eigen::MatrixXd entropy(1, n), first(1, n), largest(1, n);
    for (Index i = 0; i < n; ++i) {
      double e = 0;
      for (Index j = 0; j < n; ++j)
        if (a(i, j) > 0) e -= a(i, j) * std::log(a(i, j));
      entropy(0, i) = e, first(0, i) = a(i, 0), largest(0, i) = a.row(i).maxCoeff();
    }
    CHECK_THAT(headwise_test::as_double(run.attention.statistics.entropy.row(h)), IsNear(entropy, tol, /*floor=*/1.0));
    CHECK_THAT(headwise_test::as_double(run.attention.statistics.first_token_mass.row(h)), IsNear(first, tol));
    CHECK_THAT(headwise_test::as_double(run.attention.statistics.max_weight.row(h)), IsNear(largest, tol));
  }
  if (name == "sinks")  // head 3's sink (30) takes nearly all the mass: its rows sum to far less than 1
    CHECK(trace.heads[3].weights.row(n - 1).sum() < TestType(1e-3));
}

TEMPLATE_TEST_CASE("a call's masks on the fused and step-by-step paths, with random tiles", "[variants][masks]", float,
                   double) {
  const Index n = GENERATE(1, 37, 200);
  const int which = GENERATE(0, 1, 2, 3);
  CAPTURE(n, which);
  std::mt19937 rng(static_cast<unsigned>(n * 5 + which));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, 16, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, 16, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n, 16, rng);
  AttentionOptions options;
  std::bernoulli_distribution coin(0.3);
  if (which == 0) {  // a boolean mask with whole rows hidden and big holes
    options.mask.resize(n, n);
    for (Index i = 0; i < n; ++i)
      for (Index j = 0; j < n; ++j) options.mask(i, j) = i % 7 != 3 && (j / 40 != 1) && coin(rng);
  } else if (which == 1) {  // a bias with -inf holes
    options.causal = false;
    options.bias = Matrix<double>::Random(n, n);
    for (Index i = 0; i < n; ++i)
      for (Index j = 0; j < n; ++j)
        if (coin(rng)) options.bias(i, j) = -std::numeric_limits<double>::infinity();
  } else if (which == 2) {  // three packed sequences
    options.cu_seqlens = {0, n / 3, n / 3 + (n + 1) / 2, n};
    if (n < 3) options.cu_seqlens = {0, n};
  } else {  // padding, no causal mask
    options.causal = false;
    options.key_valid = Eigen::Array<bool, Eigen::Dynamic, 1>::Constant(n, true);
    options.key_valid.tail(n / 4).setConstant(false);
  }
  const auto reference = attention(q, k, v, options);
  for (const FusedTiles tiles : {FusedTiles{}, FusedTiles{5, 3}, FusedTiles{64, 33}}) {
    CAPTURE(tiles.queries, tiles.keys);
    AttentionCall call;
    call.heads = {1, 1}, call.options = &options, call.logsumexp = true, call.tiles = tiles;
    const AttentionResult<TestType> fused = attend<TestType>(q, k, v, call);
    CHECK_THAT(headwise_test::as_double(fused.z), IsNear(reference.z.template cast<double>(), 10 * tolerance<TestType>()));
    for (Index i = 0; i < n; ++i) {
      if (std::isinf(reference.logsumexp(i))) {  // a row that sees nothing: 0 and -inf on both paths
        CHECK(fused.logsumexp(0, i) == reference.logsumexp(i));
        CHECK((fused.z.row(i).array() == TestType(0)).all());
      } else {
        CHECK_THAT(double(fused.logsumexp(0, i)), Catch::Matchers::WithinAbs(double(reference.logsumexp(i)), 10 * tolerance<TestType>() * 10));
      }
    }
  }
}

TEST_CASE("invalid options are refused by name", "[variants][errors]") {
  const Matrix<double> q = Matrix<double>::Random(5, 4), k = Matrix<double>::Random(5, 4), v = Matrix<double>::Random(5, 4);
  const auto refused = [&](AttentionOptions o, const std::string& what) {
    CAPTURE(what);
    AttentionCall call;
    call.heads = {1, 1}, call.options = &o, call.logsumexp = true;
    CHECK_THROWS_WITH(attention(q, k, v, o), Catch::Contains(what));
    CHECK_THROWS_WITH(attend<double>(q, k, v, call), Catch::Contains(what));
  };
  AttentionOptions o;
  o.window = 0;
  refused(o, "window must be > 0, got 0");
  o.window = 3, o.causal = false;
  refused(o, "a sliding window needs the causal mask");
  o = {}, o.mask.resize(5, 4);
  refused(o, "mask is 5x4, expected (n_q, n_k) = 5x5");
  o = {}, o.bias = Matrix<double>::Zero(4, 5);
  refused(o, "bias is 4x5");
  o = {}, o.bias = Matrix<double>::Zero(5, 5), o.bias(2, 1) = std::nan("");
  refused(o, "bias has nan at row 2, column 1");
  o = {}, o.sinks = Vector<double>::Zero(2);
  refused(o, "sinks has 2 entries, expected one per head, 1");
  o = {}, o.alibi_slopes = Vector<double>::Constant(1, std::numeric_limits<double>::infinity());
  refused(o, "alibi_slopes has a non-finite value");
  o = {}, o.softcap = -1.0;
  refused(o, "softcap must be finite and > 0");
  o = {}, o.key_valid = Eigen::Array<bool, Eigen::Dynamic, 1>::Constant(4, true);
  refused(o, "key_valid has 4 entries, expected one per key, 5");
  o = {}, o.cu_seqlens = {0, 3, 3, 5};
  refused(o, "cu_seqlens must be increasing, but entry 2 (3) is not greater than entry 1 (3)");
  o = {}, o.cu_seqlens = {0, 4};
  refused(o, "cu_seqlens must end at the number of keys, 5, got 4");
  o = {}, o.cu_seqlens = {1, 5};
  refused(o, "cu_seqlens must start at 0");
  // A layer's config is checked when the layer is made.
  std::mt19937 rng(1);
  LayerConfig config;
  config.sinks = Vector<double>::Zero(3);
  CHECK_THROWS_WITH(headwise_test::random_layer<double>(8, 2, 2, rng, 1.0, config), Catch::Contains("sinks has 3 entries"));
  config = {}, config.rope = RopeConfig{}, config.rope->d_head = 6;
  CHECK_THROWS_WITH(headwise_test::random_layer<double>(8, 2, 2, rng, 1.0, config),
                    Catch::Contains("the rotary embedding is for d_head = 6, the layer's heads have 4"));
  RopeConfig rope;
  rope.d_head = 8, rope.rotary_fraction = 0.1;
  CHECK_THROWS_WITH(RotaryEmbedding(rope), Catch::Contains("leaves no pair to rotate"));
  rope.rotary_fraction = 1, rope.scaling.type = RopeScaling::Type::llama3, rope.scaling.factor = 8, rope.scaling.low_freq_factor = 5;
  CHECK_THROWS_WITH(RotaryEmbedding(rope), Catch::Contains("low_freq_factor <= high_freq_factor"));
  CHECK_THROWS_WITH(alibi_slopes(0), Catch::Contains("n_heads must be > 0"));
}
