// Whole decoder models (tests/data/*-model-tiny) against PyTorch's float64 run of each: the logits
// and every residual-stream hook (TransformerLens's names), GPT-2 from the tokenizer's ids, Qwen3-MoE's
// routing, GPT-2's reference interventions (a zero ablation and a patch of one head's Z); and what
// a run or a loader refuses by name.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <type_traits>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "headwise/interpret/model_head_scores.hpp"
#include "headwise/io/decoder_model.hpp"
#include "headwise/model/backward.hpp"
#include "headwise/model/weight_arithmetic.hpp"
#include "headwise/text/tokenizer.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/layer_checks.hpp"
#include "support/matchers.hpp"
#include "support/safetensors_writer.hpp"

using namespace headwise;
using headwise_test::IsNear;

namespace {
std::vector<Index> ids_of(const io::SafetensorsFile& ref, const std::string& name) {
  std::vector<Index> ids;
  for (const double v : ref.values<double>(name)) ids.push_back(static_cast<Index>(v));
  return ids;
}
/// A [T, heads, d] tensor as (T, heads d).
Matrix<double> rows_of(const io::SafetensorsFile& ref, const std::string& name) {
  const auto& shape = ref.info(name).shape;
  const std::vector<double> v = ref.values<double>(name);
  return Eigen::Map<const Matrix<double>>(v.data(), Index(shape[0]), Index(shape[1] * shape[2]));
}

template <class Scalar>
void check_model(const std::string& folder) {
  CAPTURE(folder);
  const auto model = io::load_decoder_model<Scalar>(headwise_test::data_path(folder));
  const io::SafetensorsFile ref = headwise_test::load_fixture(folder + "/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  model::RunOptions<Scalar> options;
  for (const std::string& h : model.hook_names()) options.hooks.insert(h);  // statistics and routing included
  const auto run = model.run(ids, options);
  const auto tol = headwise_test::tolerance<Scalar>();
  CHECK_THAT(run.logits.template cast<double>(), IsNear(ref.matrix<double>("logits.f64"), tol));
  CHECK_THAT(run.hooks.at("ln_final.out").template cast<double>(), IsNear(ref.matrix<double>("ln_final.out.f64"), tol));
  for (Index l = 0; l < model.n_layers(); ++l) {
    CAPTURE(l);
    const std::string p = "blocks." + std::to_string(l) + ".";
    for (const char* h : {"hook_resid_pre", "attn_in", "attn.output", "hook_attn_out", "hook_resid_mid", "mlp_in", "mlp.output",
                          "hook_mlp_out", "hook_resid_post"}) {
      CAPTURE(h);
      CHECK_THAT(run.hooks.at(p + h).template cast<double>(), IsNear(ref.matrix<double>(p + h + ".f64"), tol));
    }
    // (The fixtures name q, k and v attn.q, attn.k, attn.v; TransformerLens, and the model, attn.hook_q ...)
    for (const auto& [h, fixture] : {std::pair{"attn.hook_q", "attn.q"}, {"attn.hook_k", "attn.k"}, {"attn.hook_v", "attn.v"},
                                     {"attn.hook_pattern", "attn.hook_pattern"}}) {
      CAPTURE(h);
      CHECK_THAT(run.hooks.at(p + h).template cast<double>(), IsNear(headwise_test::side_by_side<double>(ref, p + fixture + ".f64"), tol));
    }
    // Per-head views, TransformerLens's [head, pos, d]: head 1 of the pattern and of Z.
    const auto& block = model.blocks[std::size_t(l)];
    const Index n = Index(ids.size()), heads = block.latent ? block.latent->n_heads() : block.attention.n_heads();
    CHECK_THAT(run.head(p + "attn.hook_pattern", 1).template cast<double>(), IsNear(ref.slice<double>(p + "attn.hook_pattern.f64", 1), tol));
    CHECK(run.head(p + "attn.hook_z", heads - 1).cols() == run.hooks.at(p + "attn.hook_z").cols() / heads);
    CHECK(run.head(p + "attn.hook_z", heads - 1).rows() == n);
    CHECK_THAT(run.hooks.at(p + "attn.hook_z").template cast<double>(), IsNear(rows_of(ref, p + "attn.hook_z.f64"), tol));
    // Per-row statistics of every head from the fused kernel: the first-token mass is PyTorch's pattern's column 0.
    const auto& stats = run.statistics.at(l);
    for (Index h = 0; h < stats.first_token_mass.rows(); ++h)
      CHECK_THAT(Matrix<double>(stats.first_token_mass.row(h).template cast<double>()),
                 IsNear(Matrix<double>(ref.slice<double>(p + "attn.hook_pattern.f64", h).col(0).transpose()), tol));
    if (ref.contains(p + "mlp.shared_output.f64"))  // (Llama 4's and DeepSeek-V3's shared expert)
      CHECK_THAT(run.hooks.at(p + "mlp.shared_output").template cast<double>(), IsNear(ref.matrix<double>(p + "mlp.shared_output.f64"), tol));
    if (model.blocks[static_cast<std::size_t>(l)].experts) {
      const auto& routing = run.routing.at(l);
      CHECK_THAT(routing.logits.template cast<double>(), IsNear(ref.matrix<double>(p + "mlp.router_logits.f64"), tol));
      CHECK_THAT(routing.weights.template cast<double>(), IsNear(ref.matrix<double>(p + "mlp.topk_weights.f64"), tol));
      const std::vector<double> experts = ref.values<double>(p + "mlp.topk_experts");
      for (Index t = 0; t < routing.experts.rows(); ++t)
        for (Index j = 0; j < routing.experts.cols(); ++j)
          CHECK(routing.experts(t, j) == Index(experts[static_cast<std::size_t>(t * routing.experts.cols() + j)]));
    }
  }
  CHECK_THAT(Matrix<double>(model.logits(ids).template cast<double>()), headwise_test::IsExactly(run.logits));
}
}  // namespace

TEMPLATE_TEST_CASE("Whole models: GPT-2, Llama, Qwen3, Qwen3-MoE and Gemma 3, logits and every hook", "[model][fixture]", float,
                   double) {
  for (const char* folder : {"gpt2-model-tiny", "llama-model-tiny", "qwen3-model-tiny", "qwen3moe-model-tiny", "gemma3-model-tiny"})
    check_model<TestType>(folder);
}

TEMPLATE_TEST_CASE("Whole models stored in BF16: weights kept in BF16 (float32 runs), every hook against float64 on those values",
                   "[model][fixture][stored_matrix]", float, double) {
  for (const char* folder : {"gpt2-model-tiny-bf16", "llama-model-tiny-bf16", "qwen3-model-tiny-bf16"}) check_model<TestType>(folder);
  // A float32 model reads the attention's projections, the MLPs, the embedding and the LM head as
  // stored (the MLPs in place in the mapped file, the tied head the embedding's own bytes); a
  // float64 one converts them once to F64.
  const auto model = io::load_decoder_model<TestType>(headwise_test::data_path("llama-model-tiny-bf16"));
  const WeightType expected = std::is_same_v<TestType, float> ? WeightType::bf16 : WeightType::f64;
  for (const auto& b : model.blocks)
    for (const StoredMatrix* w : {&b.mlp.w_gate, &b.mlp.w_up, &b.mlp.w_down, &b.attention.stored_w_qkv(), &b.attention.stored_w_o()})
      CHECK(w->type() == expected);
  CHECK(model.embedding.type() == expected);
  CHECK(model.unembedding.type() == expected);
  // Decoding token by token: the bits of the forward over the whole text.
  const io::SafetensorsFile ref = headwise_test::load_fixture("llama-model-tiny-bf16/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  const Matrix<TestType> forward = model.logits(ids);
  auto caches = model.make_caches(Index(ids.size()));
  for (std::size_t t = 0; t < ids.size(); ++t)
    CHECK_THAT(Matrix<double>(model.decode({ids[t]}, caches).template cast<double>()),
               headwise_test::IsExactly(Matrix<double>(forward.row(Index(t)).template cast<double>())));
}

TEMPLATE_TEST_CASE("gpt-oss whole: its experts dense, in MXFP4 as released, and with every other tensor in BF16: logits, every "
                   "hook and the routing", "[model][fixture][gpt_oss][stored_matrix]", float, double) {
  for (const char* folder : {"gpt-oss-model-tiny", "gpt-oss-model-tiny-mxfp4", "gpt-oss-model-tiny-mxfp4-bf16"}) check_model<TestType>(folder);
  // A float32 model keeps the MXFP4 experts as stored, in place; a float64 one widens them once.
  const auto mxfp4 = io::load_decoder_model<TestType>(headwise_test::data_path("gpt-oss-model-tiny-mxfp4"));
  const WeightType expected = std::is_same_v<TestType, float> ? WeightType::mxfp4 : WeightType::f64;
  for (const auto& b : mxfp4.blocks)
    for (const auto& e : b.experts->experts) CHECK((e.w_up.type() == expected && e.w_down.type() == expected));
  // The fixture's worked example: layer 0, expert 0, gate_up output 0's inputs 0, 1, 32 and 33.
  const Matrix<double> w = mxfp4.blocks[0].experts->experts[0].w_up.template to_matrix<double>();
  CHECK((w(0, 0) == -0.1875 && w(0, 1) == 0.375 && w(0, 32) == -0.1875 && w(0, 33) == -0.125));
  // The MXFP4 experts decode exactly to the float32 folder's, and the product widens them in L1
  // for the float product: the same logits, bit for bit.
  const auto dense = io::load_decoder_model<TestType>(headwise_test::data_path("gpt-oss-model-tiny"));
  const std::vector<Index> ids = ids_of(headwise_test::load_fixture("gpt-oss-model-tiny/model-reference.safetensors"), "input_ids");
  const Matrix<TestType> forward = mxfp4.logits(ids);
  CHECK_THAT(Matrix<double>(forward.template cast<double>()), headwise_test::IsExactly(Matrix<double>(dense.logits(ids).template cast<double>())));
  // Decoding token by token gives the forward's bits, on one thread and on two.
  for (const int threads : {1, 2}) {
    auto caches = mxfp4.make_caches(Index(ids.size()));
    for (std::size_t t = 0; t < ids.size(); ++t)
      CHECK_THAT(Matrix<double>(mxfp4.decode({ids[t]}, caches, threads).template cast<double>()),
                 headwise_test::IsExactly(Matrix<double>(forward.row(Index(t)).template cast<double>())));
    model::RunOptions<TestType> o;
    o.threads = threads;
    CHECK_THAT(Matrix<double>(mxfp4.run(ids, o).logits.template cast<double>()), headwise_test::IsExactly(Matrix<double>(forward.template cast<double>())));
  }
  // Its parameters are not all named (the sinks, the experts' stacks): refused by name; the
  // activations' gradients are there (test_model_study.cpp checks them).
  CHECK_THROWS_WITH(model::gradients(mxfp4, ids, model::Metric<TestType>::next_token_loss(ids)), Catch::Contains("layer 0 has attention sinks"));
  CHECK_THROWS_WITH(model::parameters_of(mxfp4), Catch::Contains("layer 0 has attention sinks"));
}

TEST_CASE("gpt-oss's MXFP4 experts by the stored arithmetic: near the fixture's logits, decoding = forward bit for bit, any threads",
          "[model][fixture][gpt_oss][stored_matrix]") {
  auto model = io::load_decoder_model<float>(headwise_test::data_path("gpt-oss-model-tiny-mxfp4"));
  const auto widened = model;
  Index experts = 0;
  for (const auto& b : model.blocks) experts += Index(b.experts->experts.size());
  CHECK(model::set_weight_arithmetic(model, WeightType::mxfp4, WeightArithmetic::stored) == 2 * experts);  // (gate_up and down)
  CHECK(model.blocks[0].experts->experts[0].w_up.arithmetic() == WeightArithmetic::stored);
  const io::SafetensorsFile ref = headwise_test::load_fixture("gpt-oss-model-tiny-mxfp4/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  const Matrix<float> forward = model.logits(ids);
  // Each block of the experts' inputs rounded to int8 moves this tiny random model's logits by
  // about 2% of their largest (2.0e-2 measured against the float64 reference), where the widened
  // arithmetic's float rounding moves them by 1e-7: the product's own rule is checked bit for bit
  // in test_stored_matrix.cpp.
  const Matrix<double> expected = ref.matrix<double>("logits.f64");
  const double moved = (forward.cast<double>() - expected).cwiseAbs().maxCoeff() / expected.cwiseAbs().maxCoeff();
  CAPTURE(moved);
  CHECK(moved < 5e-2);
  CHECK(moved > 1e-6);  // (the stored arithmetic, not the widened one's 1e-7)
  CHECK((widened.logits(ids) - forward).cwiseAbs().maxCoeff() > 0.0f);
  for (const int threads : {1, 2}) {
    auto caches = model.make_caches(Index(ids.size()));
    for (std::size_t t = 0; t < ids.size(); ++t)
      CHECK_THAT(Matrix<double>(model.decode({ids[t]}, caches, threads).cast<double>()),
                 headwise_test::IsExactly(Matrix<double>(forward.row(Index(t)).cast<double>())));
    model::RunOptions<float> o;
    o.threads = threads;
    CHECK_THAT(Matrix<double>(model.run(ids, o).logits.cast<double>()), headwise_test::IsExactly(Matrix<double>(forward.cast<double>())));
  }
  auto bf16 = io::load_decoder_model<float>(headwise_test::data_path("gpt-oss-model-tiny-mxfp4-bf16"));
  CHECK_THROWS_WITH(model::set_weight_arithmetic(bf16, WeightType::bf16, WeightArithmetic::stored),
                    Catch::Contains("BF16 weights have no stored arithmetic in headwise"));
  auto dense = io::load_decoder_model<float>(headwise_test::data_path("gpt-oss-model-tiny"));
  CHECK_THROWS_WITH(model::set_weight_arithmetic(dense, WeightType::mxfp4, WeightArithmetic::stored),
                    Catch::Contains("set_weight_arithmetic: the model holds no MXFP4 weights outside its attention layers"));
}

TEMPLATE_TEST_CASE("DeepSeek-V3 whole: latent attention in its blocks, a dense first layer, sparse ones with grouped sigmoid routing, "
                   "the choice bias and the shared expert: float32 and FP8 checkpoints", "[model][fixture][deepseek]", float, double) {
  for (const char* folder : {"deepseek-v3-model-tiny", "deepseek-v3-model-tiny-fp8"}) check_model<TestType>(folder);
  const auto model = io::load_decoder_model<TestType>(headwise_test::data_path("deepseek-v3-model-tiny-fp8"));
  CHECK((!model.blocks[0].experts && model.blocks[1].experts && model.blocks[2].experts));
  if constexpr (std::is_same_v<TestType, float>) CHECK(model.blocks[1].experts->experts[0].w_gate.type() == WeightType::f8_e4m3);
  // The kept groups, from the fixture: every chosen expert is in one of them.
  const io::SafetensorsFile ref = headwise_test::load_fixture("deepseek-v3-model-tiny/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  model::RunOptions<TestType> o;
  o.hooks = {"blocks.1.mlp.routing"};
  const auto run = model.run(ids, o);
  const std::vector<double> groups = ref.values<double>("blocks.1.mlp.topk_groups");
  for (Index t = 0; t < Index(ids.size()); ++t)
    for (Index j = 0; j < 2; ++j) {
      const Index g = run.routing.at(1).experts(t, j) / 2;
      CHECK((g == Index(groups[std::size_t(2 * t)]) || g == Index(groups[std::size_t(2 * t + 1)])));
    }
  // Decoding gives the forward's bits, on one thread and on two.
  const Matrix<TestType> forward = model.logits(ids);
  for (const int threads : {1, 2}) {
    auto caches = model.make_caches(Index(ids.size()));
    for (std::size_t t = 0; t < ids.size(); ++t)
      CHECK_THAT(Matrix<double>(model.decode({ids[t]}, caches, threads).template cast<double>()),
                 headwise_test::IsExactly(Matrix<double>(forward.row(Index(t)).template cast<double>())));
  }
  // The tools that read a layer's heads one by one refuse it by name.
  const auto metric = model::Metric<TestType>::next_token_loss(ids);
  CHECK_THROWS_WITH(interpret::score_model_heads(model, ids), Catch::Contains("score_model_heads: layer 0 is multi-head latent attention"));
  CHECK_THROWS_WITH(model::gradients(model, ids, metric), Catch::Contains("gradients: layer 0 is multi-head latent attention"));
  CHECK_THROWS_WITH(interpret::direct_logit_attribution(model, ids, {1, -1, -1}), Catch::Contains("layer 0 is multi-head latent attention"));
}

TEMPLATE_TEST_CASE("Qwen3-Next whole: Gated DeltaNet layers (every step and the states), the gated full-attention layer, sparse "
                   "blocks with the gated shared expert, decoding gives the forward's bits", "[model][fixture][qwen3_next]", float, double) {
  const auto model = io::load_decoder_model<TestType>(headwise_test::data_path("qwen3-next-model-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("qwen3-next-model-tiny/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  const auto n = Index(ids.size());
  REQUIRE((model.blocks[0].delta_net && model.blocks[2].delta_net && !model.blocks[3].delta_net && !model.blocks[2].experts));
  model::RunOptions<TestType> options;
  for (const std::string& h : model.hook_names()) options.hooks.insert(h);
  const auto run = model.run(ids, options);
  // The gated norm rescales each head to unit RMS, so float32 rounding grows where a head's output
  // nearly cancels: the fixture's own float32 path is 6.7e-6 from float64 (its README).
  const double tol = std::is_same_v<TestType, float> ? 1e-4 : 1e-10;
  const auto near = [&](const Matrix<TestType>& got, const Matrix<double>& want) { CHECK_THAT(Matrix<double>(got.template cast<double>()), IsNear(want, tol)); };
  near(run.logits, ref.matrix<double>("logits.f64"));
  near(run.hooks.at("ln_final.out"), ref.matrix<double>("ln_final.out.f64"));
  const auto transposed = [&](const std::string& name) { return Matrix<double>(ref.matrix<double>(name).transpose()); };
  for (Index l = 0; l < model.n_layers(); ++l) {
    CAPTURE(l);
    const std::string p = "blocks." + std::to_string(l) + ".";
    for (const char* h : {"hook_resid_pre", "attn_in", "attn.output", "hook_attn_out", "hook_resid_mid", "mlp_in", "mlp.output", "hook_mlp_out",
                          "hook_resid_post"}) {
      CAPTURE(h);
      const bool linear = model.blocks[std::size_t(l)].delta_net && std::string(h) == "attn.output";  // (the fixture's name there)
      near(run.hooks.at(p + h), ref.matrix<double>(p + (linear ? "linear_attn.output" : h) + ".f64"));
    }
    if (model.blocks[std::size_t(l)].delta_net) {
      const std::string q = p + "linear_attn.";
      near(run.hooks.at(q + "hook_mixed_qkv"), ref.matrix<double>(q + "mixed_qkv.f64"));
      near(run.hooks.at(q + "hook_conv_out"), ref.matrix<double>(q + "conv_out.f64"));
      for (const char* h : {"q", "k", "v", "z", "core_out"}) {
        CAPTURE(h);
        near(run.hooks.at(q + "hook_" + h), headwise_test::side_by_side<double>(ref, q + h + ".f64"));
      }
      near(run.hooks.at(q + "hook_beta"), transposed(q + "beta.f64"));
      near(run.hooks.at(q + "hook_g"), transposed(q + "g.f64"));
      near(run.hooks.at(q + "hook_gated_out"), ref.matrix<double>(q + "gated_out.f64"));
      near(run.head(q + "hook_core_out", 3), ref.slice<double>(q + "core_out.f64", 3));
      // Each head's mixing matrix: lower triangular, and times the fixture's values it gives the
      // fixture's outputs of the delta rule.
      for (Index h = 0; h < 4; ++h) {
        const Matrix<double> mixing = run.head(q + "hook_pattern", h).template cast<double>();
        CHECK(mixing.template triangularView<Eigen::StrictlyUpper>().toDenseMatrix().isZero(0));
        CHECK_THAT(Matrix<double>(mixing * ref.slice<double>(q + "v.f64", h)), IsNear(ref.slice<double>(q + "core_out.f64", h), tol));
      }
      near(run.head(q + "hook_k", 1), ref.slice<double>(q + "k.f64", 1));
    } else {
      for (const auto& [h, fixture] : {std::pair{"attn.hook_q", "attn.q"}, {"attn.hook_k", "attn.k"}, {"attn.hook_v", "attn.v"},
                                       {"attn.hook_pattern", "attn.hook_pattern"}}) {
        CAPTURE(h);
        near(run.hooks.at(p + h), headwise_test::side_by_side<double>(ref, p + fixture + ".f64"));
      }
      near(run.hooks.at(p + "attn.hook_z"), rows_of(ref, p + "attn.z_gated.f64"));  // (Z as W_O reads it: gated)
    }
    if (model.blocks[std::size_t(l)].experts) {
      const auto& routing = run.routing.at(l);
      near(routing.logits, ref.matrix<double>(p + "mlp.router_logits.f64"));
      near(routing.weights, ref.matrix<double>(p + "mlp.topk_weights.f64"));
      near(run.hooks.at(p + "mlp.shared_output"), ref.matrix<double>(p + "mlp.shared_expert_out.f64"));
      const std::vector<double> experts = ref.values<double>(p + "mlp.topk_experts");
      for (Index t = 0; t < n; ++t)
        for (Index j = 0; j < 2; ++j) CHECK(routing.experts(t, j) == Index(experts[std::size_t(2 * t + j)]));
    }
  }
  // Decoding: token by token, and 20 tokens then 4, on one thread and two: the forward's bits; the
  // states after 20 and 24 tokens are Hugging Face's (the delta rule's S, the last conv inputs).
  const Matrix<TestType> forward = model.logits(ids);
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    auto caches = model.make_caches(n);
    for (Index t = 0; t < n; ++t)
      CHECK_THAT(Matrix<double>(model.decode({ids[std::size_t(t)]}, caches, threads).template cast<double>()),
                 headwise_test::IsExactly(Matrix<double>(forward.row(t).template cast<double>())));
    auto split = model.make_caches(n);
    const Matrix<TestType> first = model.decode(std::vector<Index>(ids.begin(), ids.begin() + 20), split, threads);
    for (Index l = 0; l < 3; ++l) {
      const std::string q = "blocks." + std::to_string(l) + ".linear_attn.";
      for (Index h = 0; h < 4; ++h) {
        near(split[std::size_t(l)].state().heads[std::size_t(h)].state(), ref.slice<double>(q + "prefix_state.f64", h));
        near(caches[std::size_t(l)].state().heads[std::size_t(h)].state(), ref.slice<double>(q + "final_state.f64", h));
      }
      near(split[std::size_t(l)].state().conv_inputs, Matrix<double>(ref.matrix<double>(q + "prefix_conv_state.f64").rightCols(3).transpose()));
    }
    const Matrix<TestType> rest = model.decode(std::vector<Index>(ids.begin() + 20, ids.end()), split, threads);
    CHECK_THAT(Matrix<double>(first.template cast<double>()), headwise_test::IsExactly(Matrix<double>(forward.topRows(20).template cast<double>())));
    CHECK_THAT(Matrix<double>(rest.template cast<double>()), headwise_test::IsExactly(Matrix<double>(forward.bottomRows(4).template cast<double>())));
    model::RunOptions<TestType> o;
    o.threads = threads;
    CHECK_THAT(Matrix<double>(model.run(ids, o).logits.template cast<double>()), headwise_test::IsExactly(Matrix<double>(forward.template cast<double>())));
  }
  // A hook function on a DeltaNet head's output: zeroing head 2 of layer 1 there equals zeroing the
  // out_proj columns it reads; the steps before it are read-only.
  model::RunOptions<TestType> zeroed;
  zeroed.hook_functions["blocks.1.linear_attn.hook_gated_out"] = [](Matrix<TestType>& y, const model::HookPoint& at) { at.head(y, 2).setZero(); };
  zeroed.hooks = {"blocks.1.linear_attn.hook_gated_out", "blocks.1.attn.output"};
  const auto ablated = model.run(ids, zeroed);
  CHECK(ablated.hooks.at("blocks.1.linear_attn.hook_gated_out").middleCols(16, 8).isZero(0));
  const Matrix<TestType> kept = run.hooks.at("blocks.1.linear_attn.hook_gated_out");
  Matrix<TestType> by_hand = kept;
  by_hand.middleCols(16, 8).setZero();
  const Matrix<double> w_out = model.blocks[1].delta_net->out.template to_matrix<double>();  // [d_model, heads d_v]
  near(ablated.hooks.at("blocks.1.attn.output"), Matrix<double>(by_hand.template cast<double>() * w_out.transpose()));
  model::RunOptions<TestType> bad;
  bad.hook_functions["blocks.0.linear_attn.hook_q"] = [](Matrix<TestType>&, const model::HookPoint&) {};
  CHECK_THROWS_WITH(model.run(ids, bad), Catch::Contains("blocks.0.linear_attn.hook_q is read-only"));
  // The tools that read a layer's heads one by one, and rolling a state back, are refused by name.
  CHECK_THROWS_WITH(interpret::score_model_heads(model, ids), Catch::Contains("layer 0 is a Gated DeltaNet layer (Qwen3-Next)"));
  CHECK_THROWS_WITH(model::gradients(model, ids, model::Metric<TestType>::next_token_loss(ids)), Catch::Contains("layer 0 is a Gated DeltaNet layer"));
  auto caches = model.make_caches(n);
  model.decode({ids[0], ids[1]}, caches);
  CHECK_THROWS_WITH(caches[0].truncate(1), Catch::Contains("a Gated DeltaNet layer's state holds 2 tokens folded together"));
  CHECK_THROWS_WITH(caches[0].keys_values(), Catch::Contains("LayerCache::keys_values: this layer's cache holds a Gated DeltaNet state"));
  model::RunOptions<TestType> later;
  later.first_position = 3;
  CHECK_THROWS_WITH(model.run(ids, later), Catch::Contains("layer 0 is a Gated DeltaNet layer, whose state needs every earlier token"));
}

TEMPLATE_TEST_CASE("Gemma 4 whole: per-layer inputs, layer scalars, KV shared by the last layers, K = V full layers: logits, every "
                   "hook, decoding gives the forward's bits", "[model][fixture][gemma4]", float, double) {
  check_model<TestType>("gemma4-model-tiny");
  const auto model = io::load_decoder_model<TestType>(headwise_test::data_path("gemma4-model-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("gemma4-model-tiny/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  const auto n = Index(ids.size());
  model::RunOptions<TestType> options;
  options.hooks = {"hook_per_layer_inputs"};
  for (Index l = 0; l < model.n_layers(); ++l)
    for (const char* h : {"per_layer.hook_gate", "per_layer.hook_out"}) options.hooks.insert("blocks." + std::to_string(l) + "." + h);
  const auto run = model.run(ids, options);
  const auto tol = headwise_test::tolerance<TestType>();
  const auto near = [&](const Matrix<TestType>& got, const Matrix<double>& want) { CHECK_THAT(Matrix<double>(got.template cast<double>()), IsNear(want, tol)); };
  near(run.hooks.at("hook_per_layer_inputs"), rows_of(ref, "per_layer_inputs.combined.f64"));
  for (Index l = 0; l < model.n_layers(); ++l) {
    CAPTURE(l);
    const std::string p = "blocks." + std::to_string(l) + ".";
    near(run.hooks.at(p + "per_layer.hook_gate"), ref.matrix<double>(p + "ple.gate_act.f64"));
    near(run.hooks.at(p + "per_layer.hook_out"), ref.matrix<double>(p + "ple.out.f64"));
  }
  CHECK((model.blocks[6].attention.config().shares_keys_values_of == Index(4) && model.blocks[7].attention.config().shares_keys_values_of == Index(5)));
  // Decoding, token by token and 10 + 14, on one thread and two: the forward's bits.
  const Matrix<TestType> forward = model.logits(ids);
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    auto caches = model.make_caches(n);
    for (Index t = 0; t < n; ++t)
      CHECK_THAT(Matrix<double>(model.decode({ids[std::size_t(t)]}, caches, threads).template cast<double>()),
                 headwise_test::IsExactly(Matrix<double>(forward.row(t).template cast<double>())));
    CHECK(caches[6].size() == 0);  // (a KV-shared layer keeps nothing of its own)
    auto split = model.make_caches(n);
    const Matrix<TestType> first = model.decode(std::vector<Index>(ids.begin(), ids.begin() + 10), split, threads);
    const Matrix<TestType> rest = model.decode(std::vector<Index>(ids.begin() + 10, ids.end()), split, threads);
    CHECK_THAT(Matrix<double>(first.template cast<double>()), headwise_test::IsExactly(Matrix<double>(forward.topRows(10).template cast<double>())));
    CHECK_THAT(Matrix<double>(rest.template cast<double>()), headwise_test::IsExactly(Matrix<double>(forward.bottomRows(n - 10).template cast<double>())));
    model::RunOptions<TestType> o;
    o.threads = threads;
    CHECK_THAT(Matrix<double>(model.run(ids, o).logits.template cast<double>()), headwise_test::IsExactly(Matrix<double>(forward.template cast<double>())));
  }
  // Direct logit attribution through the layer scalars: the last layer's shares sum to its attention
  // output (the fixture's) times its scalar, through the final norm frozen at the fixture's stream.
  const Matrix<double> dla = interpret::direct_logit_attribution(model, ids, {5, -1, -1});
  const Eigen::RowVectorXd stream = ref.matrix<double>("blocks.7.hook_resid_post.f64").row(n - 1);
  const double scalar = double(model.blocks[7].layer_scalar), inverse = 1.0 / std::sqrt(stream.squaredNorm() / double(stream.size()) + 1e-6);
  const Eigen::RowVectorXd attn = ref.matrix<double>("blocks.7.hook_attn_out.f64").row(n - 1) * scalar * inverse;
  const double expected = attn.cwiseProduct(model.final_norm.weight.template cast<double>()).dot(model.embedding.template row<double>(5));
  CHECK_THAT(Matrix<double>::Constant(1, 1, dla.row(7).sum()), IsNear(Matrix<double>::Constant(1, 1, expected), std::is_same_v<TestType, float> ? 1e-5 : 1e-10));
  CHECK(scalar != 1.0);
  // Head studies read every layer, the KV-shared ones too (their keys the source layer's): the
  // scores from the fixture's patterns.
  const interpret::ModelHeadScores scores = interpret::score_model_heads(model, ids);
  for (Index l = 0; l < model.n_layers(); ++l)
    for (Index h = 0; h < 4; ++h) {
      const Matrix<double> pattern = ref.slice<double>("blocks." + std::to_string(l) + ".attn.hook_pattern.f64", h);
      CHECK_THAT(Matrix<double>::Constant(1, 1, scores.previous_token(l, h)),
                 IsNear(Matrix<double>::Constant(1, 1, interpret::previous_token_score(pattern)), tol));
      CHECK_THAT(Matrix<double>::Constant(1, 1, scores.first_token(l, h)), IsNear(Matrix<double>::Constant(1, 1, interpret::first_token_score(pattern)), tol));
    }
  // What it has no backward for, or cannot resume, is refused by name.
  CHECK_THROWS_WITH(model::gradients(model, ids, model::Metric<TestType>::next_token_loss(ids)), Catch::Contains("layer 0 has a per-layer input (Gemma 4)"));
  auto caches = model.make_caches(n);
  CHECK_THROWS_WITH(model.resume(0, model.embed(ids), caches), Catch::Contains("the model has per-layer inputs"));
  model::RunOptions<TestType> later;
  later.first_position = 2;
  CHECK_THROWS_WITH(model.run(ids, later), Catch::Contains("read the keys and values of earlier ones (KV sharing)"));
}

TEMPLATE_TEST_CASE("Gemma 4 whole with experts beside the dense MLP, as 26B-A4B: routing, every hook, decoding = forward",
                   "[model][fixture][gemma4]", float, double) {
  check_model<TestType>("gemma4-model-tiny-moe");
  const auto model = io::load_decoder_model<TestType>(headwise_test::data_path("gemma4-model-tiny-moe"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("gemma4-model-tiny-moe/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  const auto n = Index(ids.size());
  REQUIRE((model.blocks[0].side_experts && !model.blocks[0].experts && !model.per_layer_embedding));
  model::RunOptions<TestType> options;
  for (Index l = 0; l < model.n_layers(); ++l)
    for (const char* h : {"moe_in", "moe.output", "mlp.routing"}) options.hooks.insert("blocks." + std::to_string(l) + "." + h);
  const auto run = model.run(ids, options);
  const auto tol = headwise_test::tolerance<TestType>();
  const auto near = [&](const Matrix<TestType>& got, const Matrix<double>& want) { CHECK_THAT(Matrix<double>(got.template cast<double>()), IsNear(want, tol)); };
  for (Index l = 0; l < model.n_layers(); ++l) {
    CAPTURE(l);
    const std::string p = "blocks." + std::to_string(l) + ".";
    near(run.hooks.at(p + "moe_in"), ref.matrix<double>(p + "moe_in.f64"));
    near(run.hooks.at(p + "moe.output"), ref.matrix<double>(p + "moe.output.f64"));
    const auto& routing = run.routing.at(l);
    near(routing.logits, ref.matrix<double>(p + "moe.router_logits.f64"));
    near(routing.weights, ref.matrix<double>(p + "moe.topk_weights.f64"));
    const std::vector<double> experts = ref.values<double>(p + "moe.topk_experts");
    for (Index t = 0; t < n; ++t)
      for (Index j = 0; j < 2; ++j) CHECK(routing.experts(t, j) == Index(experts[std::size_t(2 * t + j)]));
  }
  const Matrix<TestType> forward = model.logits(ids);
  for (const int threads : {1, 2}) {
    auto caches = model.make_caches(n);
    for (Index t = 0; t < n; ++t)
      CHECK_THAT(Matrix<double>(model.decode({ids[std::size_t(t)]}, caches, threads).template cast<double>()),
                 headwise_test::IsExactly(Matrix<double>(forward.row(t).template cast<double>())));
  }
  CHECK_THROWS_WITH(model::gradients(model, ids, model::Metric<TestType>::next_token_loss(ids)), Catch::Contains("(Gemma 4): no backward in headwise yet"));
}

TEST_CASE("Llama 4's, DeepSeek-V3's and Qwen3-Next's blocks: settings the model code does not read are refused by name",
          "[model][llama4][deepseek][qwen3_next][errors]") {
  const auto broken = [](const char* source, const std::string& from, const std::string& to) {
    const std::string folder = std::string(HEADWISE_TEST_TMP_DIR) + "/" + source + "-broken";
    std::filesystem::remove_all(folder);
    std::filesystem::copy(headwise_test::data_path(source), folder);
    std::ifstream in(folder + "/config.json");
    std::string c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    c.replace(c.find(from), from.size(), to);
    std::ofstream(folder + "/config.json") << c;
    return folder;
  };
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("llama4-model-tiny", "\"router_jitter_noise\": 0.0", "\"router_jitter_noise\": 0.1")),
                    Catch::Contains("router_jitter_noise is not 0"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("llama4-model-tiny", "\"num_experts_per_tok\": 1", "\"num_experts_per_tok\": 5")),
                    Catch::Contains("num_experts_per_tok must be in [1, num_local_experts]"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("deepseek-v3-model-tiny", "\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"")),
                    Catch::Contains("scoring_func \"softmax\" is not sigmoid"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("deepseek-v3-model-tiny", "\"n_group\": 4", "\"n_group\": 3")),
                    Catch::Contains("n_group must divide n_routed_experts"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("deepseek-v3-model-tiny", "\"first_k_dense_replace\": 1", "\"first_k_dense_replace\": -1")),
                    Catch::Contains("\"first_k_dense_replace\" must be an integer in [0, 4294967296]"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("deepseek-v3-model-tiny", "\"routed_scaling_factor\": 2.5", "\"routed_scaling_factor\": 0")),
                    Catch::Contains("routed_scaling_factor must be finite and > 0"));
  // A DeepSeek model with first_k_dense_replace 0: every layer sparse, so layer 0's dense MLP is not read.
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("deepseek-v3-model-tiny", "\"first_k_dense_replace\": 1", "\"first_k_dense_replace\": 0")),
                    Catch::Contains("missing tensor \"model.layers.0.mlp.gate.weight\""));
  // Qwen3-Next: DeltaNet sizes that do not fit, or disagree with the checkpoint.
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("qwen3-next-model-tiny", "\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 3")),
                    Catch::Contains("linear_num_value_heads must be a multiple of linear_num_key_heads"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("qwen3-next-model-tiny", "\"linear_conv_kernel_dim\": 4", "\"linear_conv_kernel_dim\": 0")),
                    Catch::Contains("\"linear_conv_kernel_dim\" = 0 must be an integer in [1,"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("qwen3-next-model-tiny", "\"linear_conv_kernel_dim\": 4", "\"linear_conv_kernel_dim\": 3")),
                    Catch::Contains("tensor \"model.layers.0.linear_attn.conv1d.weight\" has shape [96, 1, 4], expected [96, 1, 3]"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(broken("qwen3-next-model-tiny", "\"use_sliding_window\": false", "\"use_sliding_window\": true")),
                    Catch::Contains("use_sliding_window"));
}

TEMPLATE_TEST_CASE("Llama 4 whole: dense and sparse layers as moe_layers says, sigmoid scores on the experts' inputs, the shared "
                   "expert: logits, every hook and the routing", "[model][fixture][llama4]", float, double) {
  check_model<TestType>("llama4-model-tiny");
  const auto model = io::load_decoder_model<TestType>(headwise_test::data_path("llama4-model-tiny"));
  for (Index l = 0; l < 4; ++l) CHECK(bool(model.blocks[std::size_t(l)].experts) == (l == 1 || l == 3));
  const std::vector<Index> ids = ids_of(headwise_test::load_fixture("llama4-model-tiny/model-reference.safetensors"), "input_ids");
  const Matrix<TestType> forward = model.logits(ids);
  for (const int threads : {1, 2}) {
    auto caches = model.make_caches(Index(ids.size()));
    for (std::size_t t = 0; t < ids.size(); ++t)
      CHECK_THAT(Matrix<double>(model.decode({ids[t]}, caches, threads).template cast<double>()),
                 headwise_test::IsExactly(Matrix<double>(forward.row(Index(t)).template cast<double>())));
  }
  CHECK_THROWS_WITH(model::gradients(model, ids, model::Metric<TestType>::next_token_loss(ids)),
                    Catch::Contains("layer 1 has a sparse block other than Qwen3-MoE's"));
  CHECK_THROWS_WITH(model::parameters_of(model), Catch::Contains("layer 1 has a sparse block other than Qwen3-MoE's"));
}

TEST_CASE("gpt-oss's MXFP4 experts: a config and a checkpoint that disagree, and scales beyond float, are refused by name",
          "[model][gpt_oss][errors]") {
  const std::string folder = std::string(HEADWISE_TEST_TMP_DIR) + "/gpt-oss-mxfp4-broken";
  std::filesystem::remove_all(folder);
  std::filesystem::copy(headwise_test::data_path("gpt-oss-model-tiny-mxfp4"), folder);
  std::ifstream in(folder + "/config.json");
  const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string c = config;
    c.replace(c.find(from), from.size(), to);
    std::ofstream(folder + "/config.json") << c;
  };
  with("\"quant_method\": \"mxfp4\"", "\"quant_method\": \"mxfp4\", \"group_size\": 32");
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("quantization_config: \"group_size\" is not a key headwise reads"));
  with("\"quantization_config\"", "\"unused_quantization\"");
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("\"unused_quantization\""));  // (an unknown key)
  std::string plain = config;
  plain.erase(plain.find("\"quantization_config\""), plain.find("\"rms_norm_eps\"") - plain.find("\"quantization_config\""));
  std::ofstream(folder + "/config.json") << plain;
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder),
                    Catch::Contains("\"model.layers.0.mlp.experts.gate_up_proj_blocks\" is MXFP4, but the config has no quantization_config mxfp4"));
  // A scale byte of 255 (the MX spec's NaN) in layer 1's down projection, expert 2.
  std::ofstream(folder + "/config.json") << config;
  {
    const io::SafetensorsFile file = io::SafetensorsFile::open(folder + "/model.safetensors");
    const io::TensorInfo& t = file.info("model.layers.1.mlp.experts.down_proj_scales");
    std::ifstream header(folder + "/model.safetensors", std::ios::binary);
    std::uint64_t length = 0;
    header.read(reinterpret_cast<char*>(&length), 8);
    std::fstream f(folder + "/model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(std::streamoff(8 + length + t.begin + 2 * 64 + 5));  // (expert 2, row 5: one scale a row)
    f.put(char(255));
  }
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder),
                    Catch::Contains("\"model.layers.1.mlp.experts.down_proj_scales\", matrix 2: ") &&
                        Catch::Contains("the scale of row 5, block 0 is 2^(255 - 127) (255: NaN in the MX spec)"));
  // MXFP4 is gpt-oss's: another family's config asking for it is refused.
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "silu", "rms_norm_eps": 1e-5, "quantization_config": {"quant_method": "mxfp4"}})";
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("quant_method \"mxfp4\" is read for gpt-oss's experts, not llama"));
}

TEMPLATE_TEST_CASE("GPT-2 from text, and the reference interventions: a head ablated, a head's Z patched", "[model][fixture]", float,
                   double) {
  const auto model = io::load_decoder_model<TestType>(headwise_test::data_path("gpt2-model-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("gpt2-model-tiny/model-reference.safetensors");
  const auto bpe = text::Tokenizer::from_tokenizer_json(headwise_test::data_path("gpt2-tokenizer/tokenizer.json"));
  const std::vector<Index> ids = bpe.encode("When Mary and John went to the store, John gave a drink to");
  CHECK(ids == ids_of(ref, "input_ids"));
  const auto tol = headwise_test::tolerance<TestType>();
  // Through hooks alone: a hook function on blocks.1.attn.hook_z zeroes head 2 (its [pos, head 2, d]
  // slice), one on blocks.0.attn.hook_z sets head 1 to the source run's Z.
  model::RunOptions<TestType> ablate;
  ablate.hook_functions["blocks.1.attn.hook_z"] = [](Matrix<TestType>& z, const model::HookPoint& at) { at.head(z, 2).setZero(); };
  CHECK_THAT(model.run(ids, ablate).logits.template cast<double>(), IsNear(ref.matrix<double>("interventions.zero_ablate.logits.f64"), tol));
  const Matrix<TestType> source_z = ref.matrix<TestType>("interventions.patch.source_z.f64");
  model::RunOptions<TestType> patch;
  patch.hook_functions["blocks.0.attn.hook_z"] = [&](Matrix<TestType>& z, const model::HookPoint& at) { at.head(z, 1) = source_z; };
  CHECK_THAT(model.run(ids, patch).logits.template cast<double>(), IsNear(ref.matrix<double>("interventions.patch.logits.f64"), tol));
  // The same two by the head interventions (head_interventions.hpp: hook functions), in turn on
  // one hook, and a head out of range refused by name.
  model::RunOptions<TestType> by_interventions;
  by_interventions.hook_functions["blocks.1.attn.hook_z"] = ablate_head(2);
  CHECK_THAT(headwise_test::as_double(model.run(ids, by_interventions).logits), headwise_test::IsExactly(model.run(ids, ablate).logits));
  by_interventions.hook_functions["blocks.1.attn.hook_z"] = in_turn(gate_head(2, 7.0), ablate_head(2));
  by_interventions.hook_functions["blocks.0.attn.hook_z"] = patch_head(1, source_z);
  model::RunOptions<TestType> both = patch;
  both.hook_functions["blocks.1.attn.hook_z"] = ablate.hook_functions.at("blocks.1.attn.hook_z");
  CHECK_THAT(headwise_test::as_double(model.run(ids, by_interventions).logits), headwise_test::IsExactly(model.run(ids, both).logits));
  by_interventions.hook_functions["blocks.1.attn.hook_z"] = ablate_head(4);
  CHECK_THROWS_WITH(model.run(ids, by_interventions), Catch::Contains("head 4 of blocks.1.attn.hook_z, which holds 4 heads side by side"));
  // A run that starts at position 3 is the tokens 3 .. of a text whose earlier tokens are not
  // attended: GPT-2's learned positions from row 3 on (its first row, alone, attends to itself).
  model::RunOptions<TestType> later;
  later.first_position = 3, later.threads = 1, later.hooks = {"blocks.0.hook_resid_pre"};
  const auto from_3 = model.run({ids[5]}, later);
  CHECK_THAT(headwise_test::as_double(from_3.hooks.at("blocks.0.hook_resid_pre")),
             IsNear(Matrix<double>(model.embedding.template row<double>(ids[5]) + model.positions.row(3).template cast<double>()), tol));
  // The loss of next tokens, from PyTorch's logits (log-softmax here in the test) and from the model's.
  const Matrix<double> reference = ref.matrix<double>("logits.f64");
  double expected_loss = 0;
  for (Index t = 0; t + 1 < reference.rows(); ++t) {
    const double top = reference.row(t).maxCoeff();
    expected_loss += top + std::log((reference.row(t).array() - top).exp().sum()) - reference(t, ids[std::size_t(t) + 1]);
  }
  expected_loss /= double(reference.rows() - 1);
  CHECK(model::next_token_loss(model.logits(ids), ids) == Approx(expected_loss).epsilon(std::is_same_v<TestType, float> ? 1e-5 : 1e-12));
  CHECK_THROWS_WITH(model::next_token_loss(model.logits(ids), {1}), Catch::Contains("logits for 14 tokens and 1 ids"));
  // Patching the residual stream: the last layer's output taken from the source run makes the
  // logits the source run's, whatever came before.
  model::RunOptions<TestType> record;
  record.hooks = {"blocks.2.hook_resid_post"};
  const auto source_run = model.run(ids_of(ref, "interventions.patch.source_input_ids"), record);
  model::RunOptions<TestType> patched;
  patched.hook_functions["blocks.2.hook_resid_post"] = model::replace_with(source_run.hooks.at("blocks.2.hook_resid_post"));
  CHECK_THAT(headwise_test::as_double(model.run(ids, patched).logits), headwise_test::IsExactly(source_run.logits));
  // The source run's Z of layer 0, head 1, recorded by the model itself, is the reference's.
  model::RunOptions<TestType> source;
  source.hooks = {"blocks.0.attn.hook_z"};
  const auto z = model.run(ids_of(ref, "interventions.patch.source_input_ids"), source).hooks.at("blocks.0.attn.hook_z");
  CHECK_THAT(Matrix<double>(z.middleCols(12, 12).template cast<double>()), IsNear(ref.matrix<double>("interventions.patch.source_z.f64"), tol));
}

TEST_CASE("Whole models: bad ids, too many tokens, unknown hooks, missing tensors, unread configs are refused by name",
          "[model][errors]") {
  const auto model = io::load_decoder_model<float>(headwise_test::data_path("gpt2-model-tiny"));
  CHECK_THROWS_WITH(model.run({1, 50257}), Catch::Contains("token 1 has id 50257, not in [0, 50257)"));
  CHECK_THROWS_WITH(model.run(std::vector<Index>(1025, 1)), Catch::Contains("1025 tokens, more than the model's 1024 positions"));
  model::RunOptions<float> o;
  o.hooks = {"blocks.9.hook_resid_pre"};
  CHECK_THROWS_WITH(model.run({1, 2}, o), Catch::Contains("no hook \"blocks.9.hook_resid_pre\" in this model"));
  model::RunOptions<float> p;
  p.hook_functions["blocks.0.hook_resid_mid"] = model::replace_with(Matrix<float>(Matrix<float>::Zero(3, 48)));
  CHECK_THROWS_WITH(model.run({1, 2}, p),
                    Catch::Contains("the hook function on blocks.0.hook_resid_mid left it 3x48, the value there is 2x48"));
  model::RunOptions<float> q;
  q.hook_functions["blocks.0.attn.hook_q"] = [](Matrix<float>&, const model::HookPoint&) {};
  CHECK_THROWS_WITH(model.run({1, 2}, q), Catch::Contains("blocks.0.attn.hook_q is read-only"));
  model::RunOptions<float> nan;
  nan.hook_functions["blocks.0.attn.hook_z"] = [](Matrix<float>& z, const model::HookPoint&) { z(0, 0) = std::nanf(""); };
  CHECK_THROWS_WITH(model.run({1, 2}, nan), Catch::Contains("the hook function on blocks.0.attn.hook_z left a value that is not finite"));
  model::RunOptions<float> wrong;
  wrong.hook_functions["blocks.0.hook_resid_pre"] = [](Matrix<float>& x, const model::HookPoint& at) { at.head(x, 0); };
  CHECK_THROWS_WITH(model.run({1, 2}, wrong), Catch::Contains("head 0 of blocks.0.hook_resid_pre, which holds 0 heads"));
  CHECK_THROWS_WITH(model.run({1, 2}).head("blocks.0.attn.hook_z", 0), Catch::Contains("blocks.0.attn.hook_z was not recorded"));
  model::RunOptions<float> negative;
  negative.first_position = -1;
  CHECK_THROWS_WITH(model.run({1, 2}, negative), Catch::Contains("first_position must be >= 0, got -1"));
  negative.first_position = 1023;
  CHECK_THROWS_WITH(model.run({1, 2}, negative), Catch::Contains("1025 tokens, more than the model's 1024 positions"));
  negative.first_position = std::numeric_limits<Index>::max() - 1;  // (first + n overflowed, and passed the check)
  CHECK_THROWS_WITH(model.run({1, 2}, negative), Catch::Contains("first_position = 9223372036854775806 plus 2 tokens is past INT64_MAX"));
  CHECK_THROWS_WITH(model.generate({1, 2}, std::numeric_limits<Index>::max() - 1),
                    Catch::Contains("count = 9223372036854775806 tokens after a prompt of 2 is past INT64_MAX tokens"));
  model::RunOptions<float> keep_negative;
  keep_negative.logits_to_keep = -1;
  CHECK_THROWS_WITH(model.run({1, 2}, keep_negative), Catch::Contains("logits_to_keep must be >= 0 (0: every token), got -1"));
  // A Llama checkpoint without one MLP tensor.
  const std::string folder = std::string(HEADWISE_TEST_TMP_DIR) + "/model-missing-mlp";
  std::filesystem::create_directories(folder);
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "silu", "rms_norm_eps": 1e-5})";
  std::map<std::string, headwise_test::TensorSpec> tensors;
  for (const char* name : {"q_proj", "k_proj", "v_proj", "o_proj"}) tensors[std::string("model.layers.0.self_attn.") + name + ".weight"] = {{8, 8}, 0.1f};
  for (const char* name : {"gate_proj", "up_proj"}) tensors[std::string("model.layers.0.mlp.") + name + ".weight"] = {{8, 8}, 0.1f};
  for (const char* name : {"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight", "model.norm.weight"})
    tensors[name] = {{8}, 1.0f};
  tensors["model.embed_tokens.weight"] = tensors["lm_head.weight"] = {{4, 8}, 0.5f};
  const std::vector<unsigned char> bytes = headwise_test::write_safetensors(tensors);
  std::ofstream(folder + "/model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("missing tensor \"model.layers.0.mlp.down_proj.weight\""));
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "gelu"})";
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("hidden_act \"gelu\" is not one the model code has for llama"));
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "silu", "mlp_bias": true})";
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("\"mlp_bias\" = true: the model code reads MLPs without biases"));
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "silu", "final_logit_softcapping": 30.0})";
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("\"final_logit_softcapping\" is not a key of a llama config.json"));
  // attention_bias true: Hugging Face's layer then has biases, so a checkpoint without them is refused.
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "silu", "rms_norm_eps": 1e-5, "attention_bias": true})";
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder),
                    Catch::Contains("missing tensor \"model.layers.0.self_attn.q_proj.bias\": the config says attention_bias = true"));
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "silu", "rms_norm_eps": 1e-5, "attention_bias": false})";
  tensors["model.layers.0.self_attn.q_proj.bias"] = {{8}, 0.1f};  // (Hugging Face's layer has none: it would ignore it)
  const std::vector<unsigned char> with_bias = headwise_test::write_safetensors(tensors);
  std::ofstream(folder + "/model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(with_bias.data()), std::streamsize(with_bias.size()));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder),
                    Catch::Contains("tensor \"model.layers.0.self_attn.q_proj.bias\" is there, but the config says attention_bias = false"));
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "rms_norm_eps": 1e-5, "hidden_act": ["silu"]})";
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("\"hidden_act\" = [\"silu\"] is not a string"));
}

namespace {
/// HF's RMSNorm, w x / sqrt(mean(x²) + eps) per row (Gemma: (1 + w)), from the checkpoint's weight.
Matrix<double> rms_norm(const Matrix<double>& x, const io::SafetensorsFile& f, const std::string& name, double eps, bool gemma) {
  const Eigen::RowVectorXd w = f.row_vector<double>(name).array() + (gemma ? 1.0 : 0.0);
  Matrix<double> y(x.rows(), x.cols());
  for (Index t = 0; t < x.rows(); ++t) y.row(t) = x.row(t) / std::sqrt(x.row(t).squaredNorm() / double(x.cols()) + eps);
  return y.array().rowwise() * w.array();
}
/// x W^T for an nn.Linear weight W [out, in].
Matrix<double> linear(const Matrix<double>& x, const io::SafetensorsFile& f, const std::string& name) {
  return x * f.matrix<double>(name).transpose();
}
}  // namespace

// No whole-model references exist for these families: their attention layers are checked against
// PyTorch through the whole-model loader, and the rest of each block (where its norms sit, its MLP,
// Gemma 2's soft-cap) against Hugging Face's formulas written out here from the raw tensors.
TEMPLATE_TEST_CASE("Whole models of Gemma 2, SmolLM3, OLMo 2, Ministral 3 and Phi-3: their attention is PyTorch's, their "
                   "blocks Hugging Face's formulas, decoding the forward",
                   "[model][fixture][families]", float, double) {
  for (const char* folder : {"gemma2-tiny", "smollm3-tiny", "olmo2-tiny", "ministral3-tiny", "phi3-tiny"}) {
    CAPTURE(folder);
    const std::string name(folder);
    const bool gemma = name == "gemma2-tiny", post_only = name == "olmo2-tiny", phi3 = name == "phi3-tiny";
    const auto model = io::load_decoder_model<TestType>(headwise_test::data_path(folder));
    const io::SafetensorsFile ref = headwise_test::load_fixture(name + "/attention-reference.safetensors");
    const io::SafetensorsFile weights = headwise_test::load_fixture(name + "/model.safetensors");
    const auto tol = headwise_test::tolerance<TestType>();
    for (Index l = 0; l < model.n_layers(); ++l) {  // each block's attention layer on PyTorch's input
      const std::string p = "layers." + std::to_string(l) + ".attn.";
      CHECK_THAT(model.blocks[std::size_t(l)].attention.forward(ref.matrix<TestType>(p + "input")).template cast<double>(),
                 IsNear(ref.matrix<double>(p + "output.f64"), tol));
    }
    std::vector<Index> ids;
    for (Index t = 0; t < 24; ++t) ids.push_back((7 * t + 3) % model.vocab_size());
    model::RunOptions<TestType> options;
    for (const std::string& h : model.hook_names()) options.hooks.insert(h);
    const auto run = model.run(ids, options);
    const auto hook = [&](const std::string& h) { return headwise_test::as_double(run.hooks.at(h)); };
    const double eps = gemma ? 1e-6 : name == "ministral3-tiny" || phi3 ? 1e-5 : 1e-6;
    for (Index l = 0; l < model.n_layers(); ++l) {
      CAPTURE(l);
      const std::string b = "blocks." + std::to_string(l) + ".", w = "model.layers." + std::to_string(l) + ".";
      const Matrix<double> x = hook(b + "hook_resid_pre");
      CHECK_THAT(hook(b + "attn_in"), IsNear(post_only ? x : rms_norm(x, weights, w + "input_layernorm.weight", eps, gemma), tol));
      const Matrix<double> attn = hook(b + "attn.output");
      const Matrix<double> mid =
          x + (gemma || post_only ? rms_norm(attn, weights, w + "post_attention_layernorm.weight", eps, gemma) : attn);
      CHECK_THAT(hook(b + "hook_resid_mid"), IsNear(mid, tol));
      const std::string mlp_norm = gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm";
      const Matrix<double> m = post_only ? mid : rms_norm(mid, weights, w + mlp_norm + ".weight", eps, gemma);
      CHECK_THAT(hook(b + "mlp_in"), IsNear(m, tol));
      Matrix<double> gate, up;
      if (phi3) {  // Phi3MLP: gate, up = gate_up_proj(x).chunk(2, dim=-1)
        const Matrix<double> both = linear(m, weights, w + "mlp.gate_up_proj.weight");
        gate = both.leftCols(both.cols() / 2), up = both.rightCols(both.cols() / 2);
      } else {
        gate = linear(m, weights, w + "mlp.gate_proj.weight"), up = linear(m, weights, w + "mlp.up_proj.weight");
      }
      const Matrix<double> act = gemma ? Matrix<double>(0.5 * gate.array() * (1 + (std::sqrt(2 / std::acos(-1.0)) * (gate.array() + 0.044715 * gate.array().cube())).tanh()))
                                       : Matrix<double>(gate.array() / (1 + (-gate.array()).exp()));
      const Matrix<double> mlp = linear(Matrix<double>(act.array() * up.array()), weights, w + "mlp.down_proj.weight");
      CHECK_THAT(hook(b + "mlp.output"), IsNear(mlp, tol));
      const Matrix<double> post = gemma || post_only ? rms_norm(mlp, weights, w + "post_feedforward_layernorm.weight", eps, gemma) : mlp;
      CHECK_THAT(hook(b + "hook_resid_post"), IsNear(mid + post, tol));
    }
    const Matrix<double> last = rms_norm(hook("blocks." + std::to_string(model.n_layers() - 1) + ".hook_resid_post"), weights,
                                         "model.norm.weight", eps, gemma);
    Matrix<double> logits = linear(last, weights, weights.contains("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight");
    if (gemma) logits = 30.0 * (logits.array() / 30.0).tanh();  // final_logit_softcapping 30
    CHECK_THAT(headwise_test::as_double(run.logits), IsNear(logits, tol));
    // The embedding: Gemma's times sqrt(d_model).
    const Matrix<double> embedded = weights.matrix<double>("model.embed_tokens.weight").row(ids[1]) * (gemma ? std::sqrt(64.0) : 1.0);
    CHECK_THAT(Matrix<double>(hook("blocks.0.hook_resid_pre").row(1)), IsNear(embedded, tol));
    // Decoding: a prompt of 5, then token by token, bitwise the forward.
    auto caches = model.make_caches(Index(ids.size()));
    Matrix<TestType> decoded(run.logits.rows(), run.logits.cols());
    decoded.topRows(5) = model.decode(std::vector<Index>(ids.begin(), ids.begin() + 5), caches);
    for (std::size_t t = 5; t < ids.size(); ++t) decoded.row(Index(t)) = model.decode({ids[t]}, caches);
    CHECK_THAT(headwise_test::as_double(decoded), headwise_test::IsExactly(run.logits));
  }
}

TEMPLATE_TEST_CASE("Decoding token by token equals the whole forward's logits bit for bit, and generation", "[model][fixture][decode]",
                   float, double) {
  for (const char* folder : {"gpt2-model-tiny", "llama-model-tiny", "qwen3moe-model-tiny", "gemma3-model-tiny"}) {
    CAPTURE(folder);
    const auto model = io::load_decoder_model<TestType>(headwise_test::data_path(folder));
    const io::SafetensorsFile ref = headwise_test::load_fixture(std::string(folder) + "/model-reference.safetensors");
    const std::vector<Index> ids = ids_of(ref, "input_ids");
    const Matrix<TestType> whole = model.logits(ids);
    auto caches = model.make_caches(static_cast<Index>(ids.size()));
    Matrix<TestType> decoded(whole.rows(), whole.cols());
    const std::size_t prompt = 5;  // a prompt of 5, then one token at a time
    decoded.topRows(prompt) = model.decode(std::vector<Index>(ids.begin(), ids.begin() + prompt), caches);
    for (std::size_t t = prompt; t < ids.size(); ++t) decoded.row(Index(t)) = model.decode({ids[t]}, caches);
    CHECK_THAT(headwise_test::as_double(decoded), headwise_test::IsExactly(whole));
    // Logits for the last tokens only (Hugging Face's logits_to_keep): the forward's last rows.
    for (const Index keep : {Index(1), Index(3), Index(ids.size()) + 2}) {
      CAPTURE(keep);
      typename model::RunOptions<TestType> last;
      last.logits_to_keep = keep;
      CHECK_THAT(headwise_test::as_double(model.run(ids, last).logits),
                 headwise_test::IsExactly(whole.bottomRows(std::min(keep, whole.rows()))));
    }
    // Greedy generation: each new token the argmax of the forward over everything before it.
    const std::vector<Index> generated = model.generate(std::vector<Index>(ids.begin(), ids.begin() + prompt), 4);
    std::vector<Index> sequence(ids.begin(), ids.begin() + prompt);
    for (const Index next : generated) {
      Index best = 0;
      model.logits(sequence).row(Index(sequence.size()) - 1).maxCoeff(&best);
      CHECK(next == best);
      sequence.push_back(next);
    }
    typename model::DecoderModel<TestType>::Sampling sampled;
    sampled.temperature = 0.8, sampled.top_k = 5, sampled.seed = 7;
    CHECK(model.generate(ids, 3, sampled) == model.generate(ids, 3, sampled));  // the seed fixes the draw
    sampled.top_k = 1;
    CHECK(model.generate(ids, 3, sampled) == model.generate(ids, 3));  // top-1 sampling is greedy
  }
}

/// A GPT-2 checkpoint folder with random weights, n_embd 40 (rows of 160 bytes: not a multiple of
/// a 64-byte vector, so each row of a batch starts at another alignment than a row decoded alone).
/// One folder per `name`: CTest runs the float and double cases at once, and a file rewritten
/// while the other process has it mapped is a SIGBUS there.
std::string random_gpt2_folder(std::mt19937& rng, const std::string& name,
                               const std::function<void(std::map<std::string, headwise_test::TensorValues>&)>& edit = {}) {
  const std::string folder = std::string(HEADWISE_TEST_TMP_DIR) + "/gpt2-n-embd-40-" + name;
  std::filesystem::create_directories(folder);
  std::ofstream(folder + "/config.json") << R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 40, "n_head": 4,
    "n_layer": 2, "n_positions": 64, "n_ctx": 64, "vocab_size": 96, "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new",
    "scale_attn_weights": true, "n_inner": null})";
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::map<std::string, headwise_test::TensorValues> tensors;
  const auto add = [&](const std::string& name, std::vector<std::uint64_t> shape, float offset = 0.0f) {
    headwise_test::TensorValues t{shape, {}};
    std::uint64_t count = 1;
    for (const auto d : shape) count *= d;
    for (std::uint64_t i = 0; i < count; ++i) t.values.push_back(offset + normal(rng));
    tensors[name] = t;
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    add(p + "attn.c_attn.weight", {40, 120}), add(p + "attn.c_attn.bias", {120}), add(p + "attn.c_proj.weight", {40, 40});
    add(p + "attn.c_proj.bias", {40}), add(p + "ln_1.weight", {40}, 1.0f), add(p + "ln_1.bias", {40}), add(p + "ln_2.weight", {40}, 1.0f);
    add(p + "ln_2.bias", {40}), add(p + "mlp.c_fc.weight", {40, 160}), add(p + "mlp.c_fc.bias", {160});
    add(p + "mlp.c_proj.weight", {160, 40}), add(p + "mlp.c_proj.bias", {40});
  }
  add("transformer.ln_f.weight", {40}, 1.0f), add("transformer.ln_f.bias", {40}), add("transformer.wpe.weight", {64, 40});
  add("transformer.wte.weight", {96, 40});
  if (edit) edit(tensors);
  const std::vector<unsigned char> bytes = headwise_test::write_safetensors_values(tensors);
  std::ofstream(folder + "/model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return folder;
}

TEMPLATE_TEST_CASE("Decoding equals the forward bit for bit at a width whose rows are not vector-aligned (GPT-2, n_embd 40)",
                   "[model][decode]", float, double) {
  std::mt19937 rng(40);
  const auto model = io::load_decoder_model<TestType>(random_gpt2_folder(rng, std::is_same_v<TestType, float> ? "f" : "d"));
  std::vector<Index> ids;
  std::uniform_int_distribution<int> token(0, 95);
  for (int t = 0; t < 23; ++t) ids.push_back(token(rng));
  const Matrix<TestType> whole = model.logits(ids);
  for (const std::size_t prompt : {std::size_t(1), std::size_t(3), std::size_t(8)}) {
    CAPTURE(prompt);
    auto caches = model.make_caches(static_cast<Index>(ids.size()));
    Matrix<TestType> decoded(whole.rows(), whole.cols());
    decoded.topRows(Index(prompt)) = model.decode(std::vector<Index>(ids.begin(), ids.begin() + Index(prompt)), caches);
    for (std::size_t t = prompt; t < ids.size(); ++t) decoded.row(Index(t)) = model.decode({ids[t]}, caches);
    CHECK_THAT(headwise_test::as_double(decoded), headwise_test::IsExactly(whole));
  }
}

TEST_CASE("Logits that are not finite are refused by name, on the forward, decoding and generation", "[model][errors]") {
  // (The attention layers refuse a stream that is not finite; after the last one nothing did.)
  std::mt19937 rng(9);
  const auto lm_head = io::load_decoder_model<float>(random_gpt2_folder(rng, "inf-lm-head", [](auto& t) {
    t["transformer.wte.weight"].values[7 * 40 + 3] = std::numeric_limits<float>::infinity();  // (id 7, tied head)
  }));
  const std::vector<Index> ids = {1, 2, 3};  // (id 7 is not in the text: only the head reads its row)
  CHECK_THROWS_WITH(lm_head.run(ids), Catch::Contains("the logit of row 0 for id 7 is") && Catch::Contains("the LM head's product overflowed"));
  auto caches = lm_head.make_caches(4);
  CHECK_THROWS_WITH(lm_head.decode(ids, caches), Catch::Contains("the logit of row 0 for id 7 is"));
  CHECK_THROWS_WITH(lm_head.generate(ids, 1), Catch::Contains("the logit of row 0 for id 7 is"));
  const auto mlp = io::load_decoder_model<float>(random_gpt2_folder(rng, "huge-mlp", [](auto& t) {
    for (int k = 0; k < 160; ++k) t["transformer.h.1.mlp.c_proj.weight"].values[k * 40 + 5] = 3.39e38f;  // (finite: BF16's largest)
  }));
  CHECK_THROWS_WITH(mlp.run(ids), Catch::Contains("the residual stream after the last block is not finite"));
  CHECK_THROWS_WITH(mlp.generate(ids, 2), Catch::Contains("the residual stream after the last block is not finite"));
}

TEST_CASE("Head studies over a whole model: the scores from PyTorch's patterns, a table and a page", "[model][fixture][interpret]") {
  const auto model = io::load_decoder_model<double>(headwise_test::data_path("gpt2-model-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("gpt2-model-tiny/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  const interpret::ModelHeadScores s = interpret::score_model_heads(model, ids, 10, 3);
  const std::vector<Index>& tokens = ids;
  for (Index l = 0; l < model.n_layers(); ++l)
    for (Index h = 0; h < 4; ++h) {
      const Matrix<double> p = ref.slice<double>("blocks." + std::to_string(l) + ".attn.hook_pattern.f64", h);
      CHECK(s.previous_token(l, h) == Approx(interpret::previous_token_score(p)).epsilon(1e-12));
      CHECK(s.first_token(l, h) == Approx(interpret::first_token_score(p)).epsilon(1e-12));
      CHECK(s.duplicate_token(l, h) == Approx(interpret::duplicate_token_score(p, tokens)).epsilon(1e-12));  // "John" repeats
      CHECK(s.prefix_matching(l, h) == Approx(interpret::induction_score(p, tokens)).epsilon(1e-12));
      CHECK(std::abs(s.sink_mass(l, h)) < 1e-12);  // GPT-2 has no sinks
      CHECK((s.induction(l, h) >= 0.0 && s.induction(l, h) <= 1.0));
    }
  CHECK(s.induction.sum() > 0.0);
  const std::string table = interpret::head_score_table(s);
  CHECK_THAT(table, Catch::Contains("previous token") && Catch::Contains("2.3 "));
  const std::string page = interpret::head_score_page(s, "gpt2-model-tiny");
  CHECK_THAT(page, Catch::StartsWith("<!DOCTYPE html>") && Catch::Contains("induction score of every head"));
  CHECK_THROWS_WITH(interpret::score_model_heads(model, {1}), Catch::Contains("the text has 1 tokens: at least 2 are needed"));
}

TEST_CASE("Signed head effects over a whole model: ablation effects from PyTorch's ablated logits, direct logit attribution "
          "from PyTorch's Z, on a diverging page", "[model][fixture][interpret]") {
  const auto model = io::load_decoder_model<double>(headwise_test::data_path("gpt2-model-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("gpt2-model-tiny/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  const Index last = Index(ids.size()) - 1, token = ids[3], baseline = ids[1];  // " John" against " Mary"
  const auto logit_difference = [&](const Matrix<double>& logits) { return logits(last, token) - logits(last, baseline); };
  // Zero-ablating head 1.2 (the fixture's ablation): the change PyTorch's two runs show.
  const Matrix<double> effects = interpret::head_ablation_effects(model, ids, logit_difference);
  CHECK(effects(1, 2) == Approx(logit_difference(ref.matrix<double>("interventions.zero_ablate.logits.f64")) -
                                logit_difference(ref.matrix<double>("logits.f64"))).epsilon(1e-10));
  // Direct logit attribution: Z_h W_O[h] of PyTorch's run through ln_f with its scale frozen at
  // PyTorch's final residual (TransformerLens's apply_ln_to_stack), written out here.
  interpret::LogitDirection direction;
  direction.token = token, direction.baseline = baseline;
  const Matrix<double> dla = interpret::direct_logit_attribution(model, ids, direction);
  const io::SafetensorsFile weights = headwise_test::load_fixture("gpt2-model-tiny/model.safetensors");
  const Eigen::RowVectorXd x = ref.matrix<double>("blocks.2.hook_resid_post.f64").row(last);
  const double sigma = std::sqrt((x.array() - x.mean()).square().mean() + 1e-5);
  const Matrix<double> wte = weights.matrix<double>("transformer.wte.weight");
  const Eigen::RowVectorXd u = (wte.row(token) - wte.row(baseline)).array() * weights.row_vector<double>("transformer.ln_f.weight").array();
  for (Index l = 0; l < 3; ++l) {
    const Matrix<double> z = rows_of(ref, "blocks." + std::to_string(l) + ".attn.hook_z.f64");
    const Matrix<double> w_o = weights.matrix<double>("transformer.h." + std::to_string(l) + ".attn.c_proj.weight");  // Conv1D [in, out]
    for (Index h = 0; h < 4; ++h) {
      CAPTURE(l, h);
      const Eigen::RowVectorXd c = z.row(last).segment(h * 12, 12) * w_o.middleRows(h * 12, 12);
      CHECK(dla(l, h) == Approx((c.array() - c.mean()).matrix().dot(u) / sigma).epsilon(1e-10).margin(1e-12));
    }
  }
  // The table and the page show them signed: a diverging scale, red cells for negative values.
  const interpret::ModelHeadScores s = interpret::score_model_heads(model, ids);
  const std::vector<interpret::HeadEffect> shown{{"ablation effect", effects}, {"direct logit attribution", dla}};
  CHECK_THAT(interpret::head_score_table(s, shown), Catch::Contains("direct logit attribution") && Catch::Contains("-") &&
                                                       Catch::Contains("+"));
  const std::string page = interpret::head_score_page(s, "signed", shown);
  CHECK_THAT(page, Catch::Contains("ablation effect of every head") && Catch::Contains("red: below 0, blue: above 0"));
  CHECK_THAT(page, Catch::Contains("fill=\"rgb(255,"));  // some effect is negative
  CHECK_THROWS_WITH(interpret::head_score_page(s, "bad", {{"wrong", Matrix<double>::Zero(2, 2)}}),
                    Catch::Contains("the effect \"wrong\" is 2x2, the scores are 3x4 (layers x heads)"));
  direction.token = 50257;
  CHECK_THROWS_WITH(interpret::direct_logit_attribution(model, ids, direction), Catch::Contains("token 50257 is not in [0, 50257)"));
  // Gemma 3 norms each block's attention output: that norm's scale is frozen at PyTorch's
  // attn.output as the final norm's is at its last residual, so the heads' shares of the normed
  // output sum to PyTorch's hook_attn_out.
  const auto gemma = io::load_decoder_model<double>(headwise_test::data_path("gemma3-model-tiny"));
  const io::SafetensorsFile gref = headwise_test::load_fixture("gemma3-model-tiny/model-reference.safetensors");
  const io::SafetensorsFile gw = headwise_test::load_fixture("gemma3-model-tiny/model.safetensors");
  const std::vector<Index> gids = ids_of(gref, "input_ids");
  const Index glast = Index(gids.size()) - 1;
  interpret::LogitDirection gdirection;
  gdirection.token = gids[3], gdirection.baseline = gids[1];
  const Matrix<double> gdla = interpret::direct_logit_attribution(gemma, gids, gdirection);
  const auto frozen_rms = [](const Eigen::RowVectorXd& x, const Eigen::RowVectorXd& w) {  // (1 + w) / sigma(x)
    return Eigen::RowVectorXd((w.array() + 1.0) / std::sqrt(x.array().square().mean() + 1e-6));
  };
  const Matrix<double> embed = gw.matrix<double>("model.embed_tokens.weight");
  const Eigen::RowVectorXd to_logit = (embed.row(gdirection.token) - embed.row(gdirection.baseline)).array() *
                                      frozen_rms(gref.matrix<double>("blocks.5.hook_resid_post.f64").row(glast), gw.row_vector<double>("model.norm.weight")).array();
  for (Index l = 0; l < 6; ++l) {
    const std::string layer = "model.layers." + std::to_string(l) + ".", block = "blocks." + std::to_string(l) + ".";
    const Eigen::RowVectorXd post = frozen_rms(gref.matrix<double>(block + "attn.output.f64").row(glast),
                                               gw.row_vector<double>(layer + "post_attention_layernorm.weight"));
    const Matrix<double> z = rows_of(gref, block + "attn.hook_z.f64"), w_o = gw.matrix<double>(layer + "self_attn.o_proj.weight");  // [out, in]
    Eigen::RowVectorXd shares = Eigen::RowVectorXd::Zero(48);
    for (Index h = 0; h < 4; ++h) {
      CAPTURE(l, h);
      const Eigen::RowVectorXd c = (z.row(glast).segment(h * 16, 16) * w_o.middleCols(h * 16, 16).transpose()).array() * post.array();
      shares += c;
      CHECK(gdla(l, h) == Approx(c.dot(to_logit)).epsilon(1e-10).margin(1e-12));
    }
    CHECK_THAT(Matrix<double>(shares), IsNear(Matrix<double>(gref.matrix<double>(block + "hook_attn_out.f64").row(glast)), 1e-12));
  }
  // Gemma 2's soft-capped logits are attributed before the cap: the same shares as without it.
  auto gemma2 = io::load_decoder_model<double>(headwise_test::data_path("gemma2-tiny"));
  REQUIRE(gemma2.logit_softcap > 0);
  const Matrix<double> capped = interpret::direct_logit_attribution(gemma2, {3, 1, 4, 1, 5}, {2, 7, -1});
  gemma2.logit_softcap = 0;
  CHECK(capped == interpret::direct_logit_attribution(gemma2, {3, 1, 4, 1, 5}, {2, 7, -1}));
  CHECK(capped.cwiseAbs().minCoeff() > 0);
  // Mean ablation (on Llama: its small vocabulary keeps the runs cheap): each head's Z replaced by
  // its mean over the text's positions, as a patch of one row does it by hand.
  const auto llama = io::load_decoder_model<double>(headwise_test::data_path("llama-model-tiny"));
  const std::vector<Index> text = ids_of(headwise_test::load_fixture("llama-model-tiny/model-reference.safetensors"), "input_ids");
  const auto last_logit = [&](const Matrix<double>& logits) { return logits(logits.rows() - 1, 7); };
  const Matrix<double> mean_effects = interpret::head_ablation_effects(llama, text, last_logit, interpret::Ablation::mean);
  model::RunOptions<double> record;
  record.hooks = {"blocks.1.attn.hook_z"};
  const auto clean = llama.run(text, record);
  const Index d = llama.blocks[1].attention.d_head();
  model::RunOptions<double> by_hand;
  by_hand.hook_functions["blocks.1.attn.hook_z"] = patch_head(0, Matrix<double>(clean.hooks.at("blocks.1.attn.hook_z").leftCols(d).colwise().mean()));
  CHECK(mean_effects(1, 0) == Approx(last_logit(llama.run(text, by_hand).logits) - last_logit(clean.logits)).epsilon(1e-12));
  CHECK(mean_effects(1, 0) != 0.0);
  // Head 1.2 by a patch whose every row is that head's mean Z, averaged here by a plain loop.
  const Matrix<double>& z = clean.hooks.at("blocks.1.attn.hook_z");
  Matrix<double> mean_z = Matrix<double>::Zero(z.rows(), d);
  for (Index t = 0; t < z.rows(); ++t)
    for (Index c = 0; c < d; ++c)
      for (Index u = 0; u < z.rows(); ++u) mean_z(t, c) += z(u, 2 * d + c) / double(z.rows());
  model::RunOptions<double> patched;
  patched.hook_functions["blocks.1.attn.hook_z"] = [&](Matrix<double>& at_z, const model::HookPoint& at) { at.head(at_z, 2) = mean_z; };
  CHECK(mean_effects(1, 2) == Approx(last_logit(llama.run(text, patched).logits) - last_logit(clean.logits)).epsilon(1e-10));
}

namespace {
/// e4m3fn (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities, 0x7f NaN): the value
/// of a code, and the code nearest |x| (ties to the even code), written here from the format's
/// definition rather than taken from the reader.
double e4m3_value(unsigned code) {
  const unsigned e = (code >> 3) & 15, m = code & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, int(e) - 7);
  return code & 0x80 ? -v : v;
}
unsigned char e4m3_code(double x) {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (unsigned c = 0; c < 0x7f; ++c) v.push_back(e4m3_value(c));
    return v;
  }();
  unsigned best = 0;
  for (unsigned c = 1; c < 0x7f; ++c) {
    const double d = std::abs(values[c] - std::abs(x)), b = std::abs(values[best] - std::abs(x));
    if (d < b || (d == b && c % 2 == 0)) best = c;
  }
  return static_cast<unsigned char>(best | (x < 0 ? 0x80 : 0));
}
}  // namespace

TEMPLATE_TEST_CASE("A Llama model stored in FP8 with block scales: every projection and MLP weight kept in FP8 (float), "
                   "computing as its float64 dequantized weights do",
                   "[model][fp8]", float, double) {
  // llama-model-tiny's 2-D layer weights quantized as DeepSeek-V3's checkpoints are (16 x 32 blocks
  // here, so that a matrix has several, edge blocks partial: 128 x 128 in the real files), written
  // beside the same model with the dequantized values in F64; the rest as it is (F32).
  const io::SafetensorsFile source = headwise_test::load_fixture("llama-model-tiny/model.safetensors");
  const Index block_rows = 16, block_cols = 32;
  std::map<std::string, headwise_test::TensorBytes> fp8, dequantized;
  const auto bytes_of = [](const auto* p, std::size_t n) {
    const auto* b = reinterpret_cast<const unsigned char*>(p);
    return std::vector<unsigned char>(b, b + n * sizeof(*p));
  };
  for (const std::string& name : source.names()) {
    const std::vector<std::uint64_t> shape = source.info(name).shape;
    const Matrix<double> w = shape.size() == 2 ? source.matrix<double>(name) : Matrix<double>(source.row_vector<double>(name));
    const bool quantized = shape.size() == 2 && name.rfind("model.layers.", 0) == 0;
    Matrix<double> value = w;
    if (quantized) {
      const Index br = (w.rows() + block_rows - 1) / block_rows, bc = (w.cols() + block_cols - 1) / block_cols;
      std::vector<float> scales(std::size_t(br * bc));
      std::vector<unsigned char> codes(std::size_t(w.size()));
      for (Index i = 0; i < br; ++i)
        for (Index j = 0; j < bc; ++j) {
          const Index r0 = i * block_rows, c0 = j * block_cols;
          const auto block = w.block(r0, c0, std::min(block_rows, w.rows() - r0), std::min(block_cols, w.cols() - c0));
          const float scale = static_cast<float>(block.cwiseAbs().maxCoeff() / 448.0);
          scales[std::size_t(i * bc + j)] = scale;
          for (Index r = 0; r < block.rows(); ++r)
            for (Index c = 0; c < block.cols(); ++c) {
              const unsigned char code = e4m3_code(block(r, c) / double(scale));
              codes[std::size_t((r0 + r) * w.cols() + c0 + c)] = code;
              value(r0 + r, c0 + c) = e4m3_value(code) * double(scale);
            }
        }
      fp8[name] = {"F8_E4M3", shape, codes};
      fp8[name + "_scale_inv"] = {"F32", {std::uint64_t(br), std::uint64_t(bc)}, bytes_of(scales.data(), scales.size())};
    } else {
      const Matrix<float> f = w.cast<float>();
      fp8[name] = {"F32", shape, bytes_of(f.data(), std::size_t(f.size()))};
    }
    dequantized[name] = {"F64", shape, bytes_of(value.data(), std::size_t(value.size()))};
  }
  nlohmann::json config = nlohmann::json::parse(std::ifstream(headwise_test::data_path("llama-model-tiny/config.json")));
  const auto write = [&](const std::string& folder, const nlohmann::json& c, const std::map<std::string, headwise_test::TensorBytes>& t) {
    std::filesystem::create_directories(folder);
    std::ofstream(folder + "/config.json") << c.dump();
    const std::vector<unsigned char> bytes = headwise_test::write_safetensors_bytes(t);
    std::ofstream(folder + "/model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  };
  const std::string tmp = std::string(HEADWISE_TEST_TMP_DIR) + "/llama-model-tiny-fp8-" + (std::is_same_v<TestType, float> ? "f" : "d");
  write(tmp + "-dequantized", config, dequantized);
  nlohmann::json quantized_config = config;
  quantized_config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                             {"weight_block_size", {block_rows, block_cols}}};
  write(tmp, quantized_config, fp8);

  const auto model = io::load_decoder_model<TestType>(tmp);
  const auto reference = io::load_decoder_model<double>(tmp + "-dequantized");
  // Kept in FP8 with their scales by a float model (the MLP's read in place from the file); a
  // float64 model, whose products read F64, converts them once.
  const WeightType kept = std::is_same_v<TestType, float> ? WeightType::f8_e4m3 : WeightType::f64;
  for (const auto& b : model.blocks)
    for (const StoredMatrix* w : {&b.mlp.w_gate, &b.mlp.w_up, &b.mlp.w_down, &b.attention.stored_w_qkv(), &b.attention.stored_w_o()})
      CHECK(w->type() == kept);
  CHECK(model.embedding.type() == (std::is_same_v<TestType, float> ? WeightType::f32 : WeightType::f64));
  const std::vector<Index> ids = {1, 17, 42, 299, 5, 0, 123, 77, 8, 250};
  const Matrix<TestType> logits = model.logits(ids);
  CHECK_THAT(headwise_test::as_double(logits), IsNear(reference.logits(ids), headwise_test::tolerance<TestType>()));
  auto caches = model.make_caches(Index(ids.size()));
  for (std::size_t t = 0; t < ids.size(); ++t)
    CHECK_THAT(headwise_test::as_double(model.decode({ids[t]}, caches)), headwise_test::IsExactly(logits.row(Index(t))));
  // FP8 tensors with no quantization_config saying how they are scaled: refused, naming one.
  write(tmp + "-no-config", config, fp8);
  CHECK_THROWS_WITH(io::load_decoder_model<TestType>(tmp + "-no-config"),
                    Catch::Contains("is F8_E4M3, but the config has no quantization_config (fp8, weight_block_size)"));
}

TEST_CASE("A layer whose q/k/v/o tensors differ in type keeps them in F32, the same function", "[model][stored_matrix]") {
  // llama-model-tiny-bf16 rewritten with layer 0's q_proj in F32 (the same values): layer 0's
  // attention is kept F32, layer 1's stays BF16, and the logits are those of the BF16 file.
  const std::string from = headwise_test::data_path("llama-model-tiny-bf16");
  const io::SafetensorsFile source = io::SafetensorsFile::open(from + "/model.safetensors");
  std::map<std::string, headwise_test::TensorBytes> tensors;
  for (const std::string& name : source.names()) {
    const std::vector<std::uint64_t> shape = source.info(name).shape;
    const std::vector<float> v = source.values<float>(name);
    std::vector<unsigned char> bytes;
    const bool f32 = name == "model.layers.0.self_attn.q_proj.weight";
    for (const float x : v) {
      std::uint32_t bits;
      std::memcpy(&bits, &x, 4);
      for (int b = f32 ? 0 : 2; b < 4; ++b) bytes.push_back(static_cast<unsigned char>(bits >> (8 * b)));  // BF16: the top half, exact here
    }
    tensors[name] = {f32 ? "F32" : "BF16", shape, bytes};
  }
  const std::string folder = std::string(HEADWISE_TEST_TMP_DIR) + "/llama-model-tiny-mixed";
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file(from + "/config.json", folder + "/config.json", std::filesystem::copy_options::overwrite_existing);
  const std::vector<unsigned char> bytes = headwise_test::write_safetensors_bytes(tensors);
  std::ofstream(folder + "/model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  const auto mixed = io::load_decoder_model<float>(folder);
  const auto bf16 = io::load_decoder_model<float>(from);
  CHECK(mixed.blocks[0].attention.stored_w_qkv().type() == WeightType::f32);
  CHECK(mixed.blocks[0].attention.stored_w_o().type() == WeightType::f32);
  CHECK(mixed.blocks[1].attention.stored_w_qkv().type() == WeightType::bf16);
  CHECK(mixed.blocks[0].mlp.w_up.type() == WeightType::bf16);
  const std::vector<Index> ids = {3, 14, 15, 92, 65};
  CHECK_THAT(headwise_test::as_double(mixed.logits(ids)), IsNear(headwise_test::as_double(bf16.logits(ids)), headwise_test::tolerance<float>()));
  // The same file with its header unpadded (the data at an odd offset): the BF16 tensors are not
  // aligned, so they are copied, still BF16, and give the same logits.
  const std::vector<unsigned char> padded = headwise_test::write_safetensors_bytes(tensors);
  std::uint64_t header = 0;
  std::memcpy(&header, padded.data(), 8);
  std::string text(padded.begin() + 8, padded.begin() + 8 + std::ptrdiff_t(header));
  while (!text.empty() && text.back() == ' ') text.pop_back();
  if (text.size() % 2 == 0) text.push_back(' ');
  const std::vector<unsigned char> odd = headwise_test::file_with_header(text, std::vector<unsigned char>(padded.begin() + 8 + std::ptrdiff_t(header), padded.end()));
  const std::string odd_folder = folder + "-unaligned";  // (not over the file `mixed` maps and reads in place)
  std::filesystem::create_directories(odd_folder);
  std::filesystem::copy_file(from + "/config.json", odd_folder + "/config.json", std::filesystem::copy_options::overwrite_existing);
  std::ofstream(odd_folder + "/model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(odd.data()), std::streamsize(odd.size()));
  const auto unaligned = io::load_decoder_model<float>(odd_folder);
  CHECK(unaligned.blocks[0].mlp.w_up.type() == WeightType::bf16);
  CHECK(unaligned.embedding.type() == WeightType::bf16);
  CHECK_THAT(headwise_test::as_double(unaligned.logits(ids)), headwise_test::IsExactly(mixed.logits(ids)));
}
