// Studying whole models (tests/data/*-model-tiny/analysis-reference.safetensors, PyTorch float64
// autograd rechecked by finite differences in numpy): gradients of the next-token loss and of a
// logit difference through GPT-2, Llama, Qwen3, Gemma 3 and Qwen3-MoE, with respect to every hook
// and every parameter by its checkpoint name; and what the backward refuses by name.
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "headwise/io/decoder_model.hpp"
#include "headwise/interpret/activation_patching.hpp"
#include "headwise/interpret/attribution.hpp"
#include "headwise/interpret/logit_lens.hpp"
#include "headwise/interpret/model_head_scores.hpp"
#include "headwise/interpret/path_patching.hpp"
#include "headwise/model/backward.hpp"
#include "headwise/model/model_shape.hpp"
#include "headwise/model/training.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/layer_checks.hpp"
#include "support/matchers.hpp"

using namespace headwise;
using headwise_test::IsNear;

namespace {

// Under the sanitizers (model code at -Og, the tests' at -O0: a patched run is ~100x slower) one
// model, Qwen3-MoE (GQA, QK-norms, experts), in float, and a path patching of each receiver; the
// test preset runs everything.
#ifdef HEADWISE_TESTS_UNDER_SANITIZERS
const char* const study_folders[] = {"qwen3moe-model-tiny"};
const char* const difference_folders[] = {"olmo2-tiny", "ministral3-tiny"};
#define HEADWISE_STUDY_TYPES float
constexpr bool every_path_reading = false;
#else
const char* const study_folders[] = {"gpt2-model-tiny", "llama-model-tiny", "qwen3-model-tiny", "gemma3-model-tiny", "qwen3moe-model-tiny"};
const char* const difference_folders[] = {"gemma2-tiny", "smollm3-tiny", "olmo2-tiny", "ministral3-tiny", "phi3-tiny"};
#define HEADWISE_STUDY_TYPES double, float
constexpr bool every_path_reading = true;
#endif

std::vector<Index> ids_in(const io::SafetensorsFile& ref, const std::string& name) {
  std::vector<Index> ids;
  for (const double v : ref.values<double>(name)) ids.push_back(static_cast<Index>(v));
  return ids;
}

/// The fixture's tensor `name` as the library lays the activation out: [T, H, d] and [H, T, d] (or
/// [H, T, T]) side by side as (T, H d); others as stored (a vector as one row).
Matrix<double> laid_out(const io::SafetensorsFile& ref, const std::string& name, bool heads_first) {
  const auto& shape = ref.info(name).shape;
  if (shape.size() != 3) return ref.matrix<double>(name);
  if (heads_first) return headwise_test::side_by_side<double>(ref, name);
  const std::vector<double> v = ref.values<double>(name);
  return Eigen::Map<const Matrix<double>>(v.data(), Index(shape[0]), Index(shape[1] * shape[2]));
}

/// The library's (TransformerLens's) name of a fixture's activation: attn.q is attn.hook_q.
std::string library_name(std::string name) {
  for (const auto& [theirs, ours] : {std::pair<std::string, std::string>{"attn.q", "attn.hook_q"}, {"attn.k", "attn.hook_k"}, {"attn.v", "attn.hook_v"}}) {
    const auto at = name.size() >= theirs.size() ? name.size() - theirs.size() : std::string::npos;
    if (at != std::string::npos && name.compare(at, std::string::npos, theirs) == 0) name.replace(at, theirs.size(), ours);
  }
  return name;
}

/// GPT-2's wte and wpe are stored as chosen rows, their column sums and the sum of squares.
void check_table(const io::SafetensorsFile& ref, const std::string& key, const std::string& parameter, const Matrix<double>& g, double tol) {
  const std::vector<Index> rows = ids_in(ref, "rows." + parameter);
  Matrix<double> chosen(Index(rows.size()), g.cols());
  for (std::size_t i = 0; i < rows.size(); ++i) chosen.row(Index(i)) = g.row(rows[i]);
  CHECK_THAT(chosen, IsNear(ref.matrix<double>(key + ".rows"), tol));
  CHECK_THAT(Matrix<double>(g.colwise().sum()), IsNear(ref.matrix<double>(key + ".colsum"), tol));
  CHECK(std::abs(g.squaredNorm() - ref.values<double>(key + ".sumsq")[0]) <= tol * ref.values<double>(key + ".sumsq")[0]);
}

template <class Scalar>
void check_gradients(const std::string& folder) {
  CAPTURE(folder);
  const auto model = io::load_decoder_model<Scalar>(headwise_test::data_path(folder));
  const io::SafetensorsFile ref = headwise_test::load_fixture(folder + "/analysis-reference.safetensors");
  const std::vector<Index> ids = ids_in(ref, "input_ids"), tokens = ids_in(ref, "metric_tokens");
  const double tol = sizeof(Scalar) == sizeof(double) ? 1e-10 : 1e-4;
  model::GradientOptions options;
  for (const std::string& name : model::gradient_names(model)) options.activations.insert(name);
  for (const std::string metric : {"loss", "logit_diff"}) {
    CAPTURE(metric);
    const auto m = metric == "loss" ? model::Metric<Scalar>::next_token_loss(ids) : model::Metric<Scalar>::logit_difference(tokens[0], tokens[1]);
    const model::ModelGradients<Scalar> g = model::gradients(model, ids, m, options);
    CHECK(std::abs(g.metric - ref.values<double>(metric)[0]) <= (sizeof(Scalar) == sizeof(double) ? 1e-11 : 1e-4) * std::abs(ref.values<double>(metric)[0]));
    // Every activation gradient the fixture holds, by the library's name.
    const std::string prefix = "grad." + metric + ".";
    for (const std::string& key : ref.names()) {
      if (key.rfind(prefix, 0) != 0 || key.rfind(prefix + "param.", 0) == 0) continue;
      const std::string name = library_name(key.substr(prefix.size()));
      CAPTURE(name);
      REQUIRE(g.activations.count(name));
      const bool heads_first = name.find("attn.hook_q") != std::string::npos || name.find("attn.hook_k") != std::string::npos ||
                               name.find("attn.hook_v") != std::string::npos || name.find("hook_pattern") != std::string::npos;
      CHECK_THAT(g.activations.at(name).template cast<double>(), IsNear(laid_out(ref, key, heads_first), tol));
    }
    for (const auto& [name, value] : g.parameters) {
      CAPTURE(name);
      const std::string key = "grad." + metric + ".param." + name;
      if (ref.contains(key + ".rows")) {
        check_table(ref, key, name, value.template cast<double>(), tol);
        continue;
      }
      REQUIRE(ref.contains(key));
      CHECK_THAT(value.template cast<double>(), IsNear(ref.matrix<double>(key), tol));
    }
    // Every parameter of the checkpoint has its gradient.
    std::size_t in_fixture = 0;
    for (const std::string& key : ref.names())
      if (key.rfind("grad." + metric + ".param.", 0) == 0 && key.find(".colsum") == std::string::npos && key.find(".sumsq") == std::string::npos)
        ++in_fixture;
    CHECK(g.parameters.size() == in_fixture);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("Whole-model gradients of the loss and a logit difference match PyTorch's autograd", "[study][gradients][fixture]",
                   HEADWISE_STUDY_TYPES) {
  for (const char* folder : study_folders) check_gradients<TestType>(folder);
}

TEST_CASE("A whole-model backward gives the same bits on 1 and 2 threads, and refuses what it cannot take by name", "[study][gradients]") {
  const auto model = io::load_decoder_model<float>(headwise_test::data_path("qwen3moe-model-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("qwen3moe-model-tiny/analysis-reference.safetensors");
  const std::vector<Index> ids = ids_in(ref, "input_ids");
  model::GradientOptions one, two;
  one.threads = 1, two.threads = 2;
  one.activations = two.activations = {"hook_embed", "blocks.1.attn.hook_z", "blocks.2.mlp.router_logits"};
  const auto metric = model::Metric<float>::next_token_loss(ids);
  const auto a = model::gradients(model, ids, metric, one), b = model::gradients(model, ids, metric, two);
  for (const auto& [name, value] : a.activations) CHECK_THAT(value.cast<double>(), headwise_test::IsExactly(b.activations.at(name)));
  for (const auto& [name, value] : a.parameters) CHECK_THAT(value.cast<double>(), headwise_test::IsExactly(b.parameters.at(name)));
  CHECK(a.parameters.size() == b.parameters.size());
  // Long enough that the norms' backward and the loss split their rows over the threads (each
  // past 2^20 operations): 600 tokens of d_model 128, a vocabulary of 2000; the attention's and the
  // final norm made LayerNorms (centred, with a bias), the MLP's an RMSNorm.
  {
    model::ModelShape s;
    s.vocab = 2000, s.d_model = 128, s.heads = 4, s.d_mlp = 64;
    auto wide = model::make_model<float>(s, 3);
    for (model::Norm<float>* norm : {&*wide.blocks[0].attention_norm, &wide.final_norm}) {
      norm->kind = model::Norm<float>::Kind::layer_norm;
      norm->weight = RowVector<float>::LinSpaced(128, 0.5f, 1.5f), norm->bias = RowVector<float>::LinSpaced(128, -0.1f, 0.1f);
    }
    std::vector<Index> long_ids(600);
    for (std::size_t t = 0; t < long_ids.size(); ++t) long_ids[t] = Index((t * 7919) % 2000);
    const auto long_metric = model::Metric<float>::next_token_loss(long_ids);
    model::GradientOptions on_one, on_two;
    on_one.threads = 1, on_two.threads = 2;
    on_one.activations = on_two.activations = {"hook_embed", "blocks.0.hook_resid_mid", "ln_final.out"};
    const auto c = model::gradients(wide, long_ids, long_metric, on_one), d = model::gradients(wide, long_ids, long_metric, on_two);
    CHECK(c.metric == d.metric);
    CHECK(c.parameters.count("model.norm.bias") == 1);
    for (const auto& [name, value] : c.activations) CHECK_THAT(value.cast<double>(), headwise_test::IsExactly(d.activations.at(name)));
    for (const auto& [name, value] : c.parameters) CHECK_THAT(value.cast<double>(), headwise_test::IsExactly(d.parameters.at(name)));
  }

  model::GradientOptions unknown;
  unknown.activations = {"blocks.0.attn.hook_result"};
  CHECK_THROWS_WITH(model::gradients(model, ids, metric, unknown),
                    Catch::Contains("no activation \"blocks.0.attn.hook_result\" to differentiate (gradient_names lists them)"));
  CHECK_THROWS_WITH(model::gradients(model, ids, model::Metric<float>::logit_difference(0, 300)),
                    Catch::Contains("logit difference of ids 0 and 300 at row -1: the logits are 20x300"));
  CHECK_THROWS_WITH(model::gradients(model, {1, 2}, metric), Catch::Contains("20 targets for 2 rows of logits"));
  CHECK_THROWS_WITH(model::Metric<float>::next_token_loss({7}), Catch::Contains("ids has 1 tokens (at least 2: one to predict)"));
  CHECK_THROWS_WITH(model::gradients(model, ids, model::Metric<float>::direction(Matrix<float>::Ones(3, 3))),
                    Catch::Contains("the direction is 3x3, the logits 20x300"));
  model::Metric<float> bad = metric;
  bad.targets[3] = 300;
  CHECK_THROWS_WITH(model::gradients(model, ids, bad), Catch::Contains("target id 300 is not in [0, 300)"));
}

namespace {
/// A [L, H, T] fixture as (L H, T), row l H + h.
Matrix<double> stacked(const io::SafetensorsFile& ref, const std::string& name) {
  const auto& shape = ref.info(name).shape;
  const std::vector<double> v = ref.values<double>(name);
  return Eigen::Map<const Matrix<double>>(v.data(), Index(shape[0] * shape[1]), Index(shape[2]));
}

template <class Scalar>
void check_patching(const std::string& folder) {
  CAPTURE(folder);
  const auto model = io::load_decoder_model<Scalar>(headwise_test::data_path(folder));
  const io::SafetensorsFile ref = headwise_test::load_fixture(folder + "/analysis-reference.safetensors");
  const std::vector<Index> ids = ids_in(ref, "input_ids"), tokens = ids_in(ref, "metric_tokens");
  const double tol = sizeof(Scalar) == sizeof(double) ? 1e-10 : 1e-4;
  const interpret::ActivationPatching<Scalar> patching(model, ids, ids_in(ref, "corrupted_ids"),
                                                       model::Metric<Scalar>::logit_difference(tokens[0], tokens[1]));
  const interpret::PatchingTable heads = patching.heads();
  CHECK(std::abs(heads.unpatched - ref.values<double>("clean_metric")[0]) < tol * 10);
  CHECK(std::abs(heads.source - ref.values<double>("corrupted_metric")[0]) < tol * 10);
  CHECK_THAT(heads.values, IsNear(ref.matrix<double>("patch.head_z.all_pos"), tol));
  CHECK_THAT(patching.heads_per_position().values, IsNear(stacked(ref, "patch.head_z.per_pos"), tol));
  CHECK_THAT(patching.positions(interpret::Stream::resid_pre).values, IsNear(ref.matrix<double>("patch.resid_pre"), tol));
  CHECK_THAT(patching.positions(interpret::Stream::attn_out).values, IsNear(ref.matrix<double>("patch.attn_out"), tol));
  CHECK_THAT(patching.positions(interpret::Stream::mlp_out).values, IsNear(ref.matrix<double>("patch.mlp_out"), tol));
}
}  // namespace

TEMPLATE_TEST_CASE("Activation-patching sweeps (heads at all and at each position, the stream per layer and position) match the fixtures",
                   "[study][patching][fixture]", HEADWISE_STUDY_TYPES) {
  for (const char* folder : study_folders) check_patching<TestType>(folder);
}

TEST_CASE("A patched run resumed from the clean run's caches equals a full rerun bit for bit", "[study][patching]") {
  for (const char* folder : study_folders) {
    CAPTURE(folder);
    const auto model = io::load_decoder_model<float>(headwise_test::data_path(folder));
    const io::SafetensorsFile ref = headwise_test::load_fixture(std::string(folder) + "/analysis-reference.safetensors");
    const std::vector<Index> ids = ids_in(ref, "input_ids"), corrupted = ids_in(ref, "corrupted_ids");
    const auto metric = model::Metric<float>::direction(Matrix<float>::Zero(Index(ids.size()), model.vocab_size()));
    const interpret::ActivationPatching<float> patching(model, ids, corrupted, metric);
    const model::ModelRun<float>& source = patching.source_run();
    const Index n = Index(ids.size());
    const Index last = model.n_layers() - 1;
    for (const auto& [layer, position, hook] : {std::tuple<Index, Index, const char*>{1, 7, "hook_resid_pre"}, {0, 12, "hook_mlp_out"},
                                                {last, 0, "attn.hook_z"}, {1, n - 1, "hook_attn_out"}}) {
      CAPTURE(layer, position, hook);
      const std::string name = "blocks." + std::to_string(layer) + "." + hook;
      const Matrix<float>& from = source.hooks.at(name);
      const model::HookFunction<float> patch = [&from, position = position](Matrix<float>& v, const model::HookPoint& at) {
        v.row(position - at.first) = from.row(position);
      };
      model::RunOptions<float> full;
      full.hook_functions[name] = patch;
      const Matrix<float> rerun = model.run(ids, full).logits;
      // The resumed run's rows, through a direction metric that reads exactly one logit each time.
      for (const Index row : {position, n - 1}) {
        Matrix<float> one = Matrix<float>::Zero(n, model.vocab_size());
        one(row, 3) = 1;
        const interpret::ActivationPatching<float> reading(model, ids, corrupted, model::Metric<float>::direction(one));
        CHECK(reading.patched(layer, position, name, patch) == double(rerun(row, 3)));
      }
      (void)patching;
    }
  }
}

namespace {
/// A [L, H, L, R] fixture as (L H, L R).
Matrix<double> senders_by_receivers(const io::SafetensorsFile& ref, const std::string& name) {
  const auto& s = ref.info(name).shape;
  const std::vector<double> v = ref.values<double>(name);
  return Eigen::Map<const Matrix<double>>(v.data(), Index(s[0] * s[1]), Index(s[2] * s[3]));
}

/// NaN where the reference is NaN, else near: the path tables.
void check_with_gaps(const Matrix<double>& actual, const Matrix<double>& expected, double tol) {
  REQUIRE(actual.rows() == expected.rows());
  REQUIRE(actual.cols() == expected.cols());
  CHECK(((actual.array().isNaN()) == (expected.array().isNaN())).all());
  CHECK_THAT(Matrix<double>(actual.array().isNaN().select(0.0, actual)), IsNear(Matrix<double>(expected.array().isNaN().select(0.0, expected)), tol));
}

template <class Scalar>
void check_attribution_paths_lens(const std::string& folder) {
  CAPTURE(folder);
  const auto model = io::load_decoder_model<Scalar>(headwise_test::data_path(folder));
  const io::SafetensorsFile ref = headwise_test::load_fixture(folder + "/analysis-reference.safetensors");
  const std::vector<Index> ids = ids_in(ref, "input_ids"), corrupted = ids_in(ref, "corrupted_ids"), tokens = ids_in(ref, "metric_tokens");
  const double tol = sizeof(Scalar) == sizeof(double) ? 1e-10 : 1e-4;
  const auto metric = model::Metric<Scalar>::logit_difference(tokens[0], tokens[1]);
  // Attribution patching: the tables hold the unpatched metric plus each estimate.
  const interpret::ModelAttribution a = interpret::attribution_patching(model, ids, corrupted, metric);
  const double base = a.heads.unpatched;
  CHECK_THAT(Matrix<double>(a.heads.values.array() - base), IsNear(ref.matrix<double>("attribution.head_z.all_pos"), tol));
  CHECK_THAT(Matrix<double>(a.heads_per_position.values.array() - base), IsNear(stacked(ref, "attribution.head_z.per_pos"), tol));
  CHECK_THAT(Matrix<double>(a.resid_pre.values.array() - base), IsNear(ref.matrix<double>("attribution.resid_pre"), tol));
  CHECK_THAT(Matrix<double>(a.attn_out.values.array() - base), IsNear(ref.matrix<double>("attribution.attn_out"), tol));
  CHECK_THAT(Matrix<double>(a.mlp_out.values.array() - base), IsNear(ref.matrix<double>("attribution.mlp_out"), tol));
  // Path patching, every reading the fixture holds.
  using interpret::Receiver;
  for (const auto& [name, receiver, freeze, per_query] :
       {std::tuple<std::string, Receiver, bool, bool>{"path.q", Receiver::query, true, false}, {"path.k", Receiver::key, true, false},
        {"path.v", Receiver::value, true, false}, {"path_free.q", Receiver::query, false, false}, {"path_free.k", Receiver::key, false, false},
        {"path_free.v", Receiver::value, false, false}, {"path.k_per_query_head", Receiver::key, true, true},
        {"path.v_per_query_head", Receiver::value, true, true}}) {
    if (!ref.contains(name) || (!every_path_reading && (!freeze || per_query))) continue;
    CAPTURE(name);
    interpret::PathPatchingOptions o;
    o.receiver = receiver, o.freeze = freeze, o.per_query_head = per_query;
    check_with_gaps(interpret::path_patching(model, ids, corrupted, metric, o).values, senders_by_receivers(ref, name), tol);
  }
  // The logit lens: log-sum-exp and argmax per layer and position; the whole logits (or GPT-2's chosen columns).
  interpret::LogitLensOptions lo;
  lo.keep_logits = true;
  const interpret::LogitLens<Scalar> lens = interpret::logit_lens(model, ids, lo);
  CHECK_THAT(lens.logsumexp, IsNear(ref.matrix<double>("lens.resid_pre.logsumexp"), tol));
  const Matrix<double> argmax = ref.matrix<double>("lens.resid_pre.argmax");
  for (Index l = 0; l <= model.n_layers(); ++l) {
    CAPTURE(l);
    for (Index t = 0; t < Index(ids.size()); ++t) CHECK(double(lens.top[std::size_t(l)](t, 0)) == argmax(l, t));
    const bool chosen = ref.contains("lens.resid_pre.rows");
    const Matrix<double> expected = ref.slice<double>(chosen ? "lens.resid_pre.rows" : "lens.resid_pre", l);
    Matrix<double> actual = lens.logits[std::size_t(l)].template cast<double>();
    if (chosen) {
      const std::vector<Index> columns = ids_in(ref, "rows.transformer.wte.weight");
      Matrix<double> picked(actual.rows(), Index(columns.size()));
      for (std::size_t c = 0; c < columns.size(); ++c) picked.col(Index(c)) = actual.col(columns[c]);
      actual = picked;
    }
    CHECK_THAT(actual, IsNear(expected, tol));
  }
}
}  // namespace

TEMPLATE_TEST_CASE("Attribution patching over the model, path patching (q, k, v, frozen or free, per key/value or query head) and the logit lens match the fixtures",
                   "[study][patching][fixture]", HEADWISE_STUDY_TYPES) {
  for (const char* folder : study_folders) check_attribution_paths_lens<TestType>(folder);
}

TEMPLATE_TEST_CASE("Head studies from the fused records (O(n d)) equal those from the recorded patterns", "[study][scores]", HEADWISE_STUDY_TYPES) {
  for (const char* folder : study_folders) {
    CAPTURE(folder);
    const auto model = io::load_decoder_model<TestType>(headwise_test::data_path(folder));
    std::vector<Index> ids = ids_in(headwise_test::load_fixture(std::string(folder) + "/analysis-reference.safetensors"), "input_ids");
    ids.insert(ids.end(), ids.begin(), ids.begin() + 9);  // (repeats for the duplicate and prefix-matching scores)
    const interpret::ModelHeadScores rows = interpret::score_model_heads(model, ids, 12, 7, interpret::PatternSource::rows, 2);
    const interpret::ModelHeadScores recorded = interpret::score_model_heads(model, ids, 12, 7, interpret::PatternSource::recorded);
    const double tol = sizeof(TestType) == sizeof(double) ? 1e-12 : 1e-5;
    for (std::size_t k = 0; k < rows.named().size(); ++k) {
      CAPTURE(rows.named()[k].first);
      CHECK_THAT(*rows.named()[k].second, IsNear(*recorded.named()[k].second, tol, 1.0));  // (scores in [0, 1]: to tol of 1)
      if (rows.named()[k].first != "sink mass") CHECK(rows.named()[k].second->maxCoeff() > 0.01);  // (each score measured something; no model here has sinks)
    }
  }
}

namespace {
template <class Scalar>
void check_adamw(const std::string& folder) {
  CAPTURE(folder);
  auto model = io::load_decoder_model<Scalar>(headwise_test::data_path(folder));
  const io::SafetensorsFile ref = headwise_test::load_fixture(folder + "/analysis-reference.safetensors");
  const std::vector<std::vector<Index>> batch = {ids_in(ref, "input_ids"), ids_in(ref, "corrupted_ids")};
  model::Parameters<Scalar> weights = model::parameters_of(model);
  model::AdamW<Scalar> adamw({1e-2, 0.9, 0.98, 1e-8, 0.1});
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) losses.push_back(model::train_step(model, weights, adamw, batch));
  losses.push_back(model::batch_loss_gradients(model, batch).first);
  const std::vector<double> expected = ref.values<double>("adamw.loss");
  for (std::size_t i = 0; i < 4; ++i) CHECK(std::abs(losses[i] - expected[i]) <= (sizeof(Scalar) == sizeof(double) ? 1e-10 : 2e-4) * expected[i]);
  if (sizeof(Scalar) != sizeof(double)) return;  // (float32 steps near lr sign(g) flip where g rounds near 0: the fixture's README)
  std::size_t compared = 0;
  for (const auto& [name, value] : weights) {
    CAPTURE(name);
    const std::string key = "adamw.step3." + name;
    if (ref.contains(key + ".rows")) {
      check_table(ref, key, name, value.template cast<double>(), 1e-10);
    } else if (name.find("c_attn.bias") != std::string::npos) {
      // The key bias's gradient is 0 in exact arithmetic (it adds q . b_K to every score of a row):
      // both sides step on rounding noise there, lr m / sqrt(v) of it. The query and value biases must match.
      const Index d = value.cols() / 3;
      const Matrix<double> got = value.template cast<double>(), want = ref.matrix<double>(key);
      CHECK_THAT(Matrix<double>(got.leftCols(d)), IsNear(Matrix<double>(want.leftCols(d)), 1e-10));
      CHECK_THAT(Matrix<double>(got.rightCols(d)), IsNear(Matrix<double>(want.rightCols(d)), 1e-10));
      CHECK_THAT(Matrix<double>(got.middleCols(d, d)), IsNear(Matrix<double>(want.middleCols(d, d)), 1e-6));
    } else {
      REQUIRE(ref.contains(key));
      CHECK_THAT(value.template cast<double>(), IsNear(ref.matrix<double>(key), 1e-10));
    }
    ++compared;
  }
  CHECK(compared == weights.size());
}
}  // namespace

TEMPLATE_TEST_CASE("AdamW in the library takes PyTorch's three steps on GPT-2, Llama and Qwen3-MoE", "[study][training][fixture]", HEADWISE_STUDY_TYPES) {
  for (const char* folder : study_folders)
    if (std::string(folder) != "qwen3-model-tiny" && std::string(folder) != "gemma3-model-tiny") check_adamw<TestType>(folder);  // (the fixtures with AdamW steps)
}

TEST_CASE("Training is deterministic across thread counts, lowers the loss, and bad settings are refused by name", "[study][training]") {
  model::ModelShape shape;
  shape.vocab = 11, shape.d_model = 16, shape.layers = 2, shape.heads = 2, shape.kv_heads = 1, shape.d_mlp = 24, shape.init = 0.2;
  const std::vector<std::vector<Index>> batch = {{1, 2, 3, 4, 1, 2, 3, 4, 1, 2}, {5, 6, 7, 5, 6, 7, 5, 6, 7, 5}};
  std::vector<model::Parameters<float>> after;
  std::vector<double> first, last;
  for (const int threads : {1, 2}) {
    auto m = model::make_model<float>(shape, 9);
    model::Parameters<float> weights = model::parameters_of(m);
    model::AdamW<float> adamw({1e-2, 0.9, 0.98, 1e-8, 0.01});
    first.push_back(model::train_step(m, weights, adamw, batch, threads));
    for (int step = 0; step < 30; ++step) model::train_step(m, weights, adamw, batch, threads);
    last.push_back(model::batch_loss_gradients(m, batch, threads).first);
    after.push_back(model::parameters_of(m));
  }
  CHECK(first[0] == first[1]);
  CHECK(last[0] == last[1]);
  CHECK(last[0] < 0.5 * first[0]);  // (two repeating patterns: learnt in context)
  for (const auto& [name, value] : after[0]) CHECK_THAT(value.cast<double>(), headwise_test::IsExactly(after[1].at(name)));

  auto m = model::make_model<float>(shape, 9);
  model::Parameters<float> weights = model::parameters_of(m);
  CHECK(weights.count("model.layers.1.self_attn.k_proj.weight"));
  CHECK(weights.at("model.layers.1.self_attn.k_proj.weight").rows() == 8);  // (one key/value head of 8)
  weights.erase("model.norm.weight");
  CHECK_THROWS_WITH(model::set_parameters(m, weights), Catch::Contains("no parameter \"model.norm.weight\" (parameters_of lists them)"));
  weights = model::parameters_of(m);
  weights.at("lm_head.weight")(0, 0) = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(model::set_parameters(m, weights), Catch::Contains("lm_head.weight has an entry that is not finite"));
  weights.at("lm_head.weight").resize(3, 3);
  CHECK_THROWS_WITH(model::set_parameters(m, weights), Catch::Contains("lm_head.weight is 3x3, expected 11x16"));
  CHECK_THROWS_WITH(model::AdamW<float>({1e-3, 1.0, 0.99, 1e-8, 0.0}), Catch::Contains("betas in [0, 1)"));
  model::AdamW<float> adamw;
  CHECK_THROWS_WITH(adamw.step(weights, {{"model.bogus", Matrix<float>::Zero(1, 1)}}), Catch::Contains("a gradient for \"model.bogus\", which is not a parameter"));
  model::ModelShape bad = shape;
  bad.kv_heads = 3;
  CHECK_THROWS_WITH(model::make_model<float>(bad, 1), Catch::Contains("key/value heads dividing heads"));
  CHECK_THROWS_WITH(model::batch_loss_gradients(m, {{4}}), Catch::Contains("a sequence of 1 tokens (at least 2: one to predict)"));
  // A resumed run: caches that disagree, or hooks that hold every token, are refused by name.
  auto caches = m.make_caches(10);
  m.decode({1, 2, 3}, caches);
  caches[1].truncate(2);
  CHECK_THROWS_WITH(m.resume(0, Matrix<float>::Zero(2, 16), caches), Catch::Contains("the caches of layers 0 .. hold different numbers of tokens"));
  model::RunOptions<float> pattern;
  pattern.hooks = {"blocks.1.attn.hook_pattern"};
  CHECK_THROWS_WITH(m.resume(1, Matrix<float>::Zero(2, 16), caches, pattern), Catch::Contains("holds every token's keys, values or weights"));
  CHECK_THROWS_WITH(interpret::ActivationPatching<float>(m, {1, 2, 3}, {1, 2}, model::Metric<float>::logit_difference(0, 1)),
                    Catch::Contains("patching needs two runs of the same length"));
  model::RunOptions<float> below;
  below.hook_functions["blocks.0.hook_mlp_out"] = [](Matrix<float>&, const model::HookPoint&) {};
  CHECK_THROWS_WITH(m.resume(1, Matrix<float>::Zero(1, 16), caches, below), Catch::Contains("is below layer 1, where the run resumes"));

  // A refused set_parameters changes nothing; an output bias round-trips by its checkpoint name
  // (o_proj.bias), and one the names do not have is refused rather than dropped.
  const Matrix<float> before = m.run({1, 2, 3}).logits;
  weights = model::parameters_of(m);
  weights.at("model.layers.1.mlp.down_proj.weight").resize(1, 1);
  CHECK_THROWS(model::set_parameters(m, weights));
  CHECK_THAT(m.run({1, 2, 3}).logits.cast<double>(), headwise_test::IsExactly(before));
  m.names.output_bias = true;
  weights = model::parameters_of(m);
  REQUIRE(weights.count("model.layers.0.self_attn.o_proj.bias"));
  weights.at("model.layers.0.self_attn.o_proj.bias").setConstant(0.25f);
  model::set_parameters(m, weights);
  CHECK(model::parameters_of(m).at("model.layers.0.self_attn.o_proj.bias")(0, 5) == 0.25f);
  CHECK(model::gradients(m, {1, 2, 3, 4}, model::Metric<float>::next_token_loss({1, 2, 3, 4})).parameters.count("model.layers.0.self_attn.o_proj.bias"));
  m.names.output_bias = false;
  CHECK_THROWS_WITH(model::parameters_of(m), Catch::Contains("layer 0 has an output bias the checkpoint names do not have"));
  // AdamW skips a parameter without a gradient (PyTorch's .grad None): no decay, no step.
  model::Parameters<float> p = {{"a", Matrix<float>::Ones(1, 2)}, {"b", Matrix<float>::Ones(1, 2)}};
  model::AdamW<float> decaying({0.1, 0.9, 0.98, 1e-8, 0.5});
  decaying.step(p, {{"a", Matrix<float>::Ones(1, 2)}});
  CHECK(p.at("b")(0, 0) == 1.0f);
  CHECK(p.at("a")(0, 0) == Approx(1.0 * (1 - 0.1 * 0.5) - 0.1).epsilon(1e-6));  // (the first step: lr m̂ / sqrt(v̂) = lr)
}

TEST_CASE("Whole-model gradients of the families without analysis fixtures agree with central differences of their forward",
          "[study][gradients][families]") {
  // Gemma 2 (soft-caps of scores and logits), SmolLM3 (NoPE layers), OLMo 2 (QK-norm over the whole
  // projection, norms after), Ministral 3 (YaRN, the query scale by position), Phi-3 (fused qkv_proj
  // and gate_up_proj): their forwards match PyTorch (test_decoder_model.cpp); here the backward
  // matches the forward's own slopes at a few coordinates of every kind of parameter.
  for (const char* folder : difference_folders) {
    CAPTURE(folder);
    auto model = io::load_decoder_model<double>(headwise_test::data_path(folder));
    std::vector<Index> ids;
    for (Index t = 0; t < 12; ++t) ids.push_back((7 * t + 3) % model.vocab_size());
    const auto metric = model::Metric<double>::next_token_loss(ids);
    const model::ModelGradients<double> g = model::gradients(model, ids, metric);
    const model::Parameters<double> weights = model::parameters_of(model);
    REQUIRE(g.parameters.size() == weights.size());
    Index checked = 0;
    for (const auto& [name, value] : weights) {
      if (name.find("layers.0.") == std::string::npos && name.find("layers.1.") == std::string::npos && name.find("embed") == std::string::npos &&
          name.find("model.norm") == std::string::npos)
        continue;
      const Index r = (name.find("embed") != std::string::npos ? ids[3] : value.rows() / 2), c = value.cols() / 3;
      model::Parameters<double> moved = weights;
      const double h = 1e-6;
      moved.at(name)(r, c) += h;
      model::set_parameters(model, moved);
      const double up = metric.value(model.run(ids).logits);
      moved.at(name)(r, c) -= 2 * h;
      model::set_parameters(model, moved);
      const double down = metric.value(model.run(ids).logits);
      const double slope = (up - down) / (2 * h), exact = g.parameters.at(name)(r, c);
      CAPTURE(name, slope, exact);
      CHECK(std::abs(slope - exact) <= 1e-7 * std::max(1.0, std::abs(exact)));
      ++checked;
    }
    model::set_parameters(model, weights);
    CHECK(checked >= 10);
  }
}

TEST_CASE("Whole-model gradients through gpt-oss's and Llama 4's sparse blocks agree with central differences of their forward",
          "[study][gradients][families]") {
  // gpt-oss: sinks, the biased router's softmax over the top k, the clamped SwiGLU (its clamps
  // are hit: 99 gates past 7 in the fixture's text), expert biases; Llama 4: sigmoid scores on the
  // experts' inputs, the shared expert, chunked and NoPE layers. Their routing margins (>= 0.035)
  // keep the chosen experts fixed under these steps, as autograd holds them.
  for (const char* folder : {"gpt-oss-model-tiny", "llama4-model-tiny"}) {
    CAPTURE(folder);
    const auto model = io::load_decoder_model<double>(headwise_test::data_path(folder));
    const std::vector<Index> ids = ids_in(headwise_test::load_fixture(std::string(folder) + "/model-reference.safetensors"), "input_ids");
    const auto metric = model::Metric<double>::next_token_loss(ids);
    model::GradientOptions o;
    o.parameters = false;
    const std::vector<std::string> points = {"blocks.0.hook_resid_pre", "blocks.1.mlp_in", "blocks.1.attn_in", "blocks.2.hook_resid_mid"};
    o.activations = {points.begin(), points.end()};
    o.activations.insert("blocks.1.mlp.router_logits");
    const model::ModelGradients<double> g = model::gradients(model, ids, metric, o);
    for (const std::string& point : points)
      for (const auto& at : {std::pair<Index, Index>{3, 5}, {11, 17}, {20, 40}}) {
        const Index t = at.first, c = at.second;
        CAPTURE(point, t, c);
        const auto moved = [&](double h) {
          model::RunOptions<double> r;
          r.hook_functions[point] = [&](Matrix<double>& x, const model::HookPoint&) { x(t, c) += h; };
          return metric.value(model.run(ids, r).logits);
        };
        const double h = 1e-6, slope = (moved(h) - moved(-h)) / (2 * h), exact = g.activations.at(point)(t, c);
        CHECK(std::abs(slope - exact) <= 1e-7 * std::max(1.0, std::abs(exact)));
      }
    // The router logits' gradient: the metric through the chosen experts' weights alone.
    CHECK(g.activations.at("blocks.1.mlp.router_logits").cwiseAbs().maxCoeff() > 0);
  }
}
