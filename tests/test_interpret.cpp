// Studying heads: statistics from the fused kernel against the full pattern, patterns rebuilt
// from the logsumexp, contribution norms, interventions in both paths, head-type scores.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "headwise/headwise.hpp"
#include "headwise/interpret.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsNear;
using headwise_test::tolerance;

TEMPLATE_TEST_CASE("statistics from the fused kernel equal those of the full pattern", "[interpret][statistics]",
                   float, double) {
  const Index n = GENERATE(1, 2, 37, 300);
  const bool causal = GENERATE(true, false);
  const Index n_kv_heads = GENERATE(4, 2);
  CAPTURE(n, causal, n_kv_heads);
  std::mt19937 rng(static_cast<unsigned>(n * 7 + n_kv_heads));
  const auto layer = headwise_test::random_layer<TestType>(32, 4, n_kv_heads, rng, 2.0);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, 32, rng);
  AttentionOptions options;
  options.causal = causal;
  const auto run = interpret::inspect(layer, x, options);
  const auto trace = layer.trace(x, options);
  const double tol = 10 * tolerance<TestType>();
  for (Index h = 0; h < 4; ++h) {
    CAPTURE(h);
    const Matrix<double> a = trace.heads[h].weights.template cast<double>();
    Eigen::MatrixXd entropy(1, n), first(1, n), previous(1, n), largest(1, n);
    for (Index i = 0; i < n; ++i) {
      double e = 0;
      Index best = 0;
      for (Index j = 0; j < n; ++j) {
        if (a(i, j) > 0) e -= a(i, j) * std::log(a(i, j));
        if (a(i, j) > a(i, best)) best = j;
      }
      entropy(0, i) = e;
      first(0, i) = a(i, 0);
      previous(0, i) = i > 0 ? a(i, i - 1) : 0.0;
      largest(0, i) = a(i, best);
      if (a(i, best) - a(i, run.attention.statistics.argmax(h, i)) > tol) CHECK(run.attention.statistics.argmax(h, i) == best);
    }
    // Entropy in nats: near 0 it is checked to tol nats, not tol of itself.
    CHECK_THAT(headwise_test::as_double(run.attention.statistics.entropy.row(h)), IsNear(entropy, tol, /*floor=*/1.0));
    CHECK_THAT(headwise_test::as_double(run.attention.statistics.first_token_mass.row(h)), IsNear(first, tol));
    CHECK_THAT(headwise_test::as_double(run.attention.statistics.previous_token_mass.row(h)), IsNear(previous, tol));
    CHECK_THAT(headwise_test::as_double(run.attention.statistics.max_weight.row(h)), IsNear(largest, tol));
    // Patterns rebuilt from the saved logsumexp, without rerunning the layer.
    CHECK_THAT(headwise_test::as_double(run.pattern(h)), IsNear(a, tol));
    if (n > 2) CHECK_THAT(headwise_test::as_double(run.pattern(h, {n - 1, 1})),
                          IsNear((Eigen::MatrixXd(2, n) << a.row(n - 1), a.row(1)).finished(), tol));
  }
  CHECK_THAT(headwise_test::as_double(run.output), IsNear(trace.output, tol));
}

TEST_CASE("statistics: a row that sees nothing, and a hand-made pattern", "[interpret][statistics]") {
  // Two queries against one key: the first sees nothing.
  Matrix<double> q(2, 4), k(1, 4), v(1, 4);
  q << 1, 0, 0, 0, 0, 1, 0, 0;
  k << 1, 1, 0, 0;
  v << 1, 2, 3, 4;
  KvCache<double> cache(1, 1, 4);
  cache.append(k, v);
  AttentionCall call;
  call.heads = {1, 1}, call.statistics = true;
  const RowStatistics<double> stats = attend<double>(q, cache.packed(), call).statistics;
  CHECK(stats.argmax(0, 0) == -1);
  CHECK(stats.max_weight(0, 0) == 0.0);
  CHECK(stats.entropy(0, 0) == 0.0);
  CHECK(stats.argmax(0, 1) == 0);
  CHECK(stats.max_weight(0, 1) == 1.0);
  CHECK_THAT(stats.entropy(0, 1), WithinAbs(0.0, 1e-15));
  CHECK(stats.first_token_mass(0, 1) == 1.0);
}

TEMPLATE_TEST_CASE("contribution norms equal the norms of Z_h W_O[h]", "[interpret][contributions]", float, double) {
  std::mt19937 rng(3);
  const auto layer = headwise_test::random_layer<TestType>(48, 6, 6, rng, 2.0);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(25, 48, rng);
  const auto run = interpret::inspect(layer, x);
  const Matrix<TestType> norms = interpret::contribution_norms(layer, run.attention.z);
  REQUIRE(norms.rows() == 6);
  REQUIRE(norms.cols() == 25);
  Eigen::MatrixXd expected(6, 25);
  for (Index h = 0; h < 6; ++h)
    expected.row(h) = layer.head_contribution(run.z_head(h), h).template cast<double>().rowwise().norm().transpose();
  CHECK_THAT(headwise_test::as_double(norms), IsNear(expected, 100 * tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("interventions inside the W_O sum, in both paths", "[interpret][interventions]", float, double) {
  std::mt19937 rng(4);
  const auto layer = headwise_test::random_layer<TestType>(32, 4, 4, rng, 2.0);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(30, 32, rng);
  const Matrix<TestType> x_b = headwise_test::random_matrix<TestType>(30, 32, rng);
  const auto trace = layer.trace(x);
  const double tol = 10 * tolerance<TestType>();

  SECTION("ablating a head equals subtracting its contribution") {
    const HookFunction<TestType> iv = ablate_head(2);
    const Matrix<TestType> expected = trace.output - trace.contributions[2];
    CHECK_THAT(headwise_test::as_double(layer.forward(x, {}, iv)), IsNear(expected, tol));
    CHECK_THAT(headwise_test::as_double(layer.forward_step_by_step(x, {}, iv)), IsNear(expected, tol));
    CHECK_THAT(headwise_test::as_double(interpret::inspect(layer, x, {}, iv).output), IsNear(expected, tol));
  }
  SECTION("a gate scales a head's contribution") {
    const HookFunction<TestType> iv = gate_head(1, 0.25);
    const Matrix<TestType> expected = trace.output - TestType(0.75) * trace.contributions[1];
    CHECK_THAT(headwise_test::as_double(layer.forward(x, {}, iv)), IsNear(expected, tol));
    CHECK_THAT(headwise_test::as_double(layer.forward_step_by_step(x, {}, iv)), IsNear(expected, tol));
  }
  SECTION("patching every head from run B reproduces run B") {
    const auto run_b = interpret::inspect(layer, x_b);
    const HookFunction<TestType> iv = in_turn(patch_head<TestType>(0, run_b.z_head(0)), patch_head<TestType>(1, run_b.z_head(1)),
                                              patch_head<TestType>(2, run_b.z_head(2)), patch_head<TestType>(3, run_b.z_head(3)));
    const Matrix<TestType> expected = layer.trace(x_b).output;
    CHECK_THAT(headwise_test::as_double(layer.forward(x, {}, iv)), IsNear(expected, tol));
    CHECK_THAT(headwise_test::as_double(layer.forward_step_by_step(x, {}, iv)), IsNear(expected, tol));
  }
  SECTION("mean ablation replaces a head's Z by its mean over positions from a reference run") {
    const auto reference = interpret::inspect(layer, x_b);
    const Matrix<TestType> mean = mean_over_positions(reference.attention.z, 4, 3);
    const HookFunction<TestType> iv = patch_head(3, mean);
    const Matrix<TestType> expected =
        trace.output - trace.contributions[3] + layer.head_contribution(mean.replicate(30, 1), 3);
    CHECK_THAT(headwise_test::as_double(layer.forward(x, {}, iv)), IsNear(expected, tol));
    CHECK_THAT(headwise_test::as_double(layer.forward_step_by_step(x, {}, iv)), IsNear(expected, tol));
  }
  SECTION("errors") {
    REQUIRE_THROWS_WITH(layer.forward(x, {}, gate_head(4, 1.0)), "headwise: HookPoint::head: head 4 of hook_z, which holds 4 heads side by side");
    REQUIRE_THROWS_WITH(layer.forward_step_by_step(x, {}, ablate_head(-1)),
                        "headwise: HookPoint::head: head -1 of hook_z, which holds 4 heads side by side");
    REQUIRE_THROWS_WITH(layer.forward(x, {}, patch_head<TestType>(0, Matrix<TestType>::Zero(29, 8))),
                        "headwise: patch_head: the replacement of head 0 on hook_z is 29x8, expected 30x8 or 1x8");
    const HookFunction<TestType> nan = [](Matrix<TestType>& z, const HookPoint&) { z(0, 0) = std::numeric_limits<TestType>::quiet_NaN(); };
    REQUIRE_THROWS_WITH(layer.forward(x, {}, nan), "headwise: MultiHeadAttention::forward: the hook function on hook_z left a value that is not finite");
    const HookFunction<TestType> wider = [](Matrix<TestType>& z, const HookPoint&) { z.conservativeResize(z.rows(), z.cols() + 1); };
    REQUIRE_THROWS_WITH(layer.forward(x, {}, wider), "headwise: MultiHeadAttention::forward: the hook function on hook_z left it 30x33, the value there is 30x32");
  }
}

TEST_CASE("head-type scores on hand-built patterns", "[interpret][scores]") {
  const Index n = 6;
  // Previous-token head: row i puts all its weight on i - 1 (row 0 on itself).
  Matrix<double> previous = Matrix<double>::Zero(n, n);
  previous(0, 0) = 1;
  for (Index i = 1; i < n; ++i) previous(i, i - 1) = 1;
  CHECK(interpret::previous_token_score(previous) == 1.0);
  CHECK(interpret::first_token_score(previous) == 0.2);  // only row 1 looks at token 0: 1 / 5

  // Sink: everything on token 0.
  Matrix<double> sink = Matrix<double>::Zero(n, n);
  sink.col(0).setOnes();
  CHECK(interpret::first_token_score(sink) == 1.0);
  CHECK(interpret::previous_token_score(sink) == 0.2);

  // Tokens A B C A B C: a duplicate-token head looks at the earlier copy, an induction head at
  // what followed it.
  const std::vector<Index> tokens = {1, 2, 3, 1, 2, 3};
  Matrix<double> duplicate = Matrix<double>::Identity(n, n), induction = Matrix<double>::Identity(n, n);
  for (Index i = 3; i < n; ++i) {
    duplicate.row(i).setZero();
    duplicate(i, i - 3) = 1;
    induction.row(i).setZero();
    induction(i, i - 2) = 1;
  }
  CHECK(interpret::duplicate_token_score(duplicate, tokens) == 1.0);
  CHECK(interpret::induction_score(duplicate, tokens) == 0.0);
  CHECK(interpret::induction_score(induction, tokens) == 1.0);
  CHECK(interpret::duplicate_token_score(induction, tokens) == 0.0);
  // Half and half.
  Matrix<double> mixed = 0.5 * duplicate + 0.5 * induction;
  CHECK(interpret::duplicate_token_score(mixed, tokens) == 0.5);
  CHECK(interpret::induction_score(mixed, tokens) == 0.5);
  // No repeats: nothing to score.
  CHECK(interpret::duplicate_token_score(duplicate, {1, 2, 3, 4, 5, 6}) == 0.0);

  REQUIRE_THROWS_WITH(interpret::induction_score(duplicate, {1, 2}),
                      "headwise: induction_score: there are 2 tokens for a pattern of 6 rows");
  REQUIRE_THROWS_WITH(interpret::previous_token_score(Matrix<double>(Matrix<double>::Zero(2, 3))),
                      "headwise: previous_token_score: the pattern is 2x3, expected square");
}

TEMPLATE_TEST_CASE("attribution patching agrees with activation patching, head by head", "[interpret][attribution]",
                   float, double) {
  std::mt19937 rng(21);
  const auto layer = headwise_test::random_layer<TestType>(32, 4, 2, rng, 2.0);
  const Matrix<TestType> clean = headwise_test::random_matrix<TestType>(20, 32, rng);
  Matrix<TestType> corrupted = clean;
  corrupted.row(3) = headwise_test::random_row<TestType>(32, rng);  // one token changed
  Matrix<TestType> direction = Matrix<TestType>::Zero(20, 32);
  direction(19, 0) = 1, direction(19, 1) = -1;  // a "logit difference" at the last position
  const auto a = interpret::attribution_patching(layer, clean, corrupted, direction);
  const Matrix<TestType> z_corrupt = layer.head_outputs(corrupted);
  const auto metric = [&](const Matrix<TestType>& out) { return double(out.cwiseProduct(direction).sum()); };
  const double base = metric(layer.forward(clean));
  Eigen::VectorXd patched(4);
  for (Index h = 0; h < 4; ++h) {
    patched(h) = metric(layer.forward(clean, {}, patch_head<TestType>(h, z_corrupt.middleCols(h * 8, 8)))) - base;
  }
  CAPTURE(patched.transpose(), a.per_head.transpose());
  CHECK_THAT(headwise_test::as_double(a.per_head), IsNear(patched, 100 * tolerance<TestType>()));
  for (Index h = 0; h < 4; ++h) CHECK((a.per_head(h) > 0) == (patched(h) > 0));
  // Before the changed token nothing changes: no attribution at positions 0..2.
  CHECK((a.per_position.leftCols(3).array() == TestType(0)).all());
}

TEMPLATE_TEST_CASE("attribution patching on toy heads: same sign and ranking as activation patching", "[interpret][attribution]",
                   float, double) {
  // Hand-made heads on x = [onehot(token) | onehot(position)] (8 tokens, 10 positions): previous
  // token, duplicate token, first-token sink, and a head that attends evenly. Each copies the token
  // it attends to (W_V) into the output (W_O); the metric reads token 5 minus token 2 at the last
  // position. The corrupted run changes the token at position 8 (from 5 to 2).
  constexpr Index vocabulary = 8, length = 10, d_model = vocabulary + length, d_head = 10, heads = 4;
  const TestType c = 6;
  MultiHeadWeights<TestType> w;
  w.w_q = Matrix<TestType>::Zero(d_model, heads * d_head), w.w_k = w.w_q, w.w_v = w.w_q;
  w.w_o = Matrix<TestType>::Zero(heads * d_head, d_model);
  for (Index p = 0; p + 1 < length; ++p) {  // head 0: position i looks at i - 1
    w.w_q(vocabulary + p + 1, p) = c;
    w.w_k(vocabulary + p, p) = c;
  }
  for (Index t = 0; t < vocabulary; ++t) w.w_q(t, d_head + t) = c, w.w_k(t, d_head + t) = c;  // head 1: same token
  for (Index t = 0; t < vocabulary; ++t) w.w_q(t, 2 * d_head) = c;  // head 2: every query to position 0
  w.w_k(vocabulary, 2 * d_head) = c;
  for (Index h = 0; h < heads; ++h)
    for (Index t = 0; t < vocabulary; ++t) w.w_v(t, h * d_head + t) = 1, w.w_o(h * d_head + t, t) = TestType(1 + h);
  const MultiHeadAttention<TestType> layer(heads, std::move(w));
  const std::vector<Index> tokens{3, 1, 4, 1, 5, 2, 6, 3, 5, 5};
  Matrix<TestType> clean = Matrix<TestType>::Zero(length, d_model);
  for (Index i = 0; i < length; ++i) clean(i, tokens[static_cast<std::size_t>(i)]) = 1, clean(i, vocabulary + i) = 1;
  Matrix<TestType> corrupted = clean;
  corrupted(8, 5) = 0, corrupted(8, 2) = 1;
  Matrix<TestType> direction = Matrix<TestType>::Zero(length, d_model);
  direction(length - 1, 5) = 1, direction(length - 1, 2) = -1;
  const auto a = interpret::attribution_patching(layer, clean, corrupted, direction);
  const Matrix<TestType> z_corrupt = layer.head_outputs(corrupted);
  const auto metric = [&](const Matrix<TestType>& out) { return double(out.cwiseProduct(direction).sum()); };
  const double base = metric(layer.forward(clean));
  Eigen::VectorXd patched(heads), estimated = headwise_test::as_double(a.per_head);
  for (Index h = 0; h < heads; ++h) {
    patched(h) = metric(layer.forward(clean, {}, patch_head<TestType>(h, z_corrupt.middleCols(h * d_head, d_head)))) - base;
  }
  CAPTURE(patched.transpose(), estimated.transpose());
  CHECK(patched(0) < -0.5);  // the previous-token head carried token 5 from position 8 to 9
  for (Index h = 0; h < heads; ++h)
    if (std::abs(patched(h)) > 1e-3) CHECK((estimated(h) > 0) == (patched(h) > 0));
  std::vector<Index> by_patching{0, 1, 2, 3}, by_estimate{0, 1, 2, 3};
  std::sort(by_patching.begin(), by_patching.end(), [&](Index x, Index y) { return std::abs(patched(x)) > std::abs(patched(y)); });
  std::sort(by_estimate.begin(), by_estimate.end(), [&](Index x, Index y) { return std::abs(estimated(x)) > std::abs(estimated(y)); });
  CHECK(by_patching == by_estimate);
}
