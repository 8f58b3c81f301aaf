// A randomized differential test: the fused kernel against the step-by-step core (and both against
// the plain-loop float64 reference) over random shapes: n_q different from n_k, 0 and 1 rows, d_head
// from 1 to 128, grouped-query heads, causal or not, any divisor, any tile sizes, 1 to 3 threads,
// and scores from 1e-3 to 1e4 in magnitude.
//
// The tolerance scales with the scores: a score s is rounded to s (1 + eps), which moves exp(s - m)
// by a relative eps |s|, so at scores of 1e4 float32 cannot promise more than about 1e-3. The
// bound used is c eps (1 + max|s|) max|v| (plus the sum's own rounding), the same for every case.
#include <algorithm>
#include <cmath>
#include <random>

#include "headwise/attention_core.hpp"
#include "headwise/attend.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

using namespace headwise;

namespace {

struct Case {
  Index n_q, n_k, d_head, n_heads, n_kv_heads;
  bool causal;
  double divisor;
  double score_scale;  // the queries are multiplied by this
  FusedTiles tiles;
  int threads;
};

Case random_case(std::mt19937& rng) {
  auto pick = [&](Index lo, Index hi) { return std::uniform_int_distribution<Index>(lo, hi)(rng); };
  Case c{};
  const Index kv_choices[] = {1, 2, 3};
  c.n_kv_heads = kv_choices[pick(0, 2)];
  c.n_heads = c.n_kv_heads * pick(1, 3);
  // d_head log-uniform over [1, 128]; n_k and n_q keep each case under ~1e6 multiply-adds.
  c.d_head = std::clamp<Index>(static_cast<Index>(std::exp2(std::uniform_real_distribution<double>(0, 7)(rng))), 1, 128);
  const Index budget = 1000000 / (c.d_head * c.n_heads);
  const Index n_max = std::clamp<Index>(static_cast<Index>(std::sqrt(double(budget))), 2, 300);
  const Index shape = pick(0, 9);
  c.n_k = shape == 0 ? 0 : shape == 1 ? 1 : pick(2, n_max);
  c.n_q = shape < 4 ? pick(0, 2) : pick(0, c.n_k + 3);  // 0 and 1 rows often; n_q > n_k sometimes
  c.causal = pick(0, 3) != 0;
  c.divisor = pick(0, 1) ? std::sqrt(double(c.d_head)) : std::uniform_real_distribution<double>(0.25, 20)(rng);
  const double scales[] = {1e-3, 1, 10, 100, 1e3, 1e4};
  c.score_scale = scales[pick(0, 5)];
  c.tiles = FusedTiles{pick(1, 160), pick(1, 160)};
  c.threads = static_cast<int>(pick(1, 3));
  return c;
}

/// The largest |s_ij| / divisor any query sees, in float64.
double largest_score(const Eigen::MatrixXd& q, const Eigen::MatrixXd& k, double divisor) {
  if (q.size() == 0 || k.size() == 0) return 0;
  return (q * k.transpose()).cwiseAbs().maxCoeff() / divisor;
}

}  // namespace

TEMPLATE_TEST_CASE("fused equals step-by-step over random shapes, tiles and thread counts", "[differential][fused]",
                   float, double) {
  const double eps = std::numeric_limits<TestType>::epsilon();
  std::mt19937 rng(2024);
#ifdef HEADWISE_TESTS_UNDER_SANITIZERS
  constexpr int trials = 20;  // the native builds run all 120, on each instruction set; here, what ASan sees of them
#else
  constexpr int trials = 120;
#endif
  for (int trial = 0; trial < trials; ++trial) {
    const Case c = random_case(rng);
    CAPTURE(trial, c.n_q, c.n_k, c.d_head, c.n_heads, c.n_kv_heads, c.causal, c.divisor, c.score_scale,
            c.tiles.queries, c.tiles.keys, c.threads);
    // q has entries of size score_scale / sqrt(d_head), so that |q·k| is about score_scale.
    const double q_size = c.score_scale / std::sqrt(double(c.d_head));
    const Matrix<TestType> q = headwise_test::random_matrix<TestType>(c.n_q, c.n_heads * c.d_head, rng, q_size);
    const Matrix<TestType> k = headwise_test::random_matrix<TestType>(c.n_k, c.n_kv_heads * c.d_head, rng);
    const Matrix<TestType> v = headwise_test::random_matrix<TestType>(c.n_k, c.n_kv_heads * c.d_head, rng);
    AttentionOptions options;
    options.causal = c.causal;
    options.divisor = c.divisor;
    options.threads = c.threads;

    AttentionCall call;
    call.heads = {c.n_heads, c.n_kv_heads}, call.options = &options, call.logsumexp = true, call.tiles = c.tiles;
    const AttentionResult<TestType> fused = attend<TestType>(q, k, v, call);

    for (Index h = 0; h < c.n_heads; ++h) {
      CAPTURE(h);
      const Index g = h / (c.n_heads / c.n_kv_heads);
      const Matrix<TestType> q_h = q.middleCols(h * c.d_head, c.d_head);
      const Matrix<TestType> k_h = k.middleCols(g * c.d_head, c.d_head), v_h = v.middleCols(g * c.d_head, c.d_head);
      const auto step = attention(q_h, k_h, v_h, options);
      const Eigen::MatrixXd qd = headwise_test::as_double(q_h), kd = headwise_test::as_double(k_h);
      const Eigen::MatrixXd vd = headwise_test::as_double(v_h);
      const Eigen::MatrixXd reference = headwise_test::reference_attention(qd, kd, vd, c.divisor, c.causal);

      // |Δz| <= 8 eps (1 + max|s|) max|v| + a sum of up to n_k rounded terms; relative to max|z|.
      const double v_max = vd.size() ? vd.cwiseAbs().maxCoeff() : 1.0;
      const double allowed = 8 * eps * (1 + largest_score(qd, kd, c.divisor) + std::sqrt(double(c.n_k + 1))) * v_max;
      const double rel = allowed / std::max(reference.size() ? reference.cwiseAbs().maxCoeff() : 0.0, v_max / 4);
      const Eigen::MatrixXd fused_h = headwise_test::as_double(fused.z.middleCols(h * c.d_head, c.d_head));
      CHECK_THAT(fused_h, headwise_test::IsNear(reference, rel, v_max / 4));
      CHECK_THAT(fused_h, headwise_test::IsNear(headwise_test::as_double(step.z), 2 * rel, v_max / 4));
      // Rows that see nothing: exactly 0 and logsumexp -inf, on both paths.
      for (Index i = 0; i < c.n_q; ++i) {
        if (visible_keys(i, c.n_q, c.n_k, c.causal) > 0) continue;
        CHECK((fused.z.row(i).middleCols(h * c.d_head, c.d_head).array() == TestType(0)).all());
        CHECK(fused.logsumexp(h, i) == -std::numeric_limits<TestType>::infinity());
        CHECK(step.logsumexp(i) == -std::numeric_limits<TestType>::infinity());
      }
      // logsumexp of the rows that see something, against the step-by-step path's.
      for (Index i = 0; i < c.n_q; ++i)
        if (visible_keys(i, c.n_q, c.n_k, c.causal) > 0)
          CHECK_THAT(double(fused.logsumexp(h, i)), WithinAbs(double(step.logsumexp(i)),
                                                              16 * eps * (1 + largest_score(qd, kd, c.divisor))));
    }
  }
}
