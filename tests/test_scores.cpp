// Scaled scores: S = Q Kᵀ / divisor, and how the divisor is chosen.
#include <limits>

#include "headwise/options.hpp"
#include "headwise/scores.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"

using namespace headwise;

TEMPLATE_TEST_CASE("scaled scores divide Q Kᵀ by the divisor", "[scores]", float, double) {
  Matrix<TestType> q(2, 2), k(3, 2), s(2, 3);
  q << 1, 2, 3, 4;
  k << 1, 0, 0, 1, 1, 1;
  s << 1, 2, 3, 3, 4, 7;  // q_i . k_j by hand
  CHECK_THAT(headwise_test::as_double(scores(q, k)), headwise_test::IsExactly(s));
  CHECK_THAT(headwise_test::as_double(scaled_scores(q, k, 2.0)), headwise_test::IsExactly(s / 2));
  CHECK_THAT(headwise_test::as_double(scaled_scores(q, k, 1.0)), headwise_test::IsExactly(s));
  CHECK(default_divisor(64) == 8.0);

  SECTION("errors") {
    REQUIRE_THROWS_WITH(scores(q, Matrix<TestType>::Zero(3, 3)),
                        "headwise: scores: q has 2 columns but k has 3 (both must be d_head)");
    REQUIRE_THROWS_WITH(scaled_scores(q, k, 0.0),
                        "headwise: scaled_scores: divisor must be finite and > 0, got 0");
    REQUIRE_THROWS_WITH(scaled_scores(q, k, -1.0),
                        "headwise: scaled_scores: divisor must be finite and > 0, got -1");
    REQUIRE_THROWS_WITH(scaled_scores(q, k, std::numeric_limits<double>::quiet_NaN()),
                        "headwise: scaled_scores: divisor must be finite and > 0, got nan");
  }
}

TEST_CASE("the divisor of the options: sqrt(d_head) unless set, and checked", "[scores][options]") {
  AttentionOptions options;
  CHECK(resolve_divisor(options, 16, "test") == 4.0);
  options.divisor = 8.0;
  CHECK(resolve_divisor(options, 16, "test") == 8.0);
  options.divisor = std::numeric_limits<double>::infinity();
  REQUIRE_THROWS_WITH(resolve_divisor(options, 16, "test"),
                      "headwise: test: divisor must be finite and > 0, got inf");
}
