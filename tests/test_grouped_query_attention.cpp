// Grouped-query attention: query head h reads key/value head h / (n_heads / n_kv_heads), by index.
#include <random>

#include "headwise/attention_core.hpp"
#include "headwise/attend.hpp"
#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsNear;
using headwise_test::tolerance;

TEMPLATE_TEST_CASE("PyTorch's gqa case through the step-by-step and the fused path", "[gqa][fixture]", float, double) {
  // 8 query heads, 2 key/value heads, scale 1/4.
  const auto file = headwise_test::load_fixture("sdpa-reference.safetensors");
  const Index n = 29, d = 16;
  Matrix<TestType> q(n, 8 * d), k(n, 2 * d), v(n, 2 * d);
  for (Index h = 0; h < 8; ++h) q.middleCols(h * d, d) = file.slice<TestType>("gqa.q", h);
  for (Index h = 0; h < 2; ++h) {
    k.middleCols(h * d, d) = file.slice<TestType>("gqa.k", h);
    v.middleCols(h * d, d) = file.slice<TestType>("gqa.v", h);
  }
  AttentionCall call;
  call.heads = {/*n_heads=*/8, /*n_kv_heads=*/2};
  const Matrix<TestType> z = attend<TestType>(q, k, v, call).z;
  for (Index h = 0; h < 8; ++h) {
    CAPTURE(h);
    const Matrix<double> expected = file.slice<double>("gqa.out", h);
    const Index g = h / 4;
    const auto step_by_step = attention(q.middleCols(h * d, d), k.middleCols(g * d, d), v.middleCols(g * d, d));
    CHECK_THAT(headwise_test::as_double(step_by_step.z), IsNear(expected, tolerance<TestType>()));
    CHECK_THAT(headwise_test::as_double(z.middleCols(h * d, d)), IsNear(expected, tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("a grouped-query layer equals the multi-head layer with its K and V heads repeated",
                   "[gqa][property]", float, double) {
  const Index n_kv_heads = GENERATE(1, 2, 3);
  const Index n = GENERATE(1, 40, 140);
  CAPTURE(n_kv_heads, n);
  const Index n_heads = 6, d_head = 8, d_model = n_heads * d_head;
  std::mt19937 rng(static_cast<unsigned>(n_kv_heads * 100 + n));
  MultiHeadWeights<TestType> w;
  w.w_q = headwise_test::random_matrix<TestType>(d_model, d_model, rng, 0.2);
  w.w_k = headwise_test::random_matrix<TestType>(d_model, n_kv_heads * d_head, rng, 0.2);
  w.w_v = headwise_test::random_matrix<TestType>(d_model, n_kv_heads * d_head, rng, 0.2);
  w.b_k = headwise_test::random_row<TestType>(n_kv_heads * d_head, rng, 0.1);
  w.w_o = headwise_test::random_matrix<TestType>(d_model, d_model, rng, 0.2);
  // The multi-head equivalent: key/value head h / group copied into head h.
  MultiHeadWeights<TestType> repeated = w;
  repeated.w_k.resize(d_model, d_model);
  repeated.w_v.resize(d_model, d_model);
  repeated.b_k.resize(d_model);
  const Index group = n_heads / n_kv_heads;
  for (Index h = 0; h < n_heads; ++h) {
    repeated.w_k.middleCols(h * d_head, d_head) = w.w_k.middleCols((h / group) * d_head, d_head);
    repeated.w_v.middleCols(h * d_head, d_head) = w.w_v.middleCols((h / group) * d_head, d_head);
    repeated.b_k.segment(h * d_head, d_head) = w.b_k.segment((h / group) * d_head, d_head);
  }
  const MultiHeadAttention<TestType> gqa(n_heads, w), mha(n_heads, repeated);
  CHECK(gqa.n_kv_heads() == n_kv_heads);
  CHECK(gqa.kv_head_of(n_heads - 1) == n_kv_heads - 1);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, d_model, rng);
  const Matrix<TestType> expected = mha.forward_step_by_step(x);
  CHECK_THAT(headwise_test::as_double(gqa.forward(x)), IsNear(expected, 10 * tolerance<TestType>()));
  CHECK_THAT(headwise_test::as_double(gqa.forward_step_by_step(x)), IsNear(expected, 10 * tolerance<TestType>()));
  CHECK_THAT(headwise_test::as_double(gqa.trace(x).output), IsNear(expected, 10 * tolerance<TestType>()));
  auto cache = gqa.make_cache(n);
  CHECK(cache.n_kv_heads() == n_kv_heads);
  CHECK_THAT(headwise_test::as_double(gqa.forward_incremental(x, cache)), IsNear(expected, 10 * tolerance<TestType>()));
}
