// One const layer (and one open checkpoint) shared by several std::threads: forward, inspect,
// the step-by-step path and decoding into each thread's own cache, all at once, each result
// bitwise equal to the same call made alone. Run by the unit suite, and by the tsan preset under
// ThreadSanitizer, which reports any data race the sharing has.
#include <random>
#include <thread>
#include <vector>

#include "headwise/interpret.hpp"
#include "headwise/io/gpt2.hpp"
#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsExactly;

namespace {

/// What one thread computes from the shared layer on its own input.
template <class Scalar>
struct Results {
  Matrix<Scalar> forward, step_by_step, decoded, inspected_output, logsumexp;
  Matrix<Scalar> entropy;
};

template <class Scalar>
Results<Scalar> compute(const MultiHeadAttention<Scalar>& layer, const Matrix<Scalar>& x) {
  AttentionOptions one_thread;  // the callers' threads only (the kernel's own: the next test)
  one_thread.threads = 1;
  Results<Scalar> r;
  r.forward = layer.forward(x, one_thread);
  r.step_by_step = layer.forward_step_by_step(x, one_thread);
  const auto run = interpret::inspect(layer, x, one_thread);
  r.inspected_output = run.output;
  r.logsumexp = run.attention.logsumexp;
  r.entropy = run.attention.statistics.entropy;
  auto cache = layer.make_cache(x.rows());
  r.decoded.resize(x.rows(), layer.d_model());
  for (Index t = 0; t < x.rows();) {  // chunks of 1, 2, 3, ... tokens
    const Index m = std::min<Index>(1 + t % 4, x.rows() - t);
    r.decoded.middleRows(t, m) = layer.forward_incremental(x.middleRows(t, m), cache, one_thread);
    t += m;
  }
  return r;
}

}  // namespace

TEMPLATE_TEST_CASE("one const layer shared by threads gives each the bits it gets alone", "[threads]", float, double) {
  std::mt19937 rng(11);
  const auto layer = headwise_test::random_layer<TestType>(64, 4, 2, rng);
  constexpr int n_threads = 4;
  std::vector<Matrix<TestType>> inputs;
  for (int i = 0; i < n_threads; ++i) inputs.push_back(headwise_test::random_matrix<TestType>(40 + 17 * i, 64, rng));

  std::vector<Results<TestType>> alone;
  for (const auto& x : inputs) alone.push_back(compute(layer, x));

  std::vector<Results<TestType>> together(n_threads);
  std::vector<std::thread> threads;
  for (int i = 0; i < n_threads; ++i)
    threads.emplace_back([&, i] { together[i] = compute(layer, inputs[i]); });
  for (auto& t : threads) t.join();

  for (int i = 0; i < n_threads; ++i) {
    CAPTURE(i);
    CHECK_THAT(headwise_test::as_double(together[i].forward), IsExactly(alone[i].forward));
    CHECK_THAT(headwise_test::as_double(together[i].step_by_step), IsExactly(alone[i].step_by_step));
    CHECK_THAT(headwise_test::as_double(together[i].inspected_output), IsExactly(alone[i].inspected_output));
    CHECK_THAT(headwise_test::as_double(together[i].logsumexp), IsExactly(alone[i].logsumexp));
    CHECK_THAT(headwise_test::as_double(together[i].entropy), IsExactly(alone[i].entropy));
    CHECK_THAT(headwise_test::as_double(together[i].decoded), IsExactly(alone[i].forward));
  }
}

TEST_CASE("one open checkpoint read by threads at once gives every thread the same tensors", "[threads][safetensors]") {
  const auto file = headwise_test::load_fixture("gpt2-tiny/model.safetensors");
  const auto config = io::read_gpt2_config(headwise_test::data_path("gpt2-tiny/config.json"));
  const Matrix<float> expected = file.matrix<float>("h.1.attn.c_attn.weight");
  std::vector<Matrix<float>> read(4);
  std::vector<Index> heads(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < read.size(); ++i)
    threads.emplace_back([&, i] {
      read[i] = file.matrix<float>("h.1.attn.c_attn.weight");
      heads[i] = io::load_gpt2_attention<float>(file, config, static_cast<Index>(i % 2)).n_heads();
    });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < read.size(); ++i) {
    CAPTURE(i);
    CHECK_THAT(headwise_test::as_double(read[i]), IsExactly(expected));
    CHECK(heads[i] == 4);
  }
}

// headwise's own threads (detail/parallel.hpp) on calls large enough to use them: the layer's
// forward and a prefill + decode through its cache, and split-key decoding over a packed store,
// on 2 and 3 threads give the bits of 1; and two std::threads at once, each with its own team of
// workers, give the same. Under the tsan preset this is what ThreadSanitizer checks the kernel's
// parallel regions with.
TEMPLATE_TEST_CASE("the kernel's threads give the bits of one, also when two callers use them at once", "[threads]", float,
                   double) {
  std::mt19937 rng(12);
  const auto layer = headwise_test::random_layer<TestType>(64, 4, 2, rng);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(300, 64, rng);
  const Matrix<TestType> keys = headwise_test::random_matrix<TestType>(16384, 128, rng);  // (past detail::serial_work)
  const Matrix<TestType> query = headwise_test::random_matrix<TestType>(1, 256, rng);
  PackedKeysValues<TestType> store(keys.rows(), 2, 64, 64);
  store.append(keys, keys);
  const auto run = [&](int threads) {
    AttentionOptions options;
    options.threads = threads;
    std::vector<Matrix<TestType>> out;
    out.push_back(layer.forward(x, options));
    auto cache = layer.make_cache(x.rows());
    out.push_back(layer.forward_incremental(x.topRows(x.rows() - 1), cache, options));
    out.push_back(layer.forward_incremental(x.bottomRows(1), cache, options));
    AttentionCall call;
    call.heads = {4, 2}, call.options = &options, call.tiles.key_shard = 2048;
    out.push_back(attend<TestType>(query, store, call).z);
    return out;
  };
  const auto one = run(1);
  for (const int threads : {2, 3}) {
    CAPTURE(threads);
    const auto got = run(threads);
    for (std::size_t i = 0; i < one.size(); ++i) CHECK_THAT(headwise_test::as_double(got[i]), IsExactly(one[i]));
  }
  std::vector<std::vector<Matrix<TestType>>> together(2);
  std::vector<std::thread> callers;
  for (std::size_t i = 0; i < together.size(); ++i) callers.emplace_back([&, i] { together[i] = run(2); });
  for (auto& t : callers) t.join();
  for (const auto& got : together)
    for (std::size_t i = 0; i < one.size(); ++i) CHECK_THAT(headwise_test::as_double(got[i]), IsExactly(one[i]));
}
