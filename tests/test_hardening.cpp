// The edges a stress run found (issue "Hardening"), one test each: sizes that overflow, a file that
// passes validation but cannot be a matrix, exceptions inside the kernel's parallel loop,
// non-finite values reaching other tokens, NaN weights, a directory given as a file, reads past the
// cache, and config values past INT64_MAX.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "headwise/detail/parallel.hpp"
#include "headwise/io/gpt2.hpp"
#include "headwise/attend.hpp"
#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"
#include "support/safetensors_writer.hpp"

using namespace headwise;
using Catch::Matchers::Contains;
using headwise::io::SafetensorsError;
using headwise::io::SafetensorsFile;
using headwise_test::IsExactly;
using headwise_test::IsNear;

namespace {
constexpr Index two_to_the_60 = Index(1) << 60;
constexpr Index index_max = std::numeric_limits<Index>::max();

template <class Scalar>
bool all_nan(const Eigen::Ref<const Matrix<Scalar>>& m) {
  return m.array().isNaN().all();
}
}  // namespace

// Finding 1: the cache's size wrapped around to a small buffer that appending overran.
TEMPLATE_TEST_CASE("a cache whose size overflows is refused before anything is allocated", "[hardening][kv-cache]",
                   float, double) {
  std::mt19937 rng(1);
  const auto layer = headwise_test::random_layer<TestType>(64, 4, 4, rng);  // d_head 16
  // d_head 16: 2^60 tokens need 2^64 floats per head, past what a buffer of floats or doubles holds.
  REQUIRE_THROWS_WITH(layer.make_cache(two_to_the_60),
                      Contains("headwise: PackedKeysValues: ") && Contains("1152921504606846976"));
  REQUIRE_THROWS_WITH(layer.make_cache(two_to_the_60 + 16), Contains("PackedKeysValues: ") && Contains("11529215046068"));
  REQUIRE_THROWS_WITH(layer.make_cache(index_max),
                      "headwise: PackedKeysValues: capacity 9223372036854775807 is too large to round up to whole panels");
  // Representable, but no machine has 128 TB: a clear error, not std::bad_alloc from deep inside.
  REQUIRE_THROWS_WITH(layer.make_cache(Index(1000000000000)),
                      Contains("PackedKeysValues: cannot allocate 64000000000000 elements") && Contains("for the keys"));
  REQUIRE_THROWS_AS(layer.make_cache(Index(1000000000000)), std::invalid_argument);
  REQUIRE_THROWS_WITH(PackedKeysValues<TestType>(1, 1, index_max / 2, 1), Contains("one head's keys needs"));
  REQUIRE_THROWS_WITH(PackedKeysValues<TestType>(16, index_max / 4, 16, 16), Contains("the keys needs"));
  // A cache that could be made still holds what it says.
  auto cache = layer.make_cache(17);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(17, 64, rng);
  CHECK_THAT(headwise_test::as_double(layer.forward_incremental(x, cache)), IsExactly(layer.forward(x)));
}

// Finding 2: [2^63, 0] holds 0 bytes and is a valid file, but 2^63 is no Eigen index.
TEST_CASE("a tensor with a dimension past INT64_MAX is refused when read as a matrix", "[hardening][safetensors]") {
  const std::string big = "9223372036854775808";  // 2^63
  const SafetensorsFile file(headwise_test::file_with_header(
                                 R"({"rows":{"dtype":"F32","shape":[)" + big + R"(,0],"data_offsets":[0,0]},)"
                                 R"("cols":{"dtype":"F32","shape":[0,)" + big + R"(],"data_offsets":[0,0]},)"
                                 R"("slices":{"dtype":"F32","shape":[1,)" + big + R"(,0],"data_offsets":[0,0]}})"),
                             "big");
  CHECK(file.info("rows").elements == 0);  // the format allows it: validation passes
  const std::string expected = "dimension 9223372036854775808 is larger than a matrix can have";
  REQUIRE_THROWS_WITH(file.matrix<float>("rows"), Contains("tensor \"rows\" has shape [9223372036854775808, 0]: " + expected));
  REQUIRE_THROWS_WITH(file.matrix<double>("cols"), Contains(expected));
  REQUIRE_THROWS_WITH(file.slice<float>("slices", 0), Contains(expected));
  CHECK(file.values<float>("rows").empty());
  // A large dimension that is an index is fine: 0 columns of 2^62 rows.
  const SafetensorsFile fine(headwise_test::file_with_header(
                                 R"({"t":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]}})"),
                             "fine");
  CHECK(fine.matrix<float>("t").rows() == (Index(1) << 62));
  CHECK(fine.matrix<float>("t").size() == 0);
}

// Finding 3: scratch sized by the tile sizes asked for threw std::bad_alloc inside the parallel
// region, which ends the process.
TEMPLATE_TEST_CASE("tile sizes far larger than the input work, and give the same bits", "[hardening][fused]", float,
                   double) {
  std::mt19937 rng(3);
  const Index n = GENERATE(1, 5, 40);
  CAPTURE(n);
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, 8, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, 8, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n, 8, rng);
  // Query tiles never change a row's bits; key tiles do, except that every key tile at least as
  // large as the keys covers them in one piece. So each huge tile is compared with a small one.
  const std::pair<FusedTiles, FusedTiles> cases[] = {{{1000000000000, 16}, {8, 16}},
                                                     {{16, 1000000000000}, {16, 48}},
                                                     {{index_max, index_max}, {128, 128}}};
  for (const auto& [huge, small] : cases) {
    CAPTURE(huge.queries, huge.keys);
    AttentionCall call;
    call.heads = {1, 1}, call.logsumexp = true, call.tiles = small;
    const AttentionResult<TestType> expected = attend<TestType>(q, k, v, call);
    call.tiles = huge;
    const AttentionResult<TestType> got = attend<TestType>(q, k, v, call);
    CHECK_THAT(headwise_test::as_double(got.z), IsExactly(expected.z));
    CHECK_THAT(headwise_test::as_double(got.logsumexp), IsExactly(expected.logsumexp));
  }
}

/// f(std::integral_constant<Schedule, s>) for each schedule s of detail::parallel_for.
template <class F>
void for_each_schedule(F f) {
  f(std::integral_constant<detail::Schedule, detail::Schedule::by_part>{});
  f(std::integral_constant<detail::Schedule, detail::Schedule::next_free>{});
  f(std::integral_constant<detail::Schedule, detail::Schedule::shrinking>{});
}

TEST_CASE("an exception thrown inside a parallel loop reaches the caller", "[hardening][parallel]") {
  for_each_schedule([](auto schedule) {
    std::atomic<int> ran{0};
    REQUIRE_THROWS_WITH(detail::parallel_for<decltype(schedule)::value>(2, 64, [&](Index i) {
                          ++ran;
                          if (i == 3) throw std::invalid_argument("job 3 failed");
                        }),
                        "job 3 failed");
    CHECK(ran.load() >= 1);
  });
  detail::ExceptionCarrier carrier;
  carrier.run([] { throw std::invalid_argument("once"); });
  REQUIRE_THROWS_WITH(carrier.rethrow(), "once");
  detail::ExceptionCarrier quiet;
  quiet.run([] {});
  CHECK_NOTHROW(quiet.rethrow());
}

TEST_CASE("parallel loops run every iteration once, each part on a thread of its own, a region inside a region inline",
          "[hardening][parallel]") {
  for (const int threads : {1, 2, 3, 8})
    for (const Index n : {Index(0), Index(1), Index(5), Index(1000)})
      for_each_schedule([&](auto schedule) {
        CAPTURE(threads, n, static_cast<int>(decltype(schedule)::value));
        std::vector<std::atomic<int>> times(static_cast<std::size_t>(n));
        detail::parallel_for<decltype(schedule)::value>(threads, n, [&](Index i) { ++times[static_cast<std::size_t>(i)]; });
        int wrong = 0;
        for (const auto& t : times) wrong += t.load() != 1;
        CHECK(wrong == 0);
      });
  std::vector<std::thread::id> ids(3);
  std::vector<int> parts(3, -1), inner(3, 0);
  detail::parallel_region(3, [&](int t) {
    ids[static_cast<std::size_t>(t)] = std::this_thread::get_id(), parts[static_cast<std::size_t>(t)] = detail::this_thread();
    detail::parallel_region(4, [&](int) { ++inner[static_cast<std::size_t>(t)]; });  // inline, on this part's thread
    CHECK(detail::this_thread() == t);  // the outer part again after the inner region
  });
  CHECK(parts == std::vector<int>{0, 1, 2});
  CHECK(inner == std::vector<int>{4, 4, 4});
  CHECK(ids[0] == std::this_thread::get_id());
  if (HEADWISE_THREADS) CHECK((ids[1] != ids[0] && ids[2] != ids[0] && ids[1] != ids[2]));
  CHECK(detail::this_thread() == 0);
}

TEST_CASE("a value sum past float's range is refused by the fused kernel, where the step-by-step path is finite",
          "[hardening][overflow]") {
  // 40 keys of equal score, values 1e37: Z is their mean, 1e37, but the fused kernel's sum before
  // the division reaches 4e38 on the last row (the documented range: docs/bad-input.md).
  const Matrix<float> q = Matrix<float>::Zero(40, 4), k = Matrix<float>::Zero(40, 4), v = Matrix<float>::Constant(40, 4, 1e37f);
  AttentionCall call;
  CHECK_THROWS_WITH(attend<float>(q, k, v, call), Contains("a row's value sum overflowed") && Contains("scale v down"));
  call.path = AttentionPath::step_by_step;
  CHECK_THAT(headwise_test::as_double(attend<float>(q, k, v, call).z), IsNear(Matrix<double>::Constant(40, 4, 1e37), 1e-6));
  call.path = AttentionPath::fused;
  CHECK_THAT(attend<double>(q.cast<double>(), k.cast<double>(), v.cast<double>(), call).z,
             IsNear(Matrix<double>::Constant(40, 4, double(1e37f)), 1e-12));
  const Matrix<float> short_rows = v.topRows(30);  // (30 keys: 3e38 is still float's)
  CHECK(attend<float>(q.topRows(30), k.topRows(30), short_rows, call).z.allFinite());
}

TEST_CASE("job runs: every job runs exactly once, whatever the units, runs and threads", "[hardening][parallel]") {
  for (const Index units : {Index(1), Index(2), Index(7), Index(12)})
    for (const Index per_unit : {Index(1), Index(5)})
      for (const int parts : {1, 2, 3, 8}) {
        CAPTURE(units, per_unit, parts);
        detail::JobRuns runs(units, per_unit, parts);
        std::vector<std::atomic<int>> times(static_cast<std::size_t>(units * per_unit));
        detail::parallel_region(parts, [&](int t) { runs.run(t, [&](Index job) { ++times[static_cast<std::size_t>(job)]; }); });
        int wrong = 0;
        for (const auto& t : times) wrong += t.load() != 1;
        CHECK(wrong == 0);
        CHECK(runs.first_job(0) == 0);
        CHECK(runs.first_job(parts) == units * per_unit);
      }
}

// Finding 4: with finite x, a later token whose Q/K/V overflowed to inf made earlier rows NaN
// (0 x inf inside a diagonal tile) in forward, but not when decoding.
TEMPLATE_TEST_CASE("a later token's overflowing projection is refused and never reaches earlier rows",
                   "[hardening][causality]", float, double) {
  std::mt19937 rng(4);
  const auto layer = headwise_test::random_layer<TestType>(32, 4, 2, rng);
  const Index n = 40, bad = 30;
  Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, 32, rng);
  // Finite, but x W_Q overflows in query column 0: every term of that dot product is +max/2 |w|.
  for (Index c = 0; c < 32; ++c)
    x(bad, c) = std::copysign(std::numeric_limits<TestType>::max() / 2, layer.w_qkv()(c, 0));
  REQUIRE(x.allFinite());
  const std::string names_token = "the token at position 30";
  REQUIRE_THROWS_WITH(layer.forward(x), Contains("MultiHeadAttention::forward: the query of " + names_token) &&
                                            Contains("is not finite (inf): x W + b overflowed"));
  REQUIRE_THROWS_WITH(layer.forward_step_by_step(x), Contains("forward_step_by_step: the query of " + names_token));
  REQUIRE_THROWS_WITH(layer.trace(x), Contains("MultiHeadAttention::trace: the query of " + names_token));

  // Decoding: the rows before the bad token are those of forward on the prefix, bitwise; the bad
  // token is refused and leaves the cache as it was.
  const Matrix<TestType> prefix = layer.forward(x.topRows(bad));
  auto cache = layer.make_cache(n);
  const Matrix<TestType> decoded = layer.forward_incremental(x.topRows(bad - 3), cache);
  CHECK_THAT(headwise_test::as_double(decoded), IsExactly(prefix.topRows(bad - 3)));
  REQUIRE_THROWS_WITH(layer.forward_incremental(x.middleRows(bad - 3, 10), cache),
                      Contains("forward_incremental: the query of " + names_token));
  CHECK(cache.size() == bad - 3);
  CHECK_THAT(headwise_test::as_double(layer.forward_incremental(x.middleRows(bad - 3, 3), cache)),
             IsExactly(prefix.bottomRows(3)));
}

TEMPLATE_TEST_CASE("earlier rows are bitwise the same whatever finite values a later token holds",
                   "[hardening][causality][property]", float, double) {
  std::mt19937 rng(5);
  const auto layer = headwise_test::random_layer<TestType>(32, 4, 4, rng);
  const Index n = 37;
  Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, 32, rng);
  const Matrix<TestType> before = layer.forward(x.topRows(n - 1));
  for (const double magnitude : {0.0, 1.0, 1e3, 1e6, 1e12, 1e30}) {
    CAPTURE(magnitude);
    x.row(n - 1) = headwise_test::random_matrix<TestType>(1, 32, rng, magnitude);
    try {
      const Matrix<TestType> out = layer.forward(x);
      CHECK_THAT(headwise_test::as_double(out.topRows(n - 1)), IsExactly(before));
    } catch (const std::invalid_argument& e) {  // only when the projection overflows
      CHECK_THAT(e.what(), Contains("the token at position 36") && Contains("overflowed"));
    }
  }
}

TEMPLATE_TEST_CASE("the kernels refuse non-finite q, k and v rather than leak them into other rows",
                   "[hardening][causality]", float, double) {
  std::mt19937 rng(6);
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(9, 4, rng);
  Matrix<TestType> k = headwise_test::random_matrix<TestType>(9, 4, rng);
  Matrix<TestType> v = headwise_test::random_matrix<TestType>(9, 4, rng);
  v(8, 1) = std::numeric_limits<TestType>::infinity();
  AttentionCall call;
  call.heads = {1, 1}, call.logsumexp = true;
  REQUIRE_THROWS_WITH(attend<TestType>(q, k, v, call),
                      Contains("v of the token at position 8 (head 0, component 1) is not finite (inf)"));
  REQUIRE_THROWS_WITH(attention(q, k, v), "headwise: attention: v has a non-finite value (inf) at row 8, column 1");
  v(8, 1) = 0;
  k(7, 2) = std::numeric_limits<TestType>::quiet_NaN();
  REQUIRE_THROWS_WITH(attend<TestType>(q, k, v, call),
                      Contains("k of the token at position 7 (head 0, component 2) is not finite (nan)"));
  PackedKeysValues<TestType> kv(9, 1, 4, 4);
  REQUIRE_THROWS_WITH(kv.append(k, v), "headwise: PackedKeysValues::append: k of the token at position 7 (head 0, "
                                       "component 2) is not finite (nan): keys and values must be finite");
  CHECK(kv.size() == 0);
}

TEMPLATE_TEST_CASE("a refused append leaves the store as it was: later tokens attend as if it never happened",
                   "[hardening][causality]", float, double) {
  // Keys and values are checked while they are packed, so a refused append has written into the
  // key panel it began in, past size(), where the kernel reads (and masks) a panel's columns.
  std::mt19937 rng(16);
  const Index n = 40, h = 2, d = 8;
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, h * d, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, h * d, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n, h * d, rng);
  PackedKeysValues<TestType> kv(n, h, d, d);
  kv.append(k.topRows(5), v.topRows(5));
  Matrix<TestType> bad_k = k.bottomRows(n - 5), bad_v = v.bottomRows(n - 5);
  bad_k(1, d + 3) = std::numeric_limits<TestType>::quiet_NaN();  // the token at position 6, head 1
  bad_v(n - 6, 2 * d - 1) = std::numeric_limits<TestType>::infinity();
  REQUIRE_THROWS_WITH(kv.append(bad_k, bad_v, 2),
                      Contains("k of the token at position 6 (head 1, component 3) is not finite (nan)"));
  REQUIRE(kv.size() == 5);
  AttentionOptions capped;  // the path that modifies scores reads the hidden columns too
  capped.softcap = 5.0;
  for (const Index size : {Index(6), n}) {
    kv.append(k.middleRows(kv.size(), size - kv.size()), v.middleRows(kv.size(), size - kv.size()), 2);
    for (const AttentionOptions& options : {AttentionOptions{}, capped}) {
      AttentionCall call;
      call.heads = {h, h}, call.options = &options;
      const Matrix<TestType> z = attend<TestType>(q.topRows(size), kv, call).z;
      const Matrix<TestType> expected = attend<TestType>(q.topRows(size), k.topRows(size), v.topRows(size), call).z;
      CHECK_THAT(headwise_test::as_double(z), headwise_test::IsExactly(expected));
      if (options.softcap) continue;
      for (Index head = 0; head < h; ++head) {
        const auto cols = [&](const Matrix<TestType>& m) {
          return headwise_test::as_double(m.block(0, head * d, size, d));
        };
        const Eigen::MatrixXd reference =
            headwise_test::reference_attention(cols(q), cols(k), cols(v), std::sqrt(double(d)), /*causal=*/true);
        CHECK_THAT(cols(z), headwise_test::IsNear(reference, headwise_test::tolerance<TestType>()));
      }
    }
  }
}

// Finding 5: an all-NaN score row was taken for a row that saw nothing, and gave a finite 0.
TEMPLATE_TEST_CASE("NaN weights are refused, and scores that overflow make their own row NaN in both paths",
                   "[hardening][nan]", float, double) {
  std::mt19937 rng(7);
  MultiHeadWeights<TestType> w;
  w.w_q = w.w_k = w.w_v = w.w_o = headwise_test::random_matrix<TestType>(8, 8, rng);
  auto bad = w;
  bad.w_v(2, 3) = std::numeric_limits<TestType>::quiet_NaN();
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(2, bad),
                      "headwise: MultiHeadAttention: w_v has a non-finite value (nan) at row 2, column 3");
  bad = w;
  bad.b_o = RowVector<TestType>::Constant(8, std::numeric_limits<TestType>::infinity());
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(2, bad), Contains("b_o has a non-finite value (inf) at row 0"));
  REQUIRE_THROWS_WITH(Linear<TestType>(Matrix<TestType>::Constant(2, 2, std::numeric_limits<TestType>::quiet_NaN())),
                      Contains("Linear: weight has a non-finite value (nan)"));

  // Finite q and k whose dot product overflows: row 5's scores are inf and -inf. Both paths give
  // that row NaN (never a silent 0), and every other row is what it is without the overflow.
  const TestType huge = std::sqrt(std::numeric_limits<TestType>::max());
  Matrix<TestType> q = headwise_test::random_matrix<TestType>(8, 4, rng);
  Matrix<TestType> k = headwise_test::random_matrix<TestType>(8, 4, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(8, 4, rng);
  q.row(5) << huge, -huge, huge, -huge;
  k.row(2) << huge, -huge, huge, -huge;  // q5 · k2 = +inf
  k.row(3) << -huge, huge, -huge, huge;  // q5 · k3 = -inf
  AttentionCall call;
  call.heads = {1, 1}, call.logsumexp = true, call.tiles = FusedTiles{4, 4};
  const AttentionResult<TestType> fused = attend<TestType>(q, k, v, call);
  const auto step = attention(q, k, v);
  CHECK(all_nan<TestType>(fused.z.row(5)));
  CHECK(all_nan<TestType>(step.z.row(5)));
  CHECK(std::isnan(fused.logsumexp(0, 5)));
  for (Index i : {0, 1, 2, 3, 4, 6, 7}) {
    CAPTURE(i);
    CHECK(fused.z.row(i).allFinite());
  }
  // Rows 2 and 3 see k2 and k3, but their own scores are finite: the reference agrees with them.
  const Eigen::MatrixXd q_top = headwise_test::as_double(q.topRows(5));
  const Eigen::MatrixXd reference = headwise_test::reference_attention(
      q_top, headwise_test::as_double(k.topRows(5)), headwise_test::as_double(v.topRows(5)), 2.0, true);
  if (std::is_same<TestType, double>::value)  // float32 rounds k2 · q_i at |k| ~ 1e19 too coarsely to compare
    CHECK_THAT(headwise_test::as_double(fused.z.topRows(5)), IsNear(reference, 1e-9));
}

// A row every one of whose visible scores overflows to -inf is not a row that sees nothing (the
// mask shows it keys): it is NaN on both paths, as docs/bad-input.md says, not a silent Z = 0.
TEMPLATE_TEST_CASE("scores that all overflow to -inf make their row NaN in both paths, with or without sinks",
                   "[hardening][nan]", float, double) {
  std::mt19937 rng(8);
  const TestType huge = std::sqrt(std::numeric_limits<TestType>::max());
  Matrix<TestType> q = headwise_test::random_matrix<TestType>(8, 4, rng);
  Matrix<TestType> k = headwise_test::random_matrix<TestType>(8, 4, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(8, 4, rng);
  q.row(5) << huge, -huge, huge, -huge;
  for (Index j = 0; j <= 5; ++j) k.row(j) << -huge, huge, -huge, huge;  // q5 · kj = -inf for every key row 5 sees
  AttentionOptions sinks;
  sinks.sinks = Vector<double>::Constant(1, 0.5);
  const AttentionOptions* const with_sinks = &sinks;
  for (const AttentionOptions* options : {static_cast<const AttentionOptions*>(nullptr), with_sinks})
    for (const AttentionPath path : {AttentionPath::fused, AttentionPath::step_by_step}) {
      CAPTURE(options != nullptr, path == AttentionPath::fused);
      AttentionCall call;
      call.options = options, call.path = path, call.logsumexp = true, call.tiles = FusedTiles{4, 4};
      const AttentionResult<TestType> r = attend<TestType>(q, k, v, call);
      CHECK(all_nan<TestType>(r.z.row(5)));
      CHECK(std::isnan(r.logsumexp(0, 5)));
      for (Index i : {0, 1, 2, 3, 4, 6, 7}) {
        CAPTURE(i);
        CHECK(r.z.row(i).allFinite());
      }
    }
  // A row the mask hides every key from still sees nothing: Z = 0 and logsumexp -inf.
  AttentionOptions hidden;
  hidden.mask = Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>::Constant(8, 8, true);
  hidden.mask.row(5).setConstant(false);
  AttentionCall call;
  call.options = &hidden, call.logsumexp = true;
  const AttentionResult<TestType> r = attend<TestType>(q, k, v, call);
  CHECK(r.z.row(5).isZero(0));
  CHECK(r.logsumexp(0, 5) == -std::numeric_limits<TestType>::infinity());
}

// Finding 6: a directory asked for 2^63 - 1 bytes and threw std::bad_alloc.
TEST_CASE("opening a directory or a missing file is a SafetensorsError", "[hardening][safetensors]") {
  const std::string folder = headwise_test::data_path("gpt2-tiny");
  REQUIRE_THROWS_AS(SafetensorsFile::open(folder), SafetensorsError);
  REQUIRE_THROWS_WITH(SafetensorsFile::open(folder), Contains("cannot read " + folder + ": it is a directory"));
  REQUIRE_THROWS_WITH(SafetensorsFile::open(folder + "/nope.safetensors"),
                      Contains("cannot open " + folder + "/nope.safetensors"));
}

// Finding 7: KvCache::key and ::value read past the tokens held.
TEST_CASE("reading the cache past its tokens is refused", "[hardening][kv-cache]") {
  std::mt19937 rng(8);
  const auto layer = headwise_test::random_layer<float>(16, 2, 1, rng);
  auto cache = layer.make_cache(32);
  layer.forward_incremental(headwise_test::random_matrix<float>(3, 16, rng), cache);
  CHECK(std::isfinite(cache.key(0, 2, 7)));
  REQUIRE_THROWS_WITH(cache.key(0, 3, 0), "headwise: PackedKeysValues::key: token 3 out of range [0, 3) (the tokens held)");
  REQUIRE_THROWS_WITH(cache.value(0, -1, 0), Contains("token -1 out of range [0, 3)"));
  REQUIRE_THROWS_WITH(cache.value(1, 0, 0), "headwise: PackedKeysValues::value: head 1 out of range [0, 1)");
  REQUIRE_THROWS_WITH(cache.key(0, 0, 8), "headwise: PackedKeysValues::key: component 8 out of range [0, 8)");
}

// Finding 8: 2^63 in a config wrapped to a negative number.
TEST_CASE("config values past INT64_MAX or past 2^32 are refused by name", "[hardening][gpt2]") {
  REQUIRE_THROWS_WITH(io::parse_gpt2_config(R"({"n_embd": 9223372036854775808, "n_head": 12})", "c.json"),
                      "headwise: gpt2 config: c.json: \"n_embd\" = 9223372036854775808 must be an integer in [1, "
                      "4294967296]");
  REQUIRE_THROWS_WITH(io::parse_gpt2_config(R"({"n_embd": 768, "n_head": 18446744073709551615})", "c.json"),
                      Contains("\"n_head\" = 18446744073709551615 must be an integer"));
  REQUIRE_THROWS_WITH(io::parse_gpt2_config(R"({"n_embd": -768, "n_head": 12})", "c.json"),
                      "headwise: gpt2 config: c.json: \"n_embd\" = -768 must be an integer in [1, 4294967296]");
  const auto config = io::parse_gpt2_config(R"({"n_embd": 768, "n_head": 12, "n_layer": 4294967296})", "c.json");
  CHECK(config.n_layer == Index(1) << 32);
  io::Gpt2Config made_by_hand{Index(1) << 62, 1, 1};
  const auto model = headwise_test::load_fixture("gpt2-tiny/model.safetensors");
  REQUIRE_THROWS_WITH(io::load_gpt2_attention<float>(model, made_by_hand, 0), Contains("expected each in [1, 4294967296]"));
}

TEST_CASE("non-finite weights in a checkpoint are a SafetensorsError naming the layer", "[hardening][gpt2]") {
  const auto bytes = headwise_test::write_safetensors({{"h.0.attn.c_attn.weight", {{4, 12}, NAN}},
                                                       {"h.0.attn.c_attn.bias", {{12}, 0.0f}},
                                                       {"h.0.attn.c_proj.weight", {{4, 4}, 1.0f}},
                                                       {"h.0.attn.c_proj.bias", {{4}, 0.0f}}});
  const SafetensorsFile model(bytes, "nan.safetensors");
  REQUIRE_THROWS_WITH(io::load_gpt2_attention<float>(model, io::Gpt2Config{4, 2, 1}, 0),
                      "headwise: gpt2: nan.safetensors: layer 0: headwise: MultiHeadAttention: w_q has a non-finite "
                      "value (nan) at row 0, column 0");
}
