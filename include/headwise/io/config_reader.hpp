// Reading a Hugging Face config.json: the one reader of the GPT-2 and Llama-family loaders (and of
// the families to come), with errors that name the file, the field and what was wrong
// ("headwise: llama config: <file>: \"head_dim\" = 0 must be an integer in [1, 4294967296]").
// Needs nlohmann_json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

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
  ConfigReader(const std::string& text, std::string kind, std::string name)
      : json_(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false)), kind_(std::move(kind)),
        name_(std::move(name)) {
    if (json_.is_discarded() || !json_.is_object())
      throw SafetensorsError("headwise: " + kind_ + ": " + name_ + " is not a JSON object");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw SafetensorsError("headwise: " + kind_ + ": " + name_ + ": " + what);
  }
  /// True if the field is there and not null.
  bool has(const char* key) const { return json_.contains(key) && !json_.at(key).is_null(); }
  /// A count in [1, max_config_value]; absent or null: `fallback`, or an error without one.
  Index integer(const char* key, std::optional<Index> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(std::string("no integer field \"") + key + "\"");
    }
    const auto& v = json_.at(key);
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0 || v.get<std::uint64_t>() > std::uint64_t(max_config_value))
      fail(std::string("\"") + key + "\" = " + v.dump() + " must be an integer in [1, " + std::to_string(max_config_value) + "]");
    return static_cast<Index>(v.get<std::uint64_t>());
  }
  /// A number of `object` (the config or one of its objects); absent or null: `fallback`.
  double number(const nlohmann::json& object, const char* key, double fallback) const {
    if (!object.contains(key) || object.at(key).is_null()) return fallback;
    if (!object.at(key).is_number()) fail(std::string("\"") + key + "\" = " + object.at(key).dump() + " is not a number");
    return object.at(key).get<double>();
  }
  /// A true/false field; absent or null: `fallback`; anything else is refused.
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!json_.at(key).is_boolean()) fail(std::string("\"") + key + "\" = " + json_.at(key).dump() + " is not true or false");
    return json_.at(key).get<bool>();
  }
  /// A string field; absent or not a string: "".
  std::string string(const char* key) const {
    return json_.contains(key) && json_.at(key).is_string() ? json_.at(key).get<std::string>() : std::string();
  }
  const nlohmann::json& json() const { return json_; }

 private:
  nlohmann::json json_;
  std::string kind_, name_;
};

}  // namespace detail
}  // namespace headwise::io
