// Partial attention over shards of the keys, merged by logsumexp, equals the attention over all of
// them: any split, every variant that depends on positions, in any grouping (associativity).
#include <random>
#include <string>

#include "headwise/partial_attention.hpp"
#include "headwise/variants/alibi.hpp"
#include "support/shards.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsNear;

namespace {

template <class Scalar>
constexpr double merge_tolerance() {
  return std::is_same<Scalar, float>::value ? 1e-6 : 1e-14;
}

}  // namespace

TEMPLATE_TEST_CASE("shards of the keys, merged, equal the unsplit call", "[partial][merge]", float, double) {
  const std::string name = GENERATE(as<std::string>{}, "causal", "bidirectional", "window", "alibi+softcap", "varlen", "sinks");
  const Index shards = GENERATE(2, 3, 5);
  CAPTURE(name, shards);
  constexpr Index H = 4, G = 2, d = 16, n = 150;
  std::mt19937 rng(static_cast<unsigned>(shards * 31 + name.size()));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, H * d, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, G * d, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n, G * d, rng);
  AttentionOptions o;
  if (name == "bidirectional") o.causal = false;
  if (name == "window") o.window = 40;
  if (name == "alibi+softcap") o.alibi_slopes = alibi_slopes(H), o.softcap = 3.0;
  if (name == "varlen") o.cu_seqlens = {0, 61, 150};
  if (name == "sinks") o.sinks = (Vector<double>(H) << 1.0, -2.0, 0.5, 4.0).finished();
  AttentionCall call;
  call.heads = {H, G}, call.options = &o, call.logsumexp = true;
  const AttentionResult<TestType> whole = attend<TestType>(q, k, v, call);

  // Random cut points; each shard attended on its own (sinks with the first shard only).
  std::vector<Index> cuts{0, n};
  std::uniform_int_distribution<Index> cut(1, n - 1);
  while (static_cast<Index>(cuts.size()) < shards + 1) cuts.push_back(cut(rng)), std::sort(cuts.begin(), cuts.end()),
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<PartialAttention<TestType>> parts;
  for (Index s = 0; s < shards; ++s) {
    AttentionOptions shard = o;
    if (s > 0) shard.sinks = Vector<double>();
    const Index k0 = cuts[static_cast<std::size_t>(s)], m = cuts[static_cast<std::size_t>(s) + 1] - k0;
    parts.push_back(headwise_test::shard_attention<TestType>(q, k.middleRows(k0, m), v.middleRows(k0, m), {H, G}, 0, k0, shard));
  }
  PartialAttention<TestType> left = parts[0];  // ((a b) c) ...
  for (Index s = 1; s < shards; ++s) merge_into(left, parts[static_cast<std::size_t>(s)]);
  PartialAttention<TestType> right = parts.back();  // a (b (c ...))
  for (Index s = shards - 2; s >= 0; --s) right = merge(parts[static_cast<std::size_t>(s)], right);
  const double tol = merge_tolerance<TestType>();
  CHECK_THAT(headwise_test::as_double(left.z), IsNear(whole.z.template cast<double>(), tol));
  CHECK_THAT(headwise_test::as_double(left.logsumexp), IsNear(whole.logsumexp.template cast<double>(), tol));
  CHECK_THAT(headwise_test::as_double(right.z), IsNear(headwise_test::as_double(left.z), tol));
  CHECK_THAT(headwise_test::as_double(right.logsumexp), IsNear(headwise_test::as_double(left.logsumexp), tol));
}

TEST_CASE("a shard no query can see contributes nothing, exactly", "[partial][merge]") {
  std::mt19937 rng(4);
  const Matrix<double> q = headwise_test::random_matrix<double>(10, 8, rng), k = headwise_test::random_matrix<double>(30, 8, rng);
  const Matrix<double> v = headwise_test::random_matrix<double>(30, 8, rng);
  // Queries at positions 0..9; keys 20..29 lie in their future.
  const auto future = headwise_test::shard_attention<double>(q, k.bottomRows(10), v.bottomRows(10), {1, 1}, 0, 20);
  CHECK((future.z.array() == 0).all());
  CHECK((future.logsumexp.array() == -std::numeric_limits<double>::infinity()).all());
  const auto seen = headwise_test::shard_attention<double>(q, k.topRows(20), v.topRows(20), {1, 1}, 0, 0);
  const auto merged = merge(seen, future);
  CHECK_THAT(merged.z, headwise_test::IsExactly(seen.z));
  CHECK_THAT(merged.logsumexp, headwise_test::IsExactly(seen.logsumexp));
  PartialAttention<double> wrong;
  wrong.z = Matrix<double>::Zero(3, 8), wrong.logsumexp = Matrix<double>::Zero(1, 3);
  CHECK_THROWS_WITH(merge(seen, wrong), Catch::Contains("do not merge"));
  CHECK_THROWS_WITH(headwise_test::shard_attention<double>(q, k, v, {1, 1}, 0, -1), Catch::Contains("first_key_position must be >= 0"));
  CHECK_THROWS_WITH(headwise_test::shard_attention<double>(q, k, v, {1, 1}, -3, 0), Catch::Contains("first_query_position must be >= 0"));
}
