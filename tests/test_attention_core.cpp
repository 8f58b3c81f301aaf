// The step-by-step attention core against PyTorch (sdpa-reference.safetensors) and a plain-loop
// float64 reference.
#include <random>

#include "headwise/attention_core.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

using namespace headwise;
using headwise_test::IsNear;
using headwise_test::tolerance;

TEMPLATE_TEST_CASE("attention core reproduces PyTorch's scaled_dot_product_attention", "[attention-core][fixture]",
                   float, double) {
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  struct Case {
    const char* out;
    bool causal;
    std::optional<double> divisor;
  };
  const Case cases[] = {{"causal.out", true, std::nullopt}, {"scale8.out", true, 8.0}, {"nomask.out", false, 4.0}};
  for (const Case& c : cases) {
    CAPTURE(c.out);
    AttentionOptions options;
    options.causal = c.causal;
    options.divisor = c.divisor;
    const Matrix<double> lse_all = file.matrix<double>("causal.logsumexp");
    for (Index h = 0; h < 4; ++h) {
      CAPTURE(h);
      const auto out = attention(file.slice<TestType>("causal.q", h), file.slice<TestType>("causal.k", h),
                                 file.slice<TestType>("causal.v", h), options);
      CHECK_THAT(headwise_test::as_double(out.z), IsNear(file.slice<double>(c.out, h), tolerance<TestType>()));
      if (std::string(c.out) == "causal.out")
        CHECK_THAT(headwise_test::as_double(out.logsumexp.transpose()), IsNear(lse_all.row(h), tolerance<TestType>()));
    }
  }
}

TEST_CASE("attention core: scores in the tens of thousands do not overflow (float64)", "[attention-core][fixture]") {
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  for (Index h = 0; h < 2; ++h) {
    const auto out = attention(file.slice<double>("large.q", h), file.slice<double>("large.k", h),
                               file.slice<double>("large.v", h));
    REQUIRE(out.z.allFinite());
    CHECK_THAT(headwise_test::as_double(out.z), IsNear(file.slice<double>("large.out", h), 1e-12));
  }
}

TEST_CASE("attention core: queries aligned to the end of the keys (decode case)", "[attention-core][fixture]") {
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  for (Index h = 0; h < 4; ++h) {
    const auto out = attention(file.slice<double>("decode.q", h), file.slice<double>("decode.k", h),
                               file.slice<double>("decode.v", h));
    CHECK_THAT(out.z, IsNear(file.slice<double>("decode.out", h), 1e-12));
  }
}

TEMPLATE_TEST_CASE("attention core equals a plain-loop float64 reference over random sizes", "[attention-core][property]",
                   float, double) {
  const Index n_q = GENERATE(0, 1, 2, 5, 17, 64);
  const Index extra_keys = GENERATE(0, 3);
  const Index d_head = GENERATE(1, 8, 24);
  const bool causal = GENERATE(true, false);
  const Index n_k = n_q + extra_keys;
  CAPTURE(n_q, n_k, d_head, causal);
  std::mt19937 rng(static_cast<unsigned>(n_q * 131 + d_head * 7 + extra_keys));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n_q, d_head, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n_k, d_head, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n_k, d_head, rng);
  AttentionOptions options;
  options.causal = causal;
  const auto out = attention(q, k, v, options);
  REQUIRE(out.z.rows() == n_q);
  const Eigen::MatrixXd expected = headwise_test::reference_attention(
      q.template cast<double>(), k.template cast<double>(), v.template cast<double>(), std::sqrt(double(d_head)), causal);
  CHECK_THAT(headwise_test::as_double(out.z), IsNear(expected, 10 * tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("attention weights: rows sum to 1, the strict upper triangle is exactly 0", "[attention-core][property]",
                   float, double) {
  const Index n = GENERATE(1, 3, 16, 50);
  CAPTURE(n);
  std::mt19937 rng(static_cast<unsigned>(n));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, 8, rng, 2.0);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, 8, rng, 2.0);
  const Matrix<TestType> a = attention_weights(q, k);
  for (Index i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK_THAT(double(a.row(i).sum()), WithinAbs(1.0, 1e-5));
    for (Index j = i + 1; j < n; ++j) CHECK(a(i, j) == TestType(0));
  }
}

TEMPLATE_TEST_CASE("attention core: bad shapes and divisors are refused", "[attention-core][errors]", float, double) {
  const Matrix<TestType> q = Matrix<TestType>::Ones(3, 4), k = Matrix<TestType>::Ones(3, 4);
  REQUIRE_THROWS_WITH(attention(q, Matrix<TestType>::Ones(3, 5), Matrix<TestType>::Ones(3, 4)),
                      "headwise: attention: q has 4 columns but k has 5 (both must be d_head)");
  REQUIRE_THROWS_WITH(attention(q, k, Matrix<TestType>::Ones(2, 4)),
                      "headwise: attention: v has 2 rows but k has 3 (one per key)");
  AttentionOptions options;
  options.divisor = -2.0;
  REQUIRE_THROWS_WITH(attention(q, k, k, options),
                      "headwise: attention_weights: divisor must be finite and > 0, got -2");
}
