// The gated delta rule: the chunked form (DeltaRuleState) against the token-by-token recurrence
// (recurrent_delta_rule, the definition), over several chunks and from a given state; tokens
// given in any split get the bits of one call; bad sizes refused by name.
#include <random>
#include <vector>

#include "headwise/delta_rule.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"

using namespace headwise;
using headwise_test::IsNear;

namespace {
template <class Scalar>
Matrix<double> wide(const Matrix<Scalar>& m) { return m.template cast<double>(); }
/// Random inputs for one head: unit-length keys, scaled queries, β in (0, 1), g <= 0.
template <class Scalar>
struct Inputs {
  Matrix<Scalar> q, k, v, beta, g;
  Inputs(Index n, Index d_k, Index d_v, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    q.resize(n, d_k), k.resize(n, d_k), v.resize(n, d_v), beta.resize(n, 1), g.resize(n, 1);
    for (Index t = 0; t < n; ++t) {
      for (Index i = 0; i < d_k; ++i) q(t, i) = Scalar(normal(rng) / std::sqrt(double(d_k))), k(t, i) = Scalar(normal(rng));
      k.row(t).normalize();
      for (Index c = 0; c < d_v; ++c) v(t, c) = Scalar(normal(rng));
      beta(t, 0) = Scalar(unit(rng)), g(t, 0) = Scalar(-0.3 * unit(rng));
    }
  }
  DeltaRuleInputs<Scalar> rows(Index first, Index n) const {
    return {{q.data() + first * q.cols(), q.cols()}, {k.data() + first * k.cols(), k.cols()}, {v.data() + first * v.cols(), v.cols()},
            {beta.data() + first, 1}, {g.data() + first, 1}, n};
  }
};
}  // namespace

TEMPLATE_TEST_CASE("The chunked delta rule gives the recurrence's outputs and state, over several chunks and from a given state",
                   "[delta_rule]", float, double) {
  const Index n = 150, d_k = 16, d_v = 12;
  const auto [chunk, seed] = GENERATE(table<Index, unsigned>({{64, 1}, {8, 2}, {5, 3}, {1, 4}, {200, 5}}));
  CAPTURE(chunk, seed);
  const Inputs<TestType> in(n, d_k, d_v, seed);
  const double tol = std::is_same_v<TestType, float> ? 1e-5 : 1e-12;
  // from a zero state
  Matrix<TestType> s = Matrix<TestType>::Zero(d_k, d_v);
  const Matrix<TestType> expected = recurrent_delta_rule(in.rows(0, n), s);
  DeltaRuleState<TestType> state(d_k, d_v, chunk);
  Matrix<TestType> o(n, d_v);
  DeltaRuleScratch<TestType> scratch;
  state.advance(in.rows(0, n), o.data(), d_v, scratch);
  CHECK_THAT(wide<TestType>(o), IsNear(expected, tol));
  CHECK_THAT(wide<TestType>(state.state()), IsNear(s, tol));
  // from the state after the first 37 tokens, set from outside
  Matrix<TestType> s37 = Matrix<TestType>::Zero(d_k, d_v);
  recurrent_delta_rule(in.rows(0, 37), s37);
  DeltaRuleState<TestType> resumed(d_k, d_v, chunk);
  resumed.set_state(s37);
  Matrix<TestType> rest(n - 37, d_v);
  resumed.advance(in.rows(37, n - 37), rest.data(), d_v, scratch);
  CHECK_THAT(wide<TestType>(rest), IsNear(Matrix<TestType>(expected.bottomRows(n - 37)), tol));
}

TEMPLATE_TEST_CASE("The chunked delta rule: tokens in any split get the bits of one call", "[delta_rule]", float, double) {
  // (d_v: at least three panels in every build, the last one partly filled: a short call's
  // products take S_0's panels two at a time, then the one left)
  const Index n = 140, d_k = 32, d_v = 72, chunk = 64;
  const Inputs<TestType> in(n, d_k, d_v, 7);
  DeltaRuleScratch<TestType> scratch;
  DeltaRuleState<TestType> whole(d_k, d_v, chunk);
  Matrix<TestType> all(n, d_v);
  whole.advance(in.rows(0, n), all.data(), d_v, scratch);
  for (const Index piece : {Index(1), Index(2), Index(3), Index(63), Index(64), Index(100)}) {
    CAPTURE(piece);
    DeltaRuleState<TestType> split(d_k, d_v, chunk);
    Matrix<TestType> o(n, d_v);
    for (Index t = 0; t < n; t += piece) {
      const Index m = std::min(piece, n - t);
      split.advance(in.rows(t, m), o.data() + t * d_v, d_v, scratch);
      CHECK(split.open_rows() == (t + m) % chunk);
    }
    CHECK_THAT(wide(o), headwise_test::IsExactly(all));
    CHECK_THAT(wide<TestType>(split.state()), headwise_test::IsExactly(whole.state()));
  }
}

TEST_CASE("The delta rule's state: bad sizes are refused by name", "[delta_rule][errors]") {
  CHECK_THROWS_WITH(DeltaRuleState<float>(0, 4, 64), Catch::Contains("DeltaRuleState: d_k = 0"));
  DeltaRuleState<float> s(4, 4, 64);
  CHECK_THROWS_WITH(s.set_state(Matrix<float>::Zero(4, 3)), Catch::Contains("set_state: s is 4x3, the head's state 4x4"));
}
