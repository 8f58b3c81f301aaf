// The worked example "the cat sat" (docs/the-cat-sat.md): every number the text prints, at
// its printed precision, and what the text calls exact, exactly.
#include <cmath>
#include <limits>

#include "headwise/headwise.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;

namespace {

template <class Scalar>
AttentionHead<Scalar> the_cat_sat_head() {
  Matrix<Scalar> w_q(4, 2), w_k(4, 2), w_v(4, 2);
  w_q << 1, 0, 0, 1, 0, 1, 1, 0;
  w_k << 1, 0, 1, 1, 0, 1, 0, 0;
  w_v << 0, 1, 1, 0, 1, 1, 0, -1;
  return AttentionHead<Scalar>(Linear<Scalar>(w_q), Linear<Scalar>(w_k), Linear<Scalar>(w_v));
}

template <class Scalar>
Matrix<Scalar> the_cat_sat_x() {
  Matrix<Scalar> x(3, 4);
  x << 1, 0, 1, 0,  // the
      0, 1, 1, 0,   // cat
      1, 1, 0, 1;   // sat
  return x;
}

// A printed value v with `decimals` decimals stands for the interval v +- half a unit in the last place.
void check_printed(double actual, double printed, int decimals) {
  CHECK_THAT(actual, WithinAbs(printed, 0.5 * std::pow(10.0, -decimals)));
}

}  // namespace

TEMPLATE_TEST_CASE("the cat sat: every intermediate the text prints", "[worked-example]", float, double) {
  const auto t = the_cat_sat_head<TestType>().trace(the_cat_sat_x<TestType>());

  Matrix<TestType> q(3, 2), k(3, 2), v(3, 2), s(3, 3);
  q << 1, 1, 0, 2, 2, 1;
  k << 1, 1, 1, 2, 2, 1;
  v << 1, 2, 2, 1, 1, 0;
  s << 2, 3, 3, 2, 4, 2, 3, 4, 5;
  // Small integers: the projections and the raw scores are exact in float and double.
  CHECK_THAT(headwise_test::as_double(t.q), IsExactly(q));
  CHECK_THAT(headwise_test::as_double(t.k), IsExactly(k));
  CHECK_THAT(headwise_test::as_double(t.v), IsExactly(v));
  CHECK_THAT(headwise_test::as_double(t.scores), IsExactly(s));

  SECTION("q3 = (1,1,0,1) W_Q = (2, 1) and S32 = q3 . k2 = 4, exactly") {
    CHECK(t.q(2, 0) == TestType(2));
    CHECK(t.q(2, 1) == TestType(1));
    CHECK(t.scores(2, 1) == TestType(4));
  }

  SECTION("the divisor is sqrt(d_head) = sqrt(2) ~ 1.414") {
    CHECK(t.divisor == std::sqrt(2.0));
    check_printed(t.divisor, 1.414, 3);
  }

  SECTION("scaled, masked scores: 5 decimals, -inf above the diagonal") {
    const double inf = std::numeric_limits<double>::infinity();
    const double expected[3][3] = {{1.41421, -inf, -inf}, {1.41421, 2.82843, -inf}, {2.12132, 2.82843, 3.53553}};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        CAPTURE(i, j);
        if (j > i) CHECK(t.masked_scores(i, j) == -std::numeric_limits<TestType>::infinity());
        else check_printed(t.masked_scores(i, j), expected[i][j], 5);
      }
    // The text's row 3: (2.12, 2.83, 3.54).
    check_printed(t.masked_scores(2, 0), 2.12, 2);
    check_printed(t.masked_scores(2, 1), 2.83, 2);
    check_printed(t.masked_scores(2, 2), 3.54, 2);
  }

  SECTION("row 3 of the softmax, as the text works it") {
    const auto row = t.scaled_scores.row(2).template cast<double>();
    const double max = row.maxCoeff();
    check_printed(max, 3.54, 2);
    check_printed(row(0) - max, -1.41, 2);
    check_printed(row(1) - max, -0.71, 2);
    CHECK(row(2) - max == 0.0);
    const double e0 = std::exp(row(0) - max), e1 = std::exp(row(1) - max), e2 = std::exp(row(2) - max);
    check_printed(e0, 0.243, 3);
    check_printed(e1, 0.493, 3);
    CHECK(e2 == 1.0);
    check_printed(e0 + e1 + e2, 1.736, 3);
    // The library's logsumexp is log of that sum plus the max.
    CHECK_THAT(double(t.logsumexp(2)), WithinRel(max + std::log(e0 + e1 + e2), headwise_test::tolerance<TestType>()));
  }

  SECTION("the attention pattern A: the reconstruction's block, masked entries exactly 0") {
    // docs/the-cat-sat.md's 5-decimal block, at its printed precision; the float64 fixtures check
    // the softmax to 1e-12.
    const double expected[3][3] = {{1, 0, 0}, {0.19557, 0.80443, 0}, {0.14003, 0.28400, 0.57598}};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        CAPTURE(i, j);
        if (j > i) CHECK(t.weights(i, j) == TestType(0));
        else check_printed(t.weights(i, j), expected[i][j], 5);
      }
    check_printed(t.weights(2, 0), 0.140, 3);
    check_printed(t.weights(2, 1), 0.284, 3);
    check_printed(t.weights(2, 2), 0.576, 3);
    CHECK(t.weights(0, 0) == TestType(1));
  }

  SECTION("the output A V: row 1 is v1 bit for bit, row 3 is (1.284, 0.564)") {
    CHECK(t.z(0, 0) == t.v(0, 0));
    CHECK(t.z(0, 1) == t.v(0, 1));
    CHECK(t.z(0, 0) == TestType(1));
    CHECK(t.z(0, 1) == TestType(2));
    const double expected[3][2] = {{1, 2}, {1.80443, 1.19557}, {1.28400, 0.56405}};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) {
        CAPTURE(i, j);
        check_printed(t.z(i, j), expected[i][j], 5);
      }
    check_printed(t.z(2, 0), 1.284, 3);
    check_printed(t.z(2, 1), 0.564, 3);
    // The text's sum: 0.140 (1,2) + 0.284 (2,1) + 0.576 (1,0).
    check_printed(t.weights(2, 0) * 1 + t.weights(2, 1) * 2 + t.weights(2, 2) * 1, 1.284, 3);
  }

  SECTION("forward, without the trace, gives the same printed output") {
    const Matrix<TestType> z = the_cat_sat_head<TestType>().forward(the_cat_sat_x<TestType>());
    const double expected[3][2] = {{1, 2}, {1.80443, 1.19557}, {1.28400, 0.56405}};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) check_printed(z(i, j), expected[i][j], 5);
    check_printed(z(2, 0), 1.284, 3);
    check_printed(z(2, 1), 0.564, 3);
    CHECK(z(0, 0) == TestType(1));
    CHECK(z(0, 1) == TestType(2));
  }
}
