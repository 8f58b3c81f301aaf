// Linear: y = x W + b with W stored [in, out].
#include "headwise/linear.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"

using namespace headwise;

TEMPLATE_TEST_CASE("Linear maps row vectors with W stored [in, out]", "[linear]", float, double) {
  Matrix<TestType> w(2, 3), x(2, 2), expected(2, 3);
  w << 1, 2, 3, 4, 5, 6;
  RowVector<TestType> b(3);
  b << 10, 20, 30;
  x << 1, 0, 0, 1;
  expected << 11, 22, 33, 14, 25, 36;  // row i of x picks row i of W, plus the bias
  const Linear<TestType> with_bias(w, b);
  CHECK_THAT(headwise_test::as_double(with_bias.forward(x)), headwise_test::IsExactly(expected));
  CHECK(with_bias.has_bias());
  CHECK(with_bias.in_features() == 2);
  CHECK(with_bias.out_features() == 3);

  const Linear<TestType> without_bias(w);
  CHECK_FALSE(without_bias.has_bias());
  CHECK_THAT(headwise_test::as_double(without_bias.forward(x)), headwise_test::IsExactly(w));

  SECTION("n = 0 rows gives an empty result") {
    CHECK(with_bias.forward(Matrix<TestType>(0, 2)).rows() == 0);
  }
  SECTION("errors name the shapes") {
    REQUIRE_THROWS_WITH(with_bias.forward(Matrix<TestType>::Zero(2, 3)),
                        "headwise: Linear::forward: x has 3 columns, expected in = 2");
    REQUIRE_THROWS_WITH(Linear<TestType>(w, RowVector<TestType>::Zero(2)),
                        "headwise: Linear: bias has 2 entries, expected 0 or out = 3");
  }
}
