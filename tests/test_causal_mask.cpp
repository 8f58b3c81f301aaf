// The causal mask: which keys each query sees, and the -inf picture of masked scores.
#include <limits>

#include "headwise/causal_mask.hpp"
#include "support/catch.hpp"

using namespace headwise;

TEST_CASE("visible_keys: the lower triangle, aligned to the end of the keys", "[causal-mask]") {
  // Square: query i sees keys 0..i.
  CHECK(visible_keys(0, 3, 3, true) == 1);
  CHECK(visible_keys(2, 3, 3, true) == 3);
  // Decoding: 3 queries at positions 50, 51, 52 against 53 keys see 51, 52, 53 keys.
  CHECK(visible_keys(0, 3, 53, true) == 51);
  CHECK(visible_keys(2, 3, 53, true) == 53);
  // More queries than keys: the first ones see nothing.
  CHECK(visible_keys(0, 3, 1, true) == 0);
  CHECK(visible_keys(2, 3, 1, true) == 1);
  // No mask: everything.
  CHECK(visible_keys(0, 3, 3, false) == 3);
}

TEMPLATE_TEST_CASE("masked scores show -inf above the diagonal, for printing", "[causal-mask]", float, double) {
  Matrix<TestType> s(3, 3);
  s << 1, 2, 3, 4, 5, 6, 7, 8, 9;
  const Matrix<TestType> shown = masked_scores_for_display(s);
  const TestType inf = std::numeric_limits<TestType>::infinity();
  for (Index i = 0; i < 3; ++i)
    for (Index j = 0; j < 3; ++j) {
      CAPTURE(i, j);
      CHECK(shown(i, j) == (j > i ? -inf : s(i, j)));
    }
  const Matrix<TestType> unmasked = masked_scores_for_display(s, /*causal=*/false);
  CHECK((unmasked.array() == s.array()).all());
}
