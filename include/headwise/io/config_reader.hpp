// Reading a Hugging Face config.json: the one reader of the GPT-2 and Llama-family loaders (and of
// the families to come), with errors that name the file, the field and what was wrong
// ("headwise: llama config: <file>: \"head_dim\" = 0 must be an integer in [1, 4294967296]").
// Needs nlohmann_json.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/safetensors.hpp"
#include "headwise/types.hpp"

namespace headwise::io {

/// The largest width, head or layer count a config may give (2^32): sizes derived from it, such
/// as the 3 n_embd columns of GPT-2's c_attn, then fit in 64 bits with room to spare.
inline constexpr Index max_config_value = Index(1) << 32;

namespace detail {

/// A parsed config.json and the fields read from it by name. Throws SafetensorsError naming the
/// config (`kind`: "gpt2 config", "llama config") and the file.
class ConfigReader {
 public:
  ConfigReader(const std::string& text, std::string kind, std::string name);
  [[noreturn]] void fail(const std::string& what) const {
    throw SafetensorsError("headwise: " + kind_ + ": " + name_ + ": " + what);
  }
  /// True if the field is there and not null.
  bool has(const char* key) const;
  /// A count in [1, max_config_value]; absent or null: `fallback`, or an error without one.
  Index integer(const char* key, std::optional<Index> fallback = std::nullopt) const;
  /// A list of integers in [0, max_config_value] (layer numbers); absent or null: empty.
  std::vector<Index> integers(const char* key) const;
  /// A number of `object` (the config or one of its objects); absent or null: `fallback`.
  double number(const nlohmann::json& object, const char* key, double fallback) const;
  /// A true/false field; absent or null: `fallback`; anything else is refused.
  bool boolean(const char* key, bool fallback) const;
  /// A string field; absent or null: ""; anything else but a string is refused.
  std::string string(const char* key) const;
  const nlohmann::json& json() const { return *json_; }

 private:
  std::shared_ptr<const nlohmann::json> json_;  // (a pointer: this header declares the JSON type only)
  std::string kind_, name_;
};

}  // namespace detail
}  // namespace headwise::io

// ---- Definitions (detail/compiled.hpp: header-only, or src/io.cpp) ----
#if HEADWISE_IO_DEFINITIONS
#include <nlohmann/json.hpp>

namespace headwise::io::detail {

HEADWISE_IO_INLINE ConfigReader::ConfigReader(const std::string& text, std::string kind, std::string name)
    : json_(std::make_shared<const nlohmann::json>(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false))),
      kind_(std::move(kind)), name_(std::move(name)) {
  if (json_->is_discarded() || !json_->is_object())
    throw SafetensorsError("headwise: " + kind_ + ": " + name_ + " is not a JSON object");
}

HEADWISE_IO_INLINE bool ConfigReader::has(const char* key) const { return json_->contains(key) && !json_->at(key).is_null(); }

HEADWISE_IO_INLINE Index ConfigReader::integer(const char* key, std::optional<Index> fallback) const {
  if (!has(key)) {
    if (fallback) return *fallback;
    fail(std::string("no integer field \"") + key + "\"");
  }
  const auto& v = json_->at(key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0 || v.get<std::uint64_t>() > std::uint64_t(max_config_value))
    fail(std::string("\"") + key + "\" = " + v.dump() + " must be an integer in [1, " + std::to_string(max_config_value) + "]");
  return static_cast<Index>(v.get<std::uint64_t>());
}

HEADWISE_IO_INLINE std::vector<Index> ConfigReader::integers(const char* key) const {
  std::vector<Index> out;
  if (!has(key)) return out;
  const auto& list = json_->at(key);
  if (!list.is_array()) fail(std::string("\"") + key + "\" = " + list.dump().substr(0, 80) + " is not a list of integers");
  for (const auto& v : list) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > std::uint64_t(max_config_value))
      fail(std::string("\"") + key + "\" holds " + v.dump() + ", not an integer in [0, " + std::to_string(max_config_value) + "]");
    out.push_back(static_cast<Index>(v.get<std::uint64_t>()));
  }
  return out;
}

HEADWISE_IO_INLINE double ConfigReader::number(const nlohmann::json& object, const char* key, double fallback) const {
  if (!object.contains(key) || object.at(key).is_null()) return fallback;
  if (!object.at(key).is_number()) fail(std::string("\"") + key + "\" = " + object.at(key).dump() + " is not a number");
  return object.at(key).get<double>();
}

HEADWISE_IO_INLINE bool ConfigReader::boolean(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!json_->at(key).is_boolean()) fail(std::string("\"") + key + "\" = " + json_->at(key).dump() + " is not true or false");
  return json_->at(key).get<bool>();
}

HEADWISE_IO_INLINE std::string ConfigReader::string(const char* key) const {
  if (!json_->contains(key) || json_->at(key).is_null()) return std::string();
  if (!json_->at(key).is_string()) fail(std::string("\"") + key + "\" = " + json_->at(key).dump().substr(0, 80) + " is not a string");
  return json_->at(key).get<std::string>();
}

}  // namespace headwise::io::detail
#endif  // HEADWISE_IO_DEFINITIONS
