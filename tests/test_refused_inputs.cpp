// The second stress run's findings (issue 18, section 2), one test each, numbered as the issue
// numbers them: inputs that crashed, hung, allocated without bound or returned NaN or a wrong
// answer silently, each now refused by name or computed right. (Finding 10, ring attention, is in
// test_ring_attention.cpp, which runs under mpirun.) At the end, the tokenizer's files of issue
// 56's stress run.
#include <sys/stat.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "headwise/attention_backward.hpp"
#include "headwise/attention_core.hpp"
#include "headwise/io/gpt2.hpp"
#include "headwise/io/llama.hpp"
#include "headwise/io/tokenizer.hpp"
#include "headwise/attend.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/partial_attention.hpp"
#include "support/shards.hpp"
#include "support/catch.hpp"
#include "support/child_process.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

using namespace headwise;
using Catch::Matchers::Contains;
using headwise::io::SafetensorsError;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {

/// A fresh, empty folder under the build tree for files a test writes.
std::filesystem::path scratch_folder(const std::string& name) {
  const std::filesystem::path folder = std::filesystem::path(HEADWISE_TEST_TMP_DIR) / "refused-inputs" / name;
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

void write_text(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

/// The tiny Llama fixture's folder with its config.json replaced by `config`.
std::filesystem::path llama_with_config(const std::string& name, const std::string& config) {
  const std::filesystem::path folder = scratch_folder(name);
  std::filesystem::copy_file(headwise_test::data_path("llama-tiny/model.safetensors"), folder / "model.safetensors");
  write_text(folder / "config.json", config);
  return folder;
}

/// The tiny Llama fixture's config, open for more fields (and its closing brace).
constexpr const char* tiny_llama_config =
    R"({"model_type": "llama", "hidden_size": 128, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
        "rope_theta": 10000.0)";

}  // namespace

// Finding 1: a thread count reached num_threads() unchecked (100000 crashed inside libgomp).
TEST_CASE("thread counts outside [0, 1024] are refused by name on every path", "[refused][threads]") {
  std::mt19937 rng(1);
  const auto layer = headwise_test::random_layer<float>(16, 2, 2, rng);
  const Matrix<float> x = headwise_test::random_matrix<float>(5, 16, rng);
  for (const int threads : {100000, INT_MAX, -1, 1025}) {
    CAPTURE(threads);
    AttentionOptions o;
    o.threads = threads;
    const auto refused = Contains("threads must be in [0, 1024] (0: the default), got " + std::to_string(threads));
    CHECK_THROWS_WITH(layer.forward(x, o), Contains("MultiHeadAttention::forward") && refused);
    CHECK_THROWS_WITH(layer.forward_step_by_step(x, o), refused);
    auto cache = layer.make_cache(8);
    CHECK_THROWS_WITH(layer.forward_incremental(x, cache, o), refused);
    CHECK(cache.size() == 0);
    AttentionCall call;
    call.heads = {2, 2}, call.options = &o;
    CHECK_THROWS_WITH(attend<float>(x, x, x, call), refused);
    CHECK_THROWS_WITH(layer_backward(layer, x, x, o), refused);
    PackedKeysValues<float> kv(5, 2, 8, 8);
    CHECK_THROWS_WITH(kv.append(x, x, threads), Contains("PackedKeysValues::append") && refused);
    RopeConfig eight_wide;
    eight_wide.d_head = 8;
    const RotaryEmbedding rope(eight_wide);
    Matrix<float> rotated = x;
    CHECK_THROWS_WITH(rope.rotate<float>(rotated, 0, threads), Contains("RotaryEmbedding::rotate") && refused);
  }
  // Within the range, more threads than cores still give the same bits.
  AttentionOptions eight;
  eight.threads = 8;
  CHECK_THAT(headwise_test::as_double(layer.forward(x, eight)), IsExactly(layer.forward(x)));
}

// Finding 2: options finite as doubles but not as floats were checked as doubles, then cast.
TEST_CASE("options finite in double but not in float are refused by a float call, on both paths", "[refused][float]") {
  std::mt19937 rng(2);
  const Matrix<float> q = headwise_test::random_matrix<float>(5, 8, rng), k = headwise_test::random_matrix<float>(5, 8, rng);
  const Matrix<double> qd = q.cast<double>(), kd = k.cast<double>();
  const auto refused_by_both = [&](const AttentionOptions& o, const std::string& message) {
    AttentionCall call;
    call.heads = {1, 1}, call.options = &o, call.logsumexp = true;
    CHECK_THROWS_WITH(attend<float>(q, k, k, call), Contains(message) && Contains("float"));
    CHECK_THROWS_WITH(attention(q, k, k, o), Contains(message) && Contains("float"));
    CHECK(attend<double>(qd, kd, kd, call).z.allFinite());  // a double call takes them
    CHECK(attention(qd, kd, kd, o).z.allFinite());
  };
  AttentionOptions o;
  o.sinks = Vector<double>::Constant(1, 1e39);
  refused_by_both(o, "sinks has 1e+39 for head 0, not finite in float");
  o = {};
  o.softcap = 1e39;
  refused_by_both(o, "softcap 1e+39 or its inverse is not finite and nonzero in float");
  o.softcap = 1e-39;
  refused_by_both(o, "softcap 1e-39 or its inverse is not finite and nonzero in float");
  o = {};
  o.divisor = 1e-39;
  refused_by_both(o, "divisor 1e-39 or its inverse is not finite and nonzero in float");
  o.divisor = 1e39;
  refused_by_both(o, "divisor 1e+39 or its inverse is not finite and nonzero in float");
  o = {};
  o.alibi_slopes = Vector<double>::Constant(1, 1e39);
  refused_by_both(o, "alibi_slopes(0) = 1e+39 times the key-query distance 4 is not finite in float");
  o = {};
  o.bias = Matrix<double>::Zero(5, 5);
  o.bias(3, 1) = 1e39;
  refused_by_both(o, "bias has 1e+39 at row 3, column 1, not finite in float");
}

// Finding 3: finite x and weights whose Z W_O overflowed returned inf with no error.
TEMPLATE_TEST_CASE("an output projection that overflows is refused, naming the token", "[refused][overflow]", float) {
  MultiHeadWeights<TestType> w;
  w.w_q = w.w_k = Matrix<TestType>::Constant(8, 8, TestType(0.01));
  w.w_v = Matrix<TestType>::Constant(8, 8, TestType(0.1));
  w.w_o = Matrix<TestType>::Constant(8, 8, std::numeric_limits<TestType>::max() / 4);
  const MultiHeadAttention<TestType> layer(2, w);
  const Matrix<TestType> x = Matrix<TestType>::Constant(3, 8, TestType(1));  // v = 0.8: Z W_O = 8 x 0.8 x max / 4
  const auto refused = Contains("the output Z W_O + b_O of the token at position 0 is not finite: the output projection overflowed");
  CHECK_THROWS_WITH(layer.forward(x), Contains("MultiHeadAttention::forward: ") && refused);
  CHECK_THROWS_WITH(layer.forward_step_by_step(x), Contains("forward_step_by_step: ") && refused);
  auto cache = layer.make_cache(8);
  CHECK_THROWS_WITH(layer.forward_incremental(x, cache), Contains("forward_incremental: ") && refused);
  CHECK(cache.size() == 0);  // the refused call left the cache as it was
}

// Finding 4: a 101-byte config.json with head_dim 2^32 allocated 16 GiB to validate its RoPE.
TEST_CASE("a config's rotary settings are checked without building its frequencies", "[refused][llama]") {
  const std::string config = R"({"model_type":"llama","hidden_size":128,"num_attention_heads":8,"head_dim":4294967296,)"
                             R"("num_hidden_layers":2})";
  const io::LlamaConfig c = io::parse_llama_config(config, "head-dim.json");  // no allocation, no bad_alloc
  CHECK(c.head_dim == Index(1) << 32);
  const auto folder = llama_with_config("head-dim", config);
  CHECK_THROWS_WITH(io::load_llama_attention<float>(folder.string(), 0),
                    Contains("tensor \"model.layers.0.self_attn.q_proj.weight\" has shape [128, 128], expected "
                             "[34359738368, 128]"));
  // Out-of-range rotary settings are still refused by name.
  CHECK_THROWS_WITH(io::parse_llama_config(R"({"model_type":"llama","hidden_size":8,"num_attention_heads":2,)"
                                           R"("num_hidden_layers":1,"rope_theta":0.5})",
                                           "theta.json"),
                    Contains("theta must be finite and > 1, got 0.5"));
}

// Finding 5: num_hidden_layers 2^32 on a 2-layer checkpoint threw std::bad_alloc from reserve().
TEST_CASE("a config that claims more layers than the checkpoint holds names the first missing tensor", "[refused][io]") {
  const auto folder = llama_with_config("layers", std::string(tiny_llama_config) + R"(, "num_hidden_layers": 4294967296})");
  CHECK_THROWS_WITH(io::load_llama_attention_layers<float>(folder.string()),
                    Contains("missing tensor \"model.layers.2.self_attn.q_proj.weight\""));
  const std::filesystem::path gpt2 = scratch_folder("gpt2-layers");
  std::filesystem::copy_file(headwise_test::data_path("gpt2-tiny/model.safetensors"), gpt2 / "model.safetensors");
  const io::Gpt2Config tiny = io::read_gpt2_config(headwise_test::data_path("gpt2-tiny/config.json"));
  write_text(gpt2 / "config.json", R"({"n_embd": )" + std::to_string(tiny.n_embd) + R"(, "n_head": )" +
                                       std::to_string(tiny.n_head) + R"(, "n_layer": 4294967296})");
  CHECK_THROWS_WITH(io::load_gpt2_attention_layers<float>(gpt2.string()), Contains("missing tensor"));
}

// Finding 6: a config.json or a shard that is a named pipe hung forever in open().
TEST_CASE("a named pipe given as a config, an index or a shard is refused at once", "[refused][io]") {
  const std::filesystem::path folder = scratch_folder("fifo");
  for (const char* name : {"config.json", "model.safetensors"}) REQUIRE(::mkfifo((folder / name).c_str(), 0600) == 0);
  CHECK_THROWS_WITH(io::read_llama_config((folder / "config.json").string()), Contains("it is a named pipe"));
  CHECK_THROWS_WITH(io::read_gpt2_config((folder / "config.json").string()), Contains("it is a named pipe"));
  CHECK_THROWS_WITH(io::SafetensorsFile::open((folder / "model.safetensors").string()), Contains("it is a named pipe"));
  REQUIRE(::mkfifo((folder / "model.safetensors.index.json").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(io::Checkpoint::open(folder.string()),
                    Contains("headwise: checkpoint index: cannot read") && Contains("it is a named pipe"));
}

// Finding 7: key_valid (an O(n) input) made the kernel hold n_q x n_k / 8 bytes (128 GiB here).
TEST_CASE("key padding costs O(n) memory: a million tokens with a window and padding", "[refused][memory]") {
  const Index n = Index(1) << 20, d = 4;
  std::mt19937 rng(7);
  const Matrix<float> q = headwise_test::random_matrix<float>(n, d, rng), k = headwise_test::random_matrix<float>(n, d, rng);
  AttentionOptions o;
  o.window = 4;
  o.key_valid = Eigen::Array<bool, Eigen::Dynamic, 1>::Constant(n, true);
  for (Index j = 0; j < n; j += 3) o.key_valid(j) = false;
  AttentionCall call;
  call.heads = {1, 1}, call.options = &o, call.logsumexp = true;
  const AttentionResult<float> r = attend<float>(q, k, k, call);
  // A few rows against the float64 plain loop over the keys each row sees.
  for (const Index i : {Index(0), Index(1), Index(2), Index(3), n / 2 + 1, n - 1}) {
    CAPTURE(i);
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    Eigen::RowVectorXd acc = Eigen::RowVectorXd::Zero(d);
    for (Index j = std::max<Index>(0, i - 3); j <= i; ++j)
      if (o.key_valid(j)) max = std::max(max, q.row(i).cast<double>().dot(k.row(j).cast<double>()) / 2.0);
    for (Index j = std::max<Index>(0, i - 3); j <= i; ++j) {
      if (!o.key_valid(j)) continue;
      const double p = std::exp(q.row(i).cast<double>().dot(k.row(j).cast<double>()) / 2.0 - max);
      sum += p, acc += p * k.row(j).cast<double>();
    }
    if (sum == 0) {  // row 0: its only key is padding
      CHECK(r.z.row(i).isZero(0));
      CHECK(r.logsumexp(0, i) == -std::numeric_limits<float>::infinity());
      continue;
    }
    CHECK_THAT(headwise_test::as_double(r.z.row(i)), IsNear(acc / sum, tolerance<float>()));
    CHECK(std::abs(r.logsumexp(0, i) - (max + std::log(sum))) <= 1e-5 * std::max(1.0, std::abs(max + std::log(sum))));
  }
}

// Finding 8: ALiBi at a distance of 2^62 rounded the distance, changing Z by 0.29, silently.
TEMPLATE_TEST_CASE("ALiBi at distances a scalar cannot hold exactly is refused, and nearer it is exact", "[refused][alibi]",
                   float, double) {
  std::mt19937 rng(8);
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(3, 8, rng), k = headwise_test::random_matrix<TestType>(6, 8, rng);
  AttentionOptions o;
  o.alibi_slopes = Vector<double>::Constant(1, 0.5);
  const Index far = Index(1) << 62;
  CHECK_THROWS_WITH(headwise_test::shard_attention<TestType>(q, k, k, {1, 1}, far, 0, o),
                    Contains("ALiBi at a key-query distance of " + std::to_string(far + 2)) &&
                        Contains(std::is_same_v<TestType, float> ? "below 2^24" : "below 2^53"));
  // Queries and keys translated together by 2^20 attend as they do at 0 (ALiBi sees j - i only).
  const Index shift = Index(1) << 20;
  const PartialAttention<TestType> at_zero = headwise_test::shard_attention<TestType>(q, k, k, {1, 1}, 3, 0, o);
  const PartialAttention<TestType> shifted = headwise_test::shard_attention<TestType>(q, k, k, {1, 1}, shift + 3, shift, o);
  CHECK_THAT(headwise_test::as_double(shifted.z), IsExactly(at_zero.z));
}

// Finding 9: NaN in dy reached every token's dx across the causal mask; the fused backward also
// took NaN d_o and +inf logsumexp.
TEMPLATE_TEST_CASE("non-finite gradients and saved values are refused by both backward paths", "[refused][backward]", float,
                   double) {
  std::mt19937 rng(9);
  const auto layer = headwise_test::random_layer<TestType>(16, 2, 2, rng);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(6, 16, rng);
  Matrix<TestType> dy = headwise_test::random_matrix<TestType>(6, 16, rng);
  dy(0, 3) = std::numeric_limits<TestType>::quiet_NaN();
  CHECK_THROWS_WITH(layer_backward(layer, x, dy), Contains("layer_backward: dy has a non-finite value (nan) at row 0, column 3"));
  CHECK_THROWS_WITH(backward_step_by_step(layer, x, dy), Contains("backward_step_by_step: dy has a non-finite value"));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(6, 8, rng);
  AttentionCall call;
  call.logsumexp = true;
  const AttentionResult<TestType> forward = attend<TestType>(q, q, q, call);
  Matrix<TestType> d_o = headwise_test::random_matrix<TestType>(6, 8, rng);
  CHECK_NOTHROW(attend_backward<TestType>(q, q, q, forward, d_o, call));
  Matrix<TestType> bad = d_o;
  bad(4, 1) = std::numeric_limits<TestType>::quiet_NaN();
  CHECK_THROWS_WITH(attend_backward<TestType>(q, q, q, forward, bad, call),
                    Contains("attend_backward: d_z has a non-finite value (nan) at row 4, column 1"));
  AttentionResult<TestType> bad_forward = forward;
  bad_forward.z(2, 2) = std::numeric_limits<TestType>::infinity();
  CHECK_THROWS_WITH(attend_backward<TestType>(q, q, q, bad_forward, d_o, call), Contains("z has a non-finite value"));
  bad_forward = forward;
  bad_forward.logsumexp(0, 5) = std::numeric_limits<TestType>::infinity();
  CHECK_THROWS_WITH(attend_backward<TestType>(q, q, q, bad_forward, d_o, call),
                    Contains("logsumexp has inf for head 0, row 5 (finite, or -inf for a row that saw no key)"));
  // What the forward did not record, and a path the backward does not have, are refused by name.
  AttentionResult<TestType> no_lse = forward;
  no_lse.logsumexp = Matrix<TestType>();
  CHECK_THROWS_WITH(attend_backward<TestType>(q, q, q, no_lse, d_o, call),
                    Contains("the forward's logsumexp is 0x0, expected 1x6 (run the forward with call.logsumexp = true)"));
  AttentionCall step = call;
  step.path = AttentionPath::step_by_step;
  CHECK_THROWS_WITH(attend_backward<TestType>(q, q, q, forward, d_o, step), Contains("the fused path only"));
  AttentionCall heads = call;
  heads.heads = {3, 1};
  CHECK_THROWS_WITH(attend_backward<TestType>(q, q, q, forward, d_o, heads), Contains("not divisible by n_heads = 3"));
}

// Finding 11: a window of INT64_MAX with more queries than keys overflowed position - window + 1.
TEMPLATE_TEST_CASE("a window near INT64_MAX is a window that hides nothing", "[refused][window]", float, double) {
  std::mt19937 rng(11);
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(7, 8, rng), k = headwise_test::random_matrix<TestType>(3, 8, rng);
  AttentionOptions o;
  o.window = std::numeric_limits<Index>::max();
  AttentionCall call;
  call.heads = {1, 1}, call.logsumexp = true;
  const AttentionResult<TestType> plain = attend<TestType>(q, k, k, call);
  call.options = &o;
  const AttentionResult<TestType> windowed = attend<TestType>(q, k, k, call);
  CHECK_THAT(headwise_test::as_double(windowed.z), IsExactly(plain.z));
  CHECK_THAT(headwise_test::as_double(attention(q, k, k, o).z), IsExactly(attention(q, k, k).z));
}

// Finding 12: attention over 0 keys applied an offset to a null pointer (UBSan).
TEMPLATE_TEST_CASE("attention over no keys gives zero rows and -inf logsumexps", "[refused][empty]", float, double) {
  std::mt19937 rng(12);
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(3, 8, rng), none(0, 8);
  for (const bool causal : {true, false}) {
    AttentionOptions o;
    o.causal = causal;
    AttentionCall call;
    call.heads = {1, 1}, call.options = &o, call.logsumexp = true;
    const AttentionResult<TestType> fused = attend<TestType>(q, none, none, call);
    const CoreOutput<TestType> step = attention(q, none, none, o);
    CHECK(fused.z.rows() == 3);
    CHECK(fused.z.isZero(0));
    CHECK(step.z.isZero(0));
    CHECK((fused.logsumexp.array() == -std::numeric_limits<TestType>::infinity()).all());
  }
}

// Finding 13: a cache used by another kind of layer, with another window, or with explicit
// positions gave rows that match no forward, silently.
TEMPLATE_TEST_CASE("a cache refuses a layer or a call unlike what filled it", "[refused][kv-cache]", float, double) {
  std::mt19937 rng(13);
  LayerConfig rope;
  rope.rope = RopeConfig{};
  const auto rotary = headwise_test::random_layer<TestType>(16, 2, 2, rng, 1.0, rope);
  const auto plain = headwise_test::random_layer<TestType>(16, 2, 2, rng);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(6, 16, rng);
  auto cache = rotary.make_cache(16);
  AttentionOptions window;
  window.window = 2;
  const Matrix<TestType> prefill = rotary.forward_incremental(x.topRows(4), cache, window);
  CHECK_THROWS_WITH(rotary.forward_incremental(x.bottomRows(2), cache),
                    Contains("the cache's keys were attended with a window of 2; this call asks for none"));
  CHECK_THROWS_WITH(plain.forward_incremental(x.bottomRows(2), cache, window),
                    Contains("the cache was filled by a layer with a rotary embedding; this layer has none"));
  AttentionOptions positioned = window;
  positioned.first_query_position = 4;
  CHECK_THROWS_WITH(rotary.forward_incremental(x.bottomRows(2), cache, positioned),
                    Contains("first_query_position and first_key_position must be left unset"));
  CHECK(cache.size() == 4);  // every refused call left it as it was
  // The same window throughout decodes the forward, bitwise; a reset cache serves another layer.
  const Matrix<TestType> rest = rotary.forward_incremental(x.bottomRows(2), cache, window);
  CHECK_THAT(headwise_test::as_double(rest), IsExactly(rotary.forward(x, window).bottomRows(2)));
  cache.reset();
  CHECK_THAT(headwise_test::as_double(plain.forward_incremental(x, cache)), IsExactly(plain.forward(x)));
}

// Finding 14: a 0 x n or n x 0 mask or bias on a 5-token call was taken for no mask.
TEST_CASE("a mask or bias with one empty side is refused, not taken for none", "[refused][mask]") {
  std::mt19937 rng(14);
  const Matrix<double> q = headwise_test::random_matrix<double>(5, 4, rng);
  AttentionOptions o;
  AttentionCall call;
  call.heads = {1, 1}, call.options = &o, call.logsumexp = true;
  o.mask.resize(0, 5);
  CHECK_THROWS_WITH(attend<double>(q, q, q, call), Contains("mask is 0x5, expected (n_q, n_k) = 5x5"));
  CHECK_THROWS_WITH(attention(q, q, q, o), Contains("mask is 0x5, expected (n_q, n_k) = 5x5"));
  o = {};
  o.bias.resize(5, 0);
  CHECK_THROWS_WITH(attend<double>(q, q, q, call), Contains("bias is 5x0, expected (n_q, n_k) = 5x5"));
}

// Finding 15: a config.json that is a directory was "not a JSON object"; a YaRN attention factor
// of 1e39 was blamed on the keys.
TEST_CASE("messages name the real problem: a directory, a rotary attention factor", "[refused][messages]") {
  const std::filesystem::path folder = scratch_folder("directory");
  std::filesystem::create_directory(folder / "config.json");
  CHECK_THROWS_WITH(io::read_llama_config((folder / "config.json").string()), Contains("it is a directory"));
  CHECK_THROWS_WITH(io::read_gpt2_config((folder / "config.json").string()), Contains("it is a directory"));
  const auto yarn = llama_with_config(
      "yarn", std::string(tiny_llama_config) +
                  R"(, "num_hidden_layers": 2, "rope_scaling": {"type": "yarn", "factor": 4.0, "attention_factor": 1e39}})");
  CHECK_THROWS_WITH(io::load_llama_attention<float>(yarn.string(), 0),
                    Contains("the rotary embedding's attention factor 1e+39 is not finite in float"));
  CHECK_NOTHROW(io::load_llama_attention<double>(yarn.string(), 0));
}

// ---- Issue 56 (a stress run of the tokenizer's files): findings 4, 5, 11 and 12 ----

namespace {

/// A model folder under the build tree holding GPT-2's tokenizer.json (with_tokenizer_json) or its
/// vocab.json + merges.txt, as links to tests/data (no copies of megabytes).
std::filesystem::path tokenizer_folder(const std::string& name, bool with_tokenizer_json) {
  const std::filesystem::path folder = scratch_folder("tokenizer-" + name);
  for (const char* file : with_tokenizer_json ? std::vector<const char*>{"tokenizer.json"} : std::vector<const char*>{"vocab.json", "merges.txt"})
    std::filesystem::create_symlink(headwise_test::data_path(std::string("gpt2-tokenizer/") + file), folder / file);
  return folder;
}

/// A tokenizer file's place in a folder, and what is put there instead of the file.
struct TokenizerFileCase {
  bool with_tokenizer_json;
  const char* file;
};

}  // namespace

// Finding 4: a directory named merges.txt (or vocab.json, tokenizer.json, tokenizer_config.json)
// was read as an empty file: one id per byte, no error.
TEST_CASE("a directory in a tokenizer file's place is refused by name, not read as an empty file", "[refused][tokenizer]") {
  const TokenizerFileCase c = GENERATE(values<TokenizerFileCase>(
      {{true, "tokenizer.json"}, {true, "tokenizer_config.json"}, {false, "vocab.json"}, {false, "merges.txt"},
       {false, "tokenizer_config.json"}, {false, "special_tokens_map.json"}, {false, "added_tokens.json"}}));
  CAPTURE(c.with_tokenizer_json, c.file);
  const std::filesystem::path folder = tokenizer_folder("directory", c.with_tokenizer_json);
  std::filesystem::remove(folder / c.file);
  std::filesystem::create_directory(folder / c.file);
  CHECK_THROWS_WITH(io::load_tokenizer(folder.string()), Contains((folder / c.file).string() + ": it is a directory"));
}

// Finding 5: load_tokenizer waited forever on a named pipe, and read a link to /dev/zero until
// stopped. Each load runs in a child process: a hang is killed after 10 s and reported.
TEST_CASE("a named pipe or a device in a tokenizer file's place is refused at once, never waited on or read", "[refused][tokenizer]") {
  const TokenizerFileCase c = GENERATE(values<TokenizerFileCase>(
      {{true, "tokenizer.json"}, {true, "tokenizer_config.json"}, {false, "vocab.json"}, {false, "merges.txt"},
       {false, "tokenizer_config.json"}}));
  const bool pipe = GENERATE(true, false);
  CAPTURE(c.with_tokenizer_json, c.file, pipe);
  if (!pipe && !std::filesystem::exists("/dev/zero")) return;
  const std::filesystem::path folder = tokenizer_folder("pipe", c.with_tokenizer_json), path = folder / c.file;
  std::filesystem::remove(path);
  if (pipe) REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  else std::filesystem::create_symlink("/dev/zero", path);
  const std::string expected = path.string() + (pipe ? ": it is a named pipe" : ": it is a device");
  CHECK(headwise_test::in_child([&] {
          try {
            io::load_tokenizer(folder.string());
            return 1;
          } catch (const text::TokenizerError& e) {
            return std::string(e.what()).find(expected) != std::string::npos ? 0 : 2;
          }
        }, std::chrono::seconds(10)) == "exit 0");
}

TEST_CASE("a tokenizer file larger than max_tokenizer_file_bytes is refused by name before it is read", "[refused][tokenizer]") {
  const std::filesystem::path folder = scratch_folder("tokenizer-large");
  std::ofstream(folder / "tokenizer.json").close();
  std::filesystem::resize_file(folder / "tokenizer.json", text::max_tokenizer_file_bytes + 1);  // (sparse: no disk, no read)
  CHECK_THROWS_WITH(io::load_tokenizer(folder.string()),
                    Contains((folder / "tokenizer.json").string() + ": it is 1073741825 bytes, more than the 1073741824 read here"));
  std::filesystem::remove(folder / "tokenizer.json");
}

// Finding 11: beside a tokenizer.json, tokenizer_config.json was not read at all, so keys refused
// beside vocab.json (GPT-2's own files) were ignored there. One rule now, beside either.
TEST_CASE("tokenizer_config.json is checked by one rule beside tokenizer.json and beside vocab.json", "[refused][tokenizer]") {
  const bool with_tokenizer_json = GENERATE(true, false);
  const auto [config, refusal] = GENERATE(table<std::string, std::string>({
      {R"({"split_special_tokens": true})", "\"split_special_tokens\" = true (special tokens as ordinary text) is not one headwise applies"},
      {R"({"do_lower_case": true})", "\"do_lower_case\" = true is not one headwise applies"},
      {R"({"tokenizer_class": "BertTokenizerFast"})", "\"tokenizer_class\" is \"BertTokenizerFast\""},
      {R"({"sentencepiece_model": "x"})", "the key \"sentencepiece_model\" is not one headwise knows"},
      {R"({"errors": "strict"})", "\"errors\" = \"strict\""},
      {R"({"backend": "sentencepiece"})", "\"backend\" = \"sentencepiece\""},
      {R"({"add_prefix_space": "yes"})", "\"add_prefix_space\" is not true or false"},
      {R"({"bos_token": 5})", "\"bos_token\" is neither a string nor {\"content\": string}"},
      {"{", "is not a JSON object"}}));
  CAPTURE(with_tokenizer_json, config);
  const std::filesystem::path folder = tokenizer_folder("config", with_tokenizer_json);
  write_text(folder / "tokenizer_config.json", config);
  CHECK_THROWS_WITH(io::load_tokenizer(folder.string()), Contains((folder / "tokenizer_config.json").string() + ": ") && Contains(refusal));
}

TEST_CASE("GPT-2's own tokenizer_config.json and the keys transformers 5 writes load beside the tokenizer files", "[tokenizer][fixture]") {
  // GPT-2's own, and the keys transformers 5 writes.
  CHECK_NOTHROW(io::load_tokenizer(headwise_test::data_path("gpt2-tokenizer")));
  const std::filesystem::path v5 = tokenizer_folder("config-v5", /*with_tokenizer_json=*/true);
  write_text(v5 / "tokenizer_config.json", R"({"backend": "tokenizers", "is_local": false, "tokenizer_class": "TokenizersBackend",
      "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "model_max_length": 1024, "clean_up_tokenization_spaces": true})");
  CHECK(io::load_tokenizer(v5.string()).encode("hello") == std::vector<Index>{31373});
  // (The six families' real tokenizer_config.json files load with their tokenizer.json in
  // test_family_tokenizers.cpp, each family's test loading its folder.)
}

// Finding 12: a tokenizer.json whose model is of another type was refused without naming the type
// (the message showed the model's first 80 characters, keys sorted: "type" comes after "merges").
TEST_CASE("a tokenizer.json model of another type is refused naming its type and the types headwise knows", "[refused][tokenizer]") {
  const auto refusal = [](const std::string& type) {
    return Contains("t.json: model type \"" + type + "\" is not one headwise reads (BPE; Unigram, WordPiece and WordLevel are not)");
  };
  CHECK_THROWS_WITH(text::Tokenizer::from_tokenizer_json_text(
                        R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                            "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1}}})", "t.json"),
                    refusal("WordPiece"));
  CHECK_THROWS_WITH(text::Tokenizer::from_tokenizer_json_text(
                        R"({"model": {"type": "Ngram", "merges": ["a b", "ab c", "abc d", "abcd e", "abcde f", "abcdef g", "abcdefg h"],
                            "vocab": {"a": 0}}})", "t.json"),
                    refusal("Ngram"));
}

// ---- Issue 56, finding 11: config keys nothing applied ----

// Finding 11: a config.json key the loader does not use ("rope_thetta", "num_key_value_head",
// "sliding_windw", another family's "attn_logit_softcapping") was ignored, so the model loaded was
// not the one the file describes. Each top-level key is now one the family's config has (its
// Hugging Face config class's, PretrainedConfig's: the loaders' table) or refused by name.
TEST_CASE("a config key the family's config.json does not have is refused by name, misspelt or another family's", "[refused][config]") {
  static const std::string refuses = " (headwise refuses keys it does not know, rather than ignore one that may matter)";
  // A misspelling, in the file the attention loader reads: the file, the key and the model_type named.
  const auto thetta = llama_with_config("misspelt-key", std::string(tiny_llama_config) + R"(, "num_hidden_layers": 2, "rope_thetta": 5e5})");
  CHECK_THROWS_WITH(io::load_llama_attention<float>(thetta.string(), 0),
                    Contains((thetta / "config.json").string() + ": \"rope_thetta\" is not a key of a llama config.json" + refuses +
                             "; did you mean \"rope_theta\"?"));
  const auto [type, extra, refusal] = GENERATE(table<std::string, std::string, std::string>({
      {"llama", R"("num_key_value_head": 2)", "\"num_key_value_head\" is not a key of a llama config.json" + refuses +
                                                  "; did you mean \"num_key_value_heads\"?"},
      {"mistral", R"("sliding_windw": 4)", "\"sliding_windw\" is not a key of a mistral config.json" + refuses +
                                              "; did you mean \"sliding_window\"?"},
      {"llama", R"("sliding_windw": 4)", "\"sliding_windw\" is not a key of a llama config.json" + refuses},
      // Another family's key: Gemma's soft-capping on a Llama, Llama 4's NoPE layers on a Qwen3.
      {"llama", R"("attn_logit_softcapping": 50.0)", "\"attn_logit_softcapping\" is not a key of a llama config.json" + refuses +
                                                         "; gemma2, gemma3_text and gemma4_text have it"},
      {"qwen3", R"("no_rope_layers": [1, 0])", "\"no_rope_layers\" is not a key of a qwen3 config.json" + refuses +
                                                   "; llama4_text and smollm3 have it"},
      {"gemma3_text", R"("hidden_act": "silu")", "\"hidden_act\" is not a key of a gemma3_text config.json" + refuses},
      {"llama", R"("n_embd": 64)", "\"n_embd\" is not a key of a llama config.json" + refuses + "; gpt2 has it"}}));
  CAPTURE(type, extra);
  const std::string config = R"({"model_type": ")" + type + R"(", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, )" + extra + "}";
  CHECK_THROWS_WITH(io::parse_llama_config(config, "c.json"), Contains("headwise: llama config: c.json: " + refusal));
  // GPT-2's config (read by its attention loader and by the whole-model loader alike).
  const std::string gpt2 = R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, )";
  CHECK_THROWS_WITH(io::parse_gpt2_config(gpt2 + R"("n_layr": 3})", "g.json"),
                    Contains("headwise: gpt2 config: g.json: \"n_layr\" is not a key of a gpt2 config.json" + refuses + "; did you mean \"n_layer\"?"));
  CHECK_THROWS_WITH(io::parse_gpt2_config(gpt2 + R"("hidden_size": 128})", "g.json"),  // (GPT2Config's alias of n_embd: not read)
                    Contains("\"hidden_size\" is not a key of a gpt2 config.json"));
  CHECK_THROWS_WITH(io::parse_gpt2_config(gpt2 + R"("multi_query": true})", "g.json"),  // (GPTBigCode's: another attention)
                    Contains("\"multi_query\" is not a key of a gpt2 config.json"));
  const std::filesystem::path folder = scratch_folder("gpt2-misspelt-key");
  std::filesystem::copy_file(headwise_test::data_path("gpt2-tiny/model.safetensors"), folder / "model.safetensors");
  write_text(folder / "config.json", gpt2 + R"("scale_attn_by_inverse_layer_index": true})");
  CHECK_THROWS_WITH(io::load_gpt2_attention_layers<float>(folder.string()),
                    Contains("\"scale_attn_by_inverse_layer_index\" is not a key of a gpt2 config.json" + refuses +
                             "; did you mean \"scale_attn_by_inverse_layer_idx\"?"));
  // What PretrainedConfig and the config classes write, and older files carry, still loads.
  CHECK_NOTHROW(io::parse_gpt2_config(gpt2 + R"("n_ctx": 1024, "n_special": 0, "predict_special_tokens": true, "_num_labels": 1,
      "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "task_specific_params": {"text-generation": {"do_sample": true}},
      "transformers_version": "4.6.0", "torch_dtype": "float32", "gradient_checkpointing": false})", "g.json"));
  CHECK_NOTHROW(io::parse_llama_config(R"({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "architectures": ["Qwen2ForCausalLM"], "use_mrope": false, "use_sliding_window": false, "sliding_window": 32768,
      "max_window_layers": 2, "bos_token_id": 1, "dtype": "bfloat16", "rope_scaling": null, "auto_map": {}})", "c.json"));
  // Keys of real files: Gemma 2 9B's sliding_window_size, Phi-4-mini's own (where they change
  // nothing), a tool's stamps (unsloth's, transformers-private ones).
  CHECK_NOTHROW(io::parse_llama_config(R"({"model_type": "gemma2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "head_dim": 16, "sliding_window": 4096, "sliding_window_size": 4096, "unsloth_version": "2025.3.1", "_commit_hash": null})", "c.json"));
  const std::string phi4 = R"({"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "mlp_bias": false, )";
  CHECK_NOTHROW(io::parse_llama_config(phi4 + R"("full_attn_mod": 1, "interpolate_factor": 1, "lm_head_bias": false})", "c.json"));
  CHECK_THROWS_WITH(io::parse_llama_config(phi4 + R"("full_attn_mod": 2})", "c.json"), Contains("\"full_attn_mod\" is not 1"));
  CHECK_THROWS_WITH(io::parse_llama_config(phi4 + R"("interpolate_factor": 2})", "c.json"), Contains("\"interpolate_factor\" is not 1"));
  CHECK_THROWS_WITH(io::parse_llama_config(phi4 + R"("lm_head_bias": true})", "c.json"), Contains("\"lm_head_bias\" = true"));
}

TEST_CASE("every config.json in tests/data loads with its family's reader", "[config][fixture]") {
  int configs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(headwise_test::data_path(""))) {
    const std::filesystem::path path = entry.path() / "config.json";
    if (!std::filesystem::is_regular_file(path)) continue;
    CAPTURE(path.string());
    std::ifstream in(path);
    const std::string type = nlohmann::json::parse(in).value("model_type", "");
    if (type == "gpt2") CHECK_NOTHROW(io::read_gpt2_config(path.string()));
    else CHECK_NOTHROW(io::read_llama_config(path.string()));
    ++configs;
  }
  CHECK(configs >= 30);  // (33 when this was written: every family's tiny checkpoints)
}
