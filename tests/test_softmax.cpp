// Row softmax under the causal mask.
#include <cmath>
#include <limits>
#include <random>

#include "headwise/softmax.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;

TEMPLATE_TEST_CASE("softmax rows: a distribution over the visible prefix, exact zeros after it",
                   "[softmax]", float, double) {
  const Index n = GENERATE(1, 2, 7, 33);
  const bool causal = GENERATE(true, false);
  CAPTURE(n, causal);
  std::mt19937 rng(static_cast<unsigned>(n));
  Matrix<TestType> s = headwise_test::random_matrix<TestType>(n, n, rng, 3.0);
  const Matrix<TestType> original = s;
  const Vector<TestType> lse = softmax_rows(s, causal);
  for (Index i = 0; i < n; ++i) {
    CAPTURE(i);
    const Index seen = causal ? i + 1 : n;
    CHECK_THAT(double(s.row(i).sum()), WithinAbs(1.0, 10 * std::numeric_limits<TestType>::epsilon()));
    CHECK((s.row(i).tail(n - seen).array() == TestType(0)).all());
    CHECK((s.row(i).head(seen).array() > TestType(0)).all());
    // logsumexp, computed here in double from the original scores.
    double sum = 0;
    for (Index j = 0; j < seen; ++j) sum += std::exp(double(original(i, j)));
    CHECK_THAT(double(lse(i)), WithinRel(std::log(sum), headwise_test::tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("softmax rows: no overflow at +-1e4, a row that sees nothing is zeros",
                   "[softmax]", float, double) {
  Matrix<TestType> s(2, 3);
  s << 1e4, -1e4, 5e3,  //
      -1e4, 1e4, 1e4;
  Matrix<TestType> a = s;
  softmax_rows(a, /*causal=*/false);
  REQUIRE(a.allFinite());
  CHECK(a(0, 0) == TestType(1));
  CHECK(a(0, 1) < TestType(1e-30));  // exp(-2e4): 0 to the type's precision
  CHECK_THAT(double(a(1, 1)), WithinRel(0.5, 1e-6));

  // Three queries against one key: the first two see nothing.
  Matrix<TestType> wide = Matrix<TestType>::Constant(3, 1, 2);
  const Vector<TestType> lse = softmax_rows(wide, /*causal=*/true);
  CHECK(wide(0, 0) == TestType(0));
  CHECK(wide(1, 0) == TestType(0));
  CHECK(wide(2, 0) == TestType(1));
  CHECK(lse(0) == -std::numeric_limits<TestType>::infinity());
  CHECK(lse(2) == TestType(2));

  Matrix<TestType> empty(0, 0);
  CHECK(softmax_rows(empty).size() == 0);
}
