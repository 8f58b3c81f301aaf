// attend(), the one attention call: on plain matrices and on a packed store, on the fused and the
// step-by-step path, against PyTorch's grouped-query case (Z and logsumexp), with statistics that
// agree between the paths, and every bad call refused by name.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "headwise/attend.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using Catch::Matchers::Contains;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {

/// PyTorch's gqa case: 8 query heads of 16 over 2 key/value heads, 29 tokens, heads side by side.
template <class Scalar>
struct GqaCase {
  Matrix<Scalar> q, k, v;
  Matrix<double> out, logsumexp;  // (29, 8 x 16) and (8, 29), from PyTorch
};

template <class Scalar>
GqaCase<Scalar> gqa_case() {
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  const Index n = 29, d = 16;
  GqaCase<Scalar> c{Matrix<Scalar>(n, 8 * d), Matrix<Scalar>(n, 2 * d), Matrix<Scalar>(n, 2 * d), Matrix<double>(n, 8 * d),
                    Matrix<double>(8, n)};
  for (Index h = 0; h < 8; ++h) {
    c.q.middleCols(h * d, d) = file.slice<Scalar>("gqa.q", h);
    c.out.middleCols(h * d, d) = file.slice<double>("gqa.out", h);
  }
  for (Index g = 0; g < 2; ++g) {
    c.k.middleCols(g * d, d) = file.slice<Scalar>("gqa.k", g);
    c.v.middleCols(g * d, d) = file.slice<Scalar>("gqa.v", g);
  }
  // Each row's logsumexp, by a float64 plain loop over the keys the row sees (scale 1/4).
  for (Index h = 0; h < 8; ++h) {
    const Matrix<double> q = file.slice<double>("gqa.q", h), k = file.slice<double>("gqa.k", h / 4);
    for (Index i = 0; i < n; ++i) {
      double top = -std::numeric_limits<double>::infinity(), sum = 0;
      for (Index j = 0; j <= i; ++j) top = std::max(top, q.row(i).dot(k.row(j)) / 4.0);
      for (Index j = 0; j <= i; ++j) sum += std::exp(q.row(i).dot(k.row(j)) / 4.0 - top);
      c.logsumexp(h, i) = top + std::log(sum);
    }
  }
  return c;
}

}  // namespace

TEMPLATE_TEST_CASE("attend: PyTorch's grouped-query case on both paths, from matrices and from a packed store",
                   "[attend][fixture]", float, double) {
  const GqaCase<TestType> c = gqa_case<TestType>();
  AttentionCall call;
  call.heads = {8, 2};
  call.logsumexp = true;
  PackedKeysValues<TestType> kv(c.k.rows(), 2, 16, 16);
  kv.append(c.k, c.v);
  for (const AttentionPath path : {AttentionPath::fused, AttentionPath::step_by_step}) {
    CAPTURE(path == AttentionPath::fused);
    call.path = path;
    const AttentionResult<TestType> from_matrices = attend<TestType>(c.q, c.k, c.v, call);
    CHECK_THAT(headwise_test::as_double(from_matrices.z), IsNear(c.out, tolerance<TestType>()));
    CHECK_THAT(headwise_test::as_double(from_matrices.logsumexp), IsNear(c.logsumexp, tolerance<TestType>()));
    CHECK(from_matrices.statistics.entropy.size() == 0);  // not asked for
    // The same call on the packed store: the same bits.
    const AttentionResult<TestType> from_store = attend<TestType>(c.q, kv, call);
    CHECK_THAT(headwise_test::as_double(from_store.z), IsExactly(from_matrices.z));
    CHECK_THAT(headwise_test::as_double(from_store.logsumexp), IsExactly(from_matrices.logsumexp));
  }
}

TEMPLATE_TEST_CASE("attend: the statistics of both paths agree, with options that hide and modify scores",
                   "[attend][statistics]", float, double) {
  std::mt19937 rng(3);
  const Index n = 70;
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, 4 * 8, rng),
                         k = headwise_test::random_matrix<TestType>(n, 2 * 8, rng),
                         v = headwise_test::random_matrix<TestType>(n, 2 * 8, rng);
  AttentionOptions options;
  options.window = 20;
  options.softcap = 5.0;
  options.sinks = Vector<double>::Constant(4, 0.5);
  AttentionCall call;
  call.heads = {4, 2};
  call.options = &options;
  call.statistics = true;
  const AttentionResult<TestType> fused = attend<TestType>(q, k, v, call);
  call.path = AttentionPath::step_by_step;
  const AttentionResult<TestType> step = attend<TestType>(q, k, v, call);
  const double tol = 20 * tolerance<TestType>();
  CHECK_THAT(headwise_test::as_double(fused.z), IsNear(step.z, tol));
  CHECK_THAT(headwise_test::as_double(fused.statistics.entropy), IsNear(step.statistics.entropy, tol, tol));
  CHECK_THAT(headwise_test::as_double(fused.statistics.first_token_mass), IsNear(step.statistics.first_token_mass, tol, tol));
  CHECK_THAT(headwise_test::as_double(fused.statistics.previous_token_mass),
             IsNear(step.statistics.previous_token_mass, tol, tol));
  CHECK_THAT(headwise_test::as_double(fused.statistics.max_weight), IsNear(step.statistics.max_weight, tol, tol));
  // Argmax: the same key wherever the largest weight is clearly the largest.
  Index differ = 0;
  for (Index h = 0; h < 4; ++h)
    for (Index i = 0; i < n; ++i) differ += fused.statistics.argmax(h, i) != step.statistics.argmax(h, i);
  CHECK(differ <= 2);
}

TEMPLATE_TEST_CASE("attend: bad calls are refused by name", "[attend][errors]", float, double) {
  std::mt19937 rng(4);
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(5, 16, rng), kv_rows = headwise_test::random_matrix<TestType>(5, 8, rng);
  AttentionCall call;
  call.heads = {2, 1};
  CHECK(attend<TestType>(q, kv_rows, kv_rows, call).z.cols() == 16);
  call.heads = {3, 1};
  CHECK_THROWS_WITH(attend<TestType>(q, kv_rows, kv_rows, call), "headwise: attend: q has 16 columns, not divisible by n_heads = 3");
  call.heads = {2, 0};
  CHECK_THROWS_WITH(attend<TestType>(q, kv_rows, kv_rows, call),
                    "headwise: attend: n_heads and n_kv_heads must be > 0, got 2 and 0");
  call.heads = {2, 2};
  CHECK_THROWS_WITH(attend<TestType>(q, kv_rows, kv_rows, call),
                    "headwise: attend: k has 8 columns, expected n_kv_heads d_head = 16");
  PackedKeysValues<TestType> kv(5, 1, 8, 8);
  kv.append(kv_rows, kv_rows);
  CHECK_THROWS_WITH(attend<TestType>(q, kv, call), "headwise: attend: n_kv_heads = 2 but the store holds 1 key/value heads");
  call.heads = {-4, 1};  // refused before anything is sized by it
  CHECK_THROWS_WITH(attend<TestType>(q, kv, call), "headwise: attend: q has 16 columns, expected n_heads d_head = -4 x 8");
  call.heads = {2, 1};
  AttentionOptions bad;
  bad.threads = -2;
  call.options = &bad;
  CHECK_THROWS_WITH(attend<TestType>(q, kv, call), Contains("headwise: attend: threads must be in [0, 1024]"));
  Matrix<TestType> nan_q = q;
  nan_q(1, 2) = std::numeric_limits<TestType>::quiet_NaN();
  call.options = nullptr;
  for (const AttentionPath path : {AttentionPath::fused, AttentionPath::step_by_step}) {
    call.path = path;
    CHECK_THROWS_WITH(attend<TestType>(nan_q, kv_rows, kv_rows, call), Contains("headwise: attend: q has a non-finite value"));
  }
  std::vector<NoPhaseObserver> observers;
  CHECK_THROWS_WITH(attend<TestType>(q, kv, call, observers), "headwise: attend: observers watch the fused path only");
  call.path = AttentionPath::fused;
  CHECK(attend<TestType>(q, kv, call, observers).z.rows() == 5);
  CHECK(!observers.empty());  // one per thread that ran
}
