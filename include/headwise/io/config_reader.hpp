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

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_IO_DEFINITIONS_OF("headwise/io/definitions/config_reader.hpp")
