// The definitions of headwise/io/rope_config.hpp, included at its end where the
// readers' definitions are compiled: header-only, or in src/io.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/io/rope_config.hpp"

#include <nlohmann/json.hpp>

namespace headwise::io::detail {

/// The keys of a RoPE settings object (v5 `rope_parameters`, v4 `rope_scaling`) that each
/// rope_type reads, and `extra` (a family's own, such as Ministral 3's llama_4_scaling_beta; may be
/// null); any other key is refused by name, since it would change the rotation.
HEADWISE_IO_INLINE bool rope_key_known(const std::string& type, const std::string& key, bool v5, const char* extra = nullptr) {
  const auto in = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (key == k) return true;
    return false;
  };
  if (in({"rope_type", "type"}) || (extra && key == extra) || (v5 && in({"rope_theta", "partial_rotary_factor"}))) return true;
  if (type == "linear") return in({"factor"});
  if (type == "llama3") return in({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  if (type == "yarn")
    return in({"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate",
               "mscale", "mscale_all_dim"});
  if (type == "longrope") return in({"short_factor", "long_factor", "factor", "original_max_position_embeddings", "attention_factor"});
  return false;  // "default", "proportional"
}

/// The rotated dimensions of a head of head_dim at `fraction` (partial_rotary_factor), which must
/// be in (0, 1]: checked before the product is cast (1e300 is not an Index).
HEADWISE_IO_INLINE Index rotary_dims_of(const ConfigReader& r, Index head_dim, double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) r.fail("\"partial_rotary_factor\" = " + std::to_string(fraction) + " must be in (0, 1]");
  return static_cast<Index>(double(head_dim) * fraction) / 2 * 2;
}

/// A list of `count` positive finite numbers in j[key].
HEADWISE_IO_INLINE std::vector<double> parse_factors(const ConfigReader& r, const nlohmann::json& j, const char* key, Index count,
                                         const std::string& name) {
  if (!j.contains(key) || !j.at(key).is_array() || j.at(key).size() != static_cast<std::size_t>(count))
    r.fail(name + " \"" + key + "\" must be a list of " + std::to_string(count) + " numbers (rotary dimensions / 2)");
  std::vector<double> f;
  for (const auto& v : j.at(key)) {
    if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(v.get<double>()))
      r.fail(name + " \"" + key + "\" has " + v.dump() + ", not a finite number > 0");
    f.push_back(v.get<double>());
  }
  return f;
}

/// The scaling of a RoPE settings object `j` (named `name` in messages) for a rotation of
/// `rotary_dims` dimensions: its rope_type ("type" in older v4 configs), and the fields that type
/// reads. An unknown type or key is an error. As Hugging Face does, YaRN and LongRoPE take their
/// factor from max_position_embeddings / original_max_position_embeddings where both are given
/// (a factor that disagrees is refused: versions differ on which wins).
HEADWISE_IO_INLINE RopeScaling parse_rope_scaling(const ConfigReader& r, const nlohmann::json& j, const std::string& name,
                                      Index rotary_dims, const char* extra = nullptr) {
  RopeScaling s;
  if (!j.is_object()) r.fail("\"" + name + "\" is not an object");
  const auto given = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
  const auto type_of = given("rope_type") ? j.at("rope_type") : given("type") ? j.at("type") : nlohmann::json("default");
  const std::string type = type_of.is_string() ? type_of.get<std::string>() : "";
  using T = RopeScaling::Type;
  if (type == "linear") s.type = T::linear;
  else if (type == "llama3") s.type = T::llama3;
  else if (type == "yarn") s.type = T::yarn;
  else if (type == "longrope") s.type = T::longrope;
  else if (type == "proportional") s.type = T::proportional;
  else if (type != "default")
    r.fail(name + " type " + type_of.dump() + " is not one headwise knows (default, linear, llama3, yarn, longrope, proportional)");
  for (const auto& item : j.items())
    if (!item.value().is_null() && !rope_key_known(type, item.key(), name.rfind("rope_parameters", 0) == 0, extra))
      r.fail(name + " has \"" + item.key() + "\" = " + item.value().dump() + ", which headwise does not read for rope_type \"" +
             type + "\" (it would change the rotation)");
  if (given("truncate") && !j.at("truncate").is_boolean()) r.fail(name + " \"truncate\" = " + j.at("truncate").dump() + " is not true or false");
  if (type == "default" || type == "proportional") return s;
  s.factor = r.number(j, "factor", 1.0);
  s.low_freq_factor = r.number(j, "low_freq_factor", 1.0);
  s.high_freq_factor = r.number(j, "high_freq_factor", 4.0);
  const nlohmann::json& top = r.json();
  const double max_positions = r.number(top, "max_position_embeddings", 8192.0);
  const double original = r.number(j, "original_max_position_embeddings", r.number(top, "original_max_position_embeddings", max_positions));
  if (!(original >= 1.0 && original <= double(max_config_value)))  // before the cast: no UB on 1e300 or NaN
    r.fail("original_max_position_embeddings = " + std::to_string(original) + " must be in [1, " + std::to_string(max_config_value) + "]");
  s.original_max_position = static_cast<Index>(original);
  if (given("original_max_position_embeddings") && r.has("original_max_position_embeddings") &&
      r.number(top, "original_max_position_embeddings", 0.0) != original)
    r.fail(name + " \"original_max_position_embeddings\" = " + j.at("original_max_position_embeddings").dump() +
           " disagrees with the top-level " + top.at("original_max_position_embeddings").dump());
  const bool has_original = given("original_max_position_embeddings") || (s.type == T::longrope && r.has("original_max_position_embeddings"));
  if ((s.type == T::yarn || s.type == T::longrope) && has_original && r.has("max_position_embeddings")) {
    const double ratio = max_positions / original;
    if (given("factor") && std::abs(s.factor - ratio) > 1e-9 * ratio)
      r.fail(name + " \"factor\" = " + j.at("factor").dump() + " disagrees with max_position_embeddings / original_max_position_embeddings = " +
             std::to_string(ratio) + " (Hugging Face versions differ on which one holds)");
    s.factor = ratio;
  }
  s.beta_fast = r.number(j, "beta_fast", 32.0);
  s.beta_slow = r.number(j, "beta_slow", 1.0);
  s.truncate = !given("truncate") || j.at("truncate").get<bool>();
  if (given("mscale")) s.mscale = r.number(j, "mscale", 1.0);
  if (given("mscale_all_dim")) s.mscale_all_dim = r.number(j, "mscale_all_dim", 1.0);
  if (given("attention_factor")) s.attention_factor = r.number(j, "attention_factor", 1.0);
  if (s.type == T::longrope) {
    s.short_factor = parse_factors(r, j, "short_factor", rotary_dims / 2, name);
    s.long_factor = parse_factors(r, j, "long_factor", rotary_dims / 2, name);
  }
  return s;
}

/// The rotary embedding of one RoPE object as transformers v5 writes it (`rope_parameters`, or one
/// of its entries keyed by layer type): rope_theta required, partial_rotary_factor inside or
/// (agreeing) at the top level.
HEADWISE_IO_INLINE RopeConfig parse_rope_object(const ConfigReader& r, const nlohmann::json& p, const std::string& name, Index head_dim,
                                    const char* extra) {
  const nlohmann::json& json = r.json();
  RopeConfig rope;
  rope.d_head = head_dim;
  if (!p.is_object()) r.fail("\"" + name + "\" is not an object");
  if (!p.contains("rope_theta") || p.at("rope_theta").is_null()) r.fail("\"" + name + "\" has no \"rope_theta\"");
  rope.theta = r.number(p, "rope_theta", 0.0);
  const double top = r.number(json, "partial_rotary_factor", 1.0);
  rope.rotary_fraction = r.number(p, "partial_rotary_factor", top);
  if (r.has("partial_rotary_factor") && rope.rotary_fraction != top)
    r.fail("\"partial_rotary_factor\" = " + json.at("partial_rotary_factor").dump() + " disagrees with " + name + (name.back() == 's' ? "' " : "'s ") +
           p.at("partial_rotary_factor").dump());
  rope.scaling = parse_rope_scaling(r, p, name, rotary_dims_of(r, head_dim, rope.rotary_fraction), extra);
  return rope;
}

/// The rotary embedding of a config, as transformers v5 writes it (`rope_parameters`, theta and
/// scaling in one object; keyed by layer type where the family has two, `layer_type`) or as v4 did
/// (top-level `rope_theta`, `rope_scaling`, and `partial_rotary_factor`); the v5 form first. Both
/// forms in one config must agree.
HEADWISE_IO_INLINE RopeConfig parse_rope(const ConfigReader& r, Index head_dim, const char* layer_type = nullptr,
                             const char* extra = nullptr) {
  const nlohmann::json& json = r.json();
  if (!r.has("rope_parameters")) {  // v4
    RopeConfig rope;
    rope.d_head = head_dim;
    rope.rotary_fraction = r.number(json, "partial_rotary_factor", 1.0);
    rope.theta = r.number(json, "rope_theta", 10000.0);  // the config classes' default
    if (r.has("rope_scaling"))
      rope.scaling = parse_rope_scaling(r, json.at("rope_scaling"), "rope_scaling", rotary_dims_of(r, head_dim, rope.rotary_fraction), extra);
    return rope;
  }
  const nlohmann::json& p = json.at("rope_parameters");
  if (!p.is_object()) r.fail("\"rope_parameters\" is not an object");
  if (r.has("rope_scaling")) r.fail("both \"rope_scaling\" (v4) and \"rope_parameters\" (v5): which one holds is not clear");
  bool keyed = false;
  for (const auto& item : p.items()) {
    keyed = keyed || item.value().is_object();
    if (item.value().is_object() && (!layer_type || (item.key() != "full_attention" && item.key() != "sliding_attention")))
      r.fail("\"rope_parameters\" is keyed by layer type (\"" + item.key() + "\"), which this model_type does not have");
  }
  if (keyed && !p.contains(layer_type)) r.fail("\"rope_parameters\" has no entry for \"" + std::string(layer_type) + "\"");
  const std::string name = keyed ? "rope_parameters." + std::string(layer_type) : "rope_parameters";
  RopeConfig rope = parse_rope_object(r, keyed ? p.at(layer_type) : p, name, head_dim, extra);
  if (r.has("rope_theta") && !keyed && r.number(json, "rope_theta", 0.0) != rope.theta)
    r.fail("\"rope_theta\" = " + json.at("rope_theta").dump() + " disagrees with rope_parameters' " + p.at("rope_theta").dump());
  return rope;
}

}  // namespace headwise::io::detail
