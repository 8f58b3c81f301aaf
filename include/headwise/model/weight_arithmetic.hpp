// The arithmetic a whole model multiplies its stored weights of one type by (WeightArithmetic,
// stored_matrix.hpp): widened, the default, or the type's stored arithmetic, which MXFP4 has
// (gpt-oss's experts: integer products with the activations rounded to int8 per block of 32, as
// llama.cpp multiplies them; detail/mxfp4_products.hpp states the rule). The stored arithmetic's
// logits are not the widened ones: each block of activations is rounded to 8 bits first. Decoding
// still equals the forward bit for bit, and the bits do not depend on the thread count.
//
//   auto model = io::load_decoder_model<float>("gpt-oss-20b/");
//   model::set_weight_arithmetic(model, WeightType::mxfp4, WeightArithmetic::stored);
#pragma once

#include "headwise/detail/errors.hpp"
#include "headwise/model/decoder_model.hpp"
#include "headwise/stored_matrix.hpp"

namespace headwise::model {

/// Sets the arithmetic of every weight of `type` the model holds outside its attention layers (the
/// embeddings and LM head, the MLPs, the experts and their routers, Gemma 4's per-layer
/// projections; the attention layers keep F32, F64, BF16, F16 or FP8, whose arithmetic is widened)
/// and returns how many matrices it set. Refuses a type without a stored arithmetic by name, and a
/// model that holds no weight of `type`.
template <class Scalar>
Index set_weight_arithmetic(DecoderModel<Scalar>& model, WeightType type, WeightArithmetic arithmetic) {
  Index count = 0;
  const auto set = [&](StoredMatrix& m) {
    if (m.type() != type || m.rows() == 0) return;
    m = m.with_arithmetic(arithmetic);
    ++count;
  };
  const auto feed_forward = [&](FeedForward<Scalar>& f) { set(f.w_gate), set(f.w_up), set(f.w_down); };
  const auto experts = [&](MixtureOfExperts<Scalar>& e) {
    set(e.router), set(e.shared_gate);
    for (FeedForward<Scalar>& f : e.experts) feed_forward(f);
    if (e.shared_expert) feed_forward(*e.shared_expert);
  };
  set(model.embedding), set(model.unembedding);
  if (model.per_layer_embedding) set(model.per_layer_embedding->table), set(model.per_layer_embedding->projection);
  for (Block<Scalar>& b : model.blocks) {
    feed_forward(b.mlp);
    if (b.experts) experts(*b.experts);
    if (b.side_experts) experts(b.side_experts->experts);
    if (b.per_layer_input) set(b.per_layer_input->gate), set(b.per_layer_input->projection);
  }
  if (count == 0)
    detail::invalid("set_weight_arithmetic", "the model holds no ", weight_type_name(type), " weights outside its attention layers");
  return count;
}

}  // namespace headwise::model
