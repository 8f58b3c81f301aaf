// The typed reads of a tokenizer.json's fields: a field of the wrong type is a TokenizerError that
// names the step and the field (never nlohmann_json's type_error); a step that is not an object
// has no fields.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "headwise/detail/compiled.hpp"
#include "headwise/text/unicode.hpp"  // (TokenizerError)

namespace headwise::text::detail {

/// step's "type" when step is an object and it is a string, else "".
std::string type_of(const nlohmann::json& step);
/// step[key] as a string; absent or null: fallback, or an error without one; another type: an error.
std::string string_field(const nlohmann::json& step, const char* key, const std::string& where,
                         const std::optional<std::string>& fallback = std::nullopt);
/// step[key] as true or false; absent or null: fallback; another type: an error.
bool flag_field(const nlohmann::json& step, const char* key, bool fallback, const std::string& where);

}  // namespace headwise::text::detail

// ---- Definitions (detail/compiled.hpp: header-only, or src/text.cpp) ----
#if HEADWISE_TEXT_DEFINITIONS
#include <nlohmann/json.hpp>

namespace headwise::text::detail {

HEADWISE_TEXT_INLINE std::string type_of(const nlohmann::json& step) {
  if (!step.is_object() || !step.contains("type") || !step.at("type").is_string()) return std::string();
  return step.at("type").get<std::string>();
}

HEADWISE_TEXT_INLINE std::string string_field(const nlohmann::json& step, const char* key, const std::string& where,
                                              const std::optional<std::string>& fallback) {
  const bool absent = !step.is_object() || !step.contains(key) || step.at(key).is_null();
  if (absent && fallback) return *fallback;
  if (absent || !step.at(key).is_string())
    throw detail::tokenizer_error(where, step.dump().substr(0, 120) + " has no string \"" + key + "\"");
  return step.at(key).get<std::string>();
}

HEADWISE_TEXT_INLINE bool flag_field(const nlohmann::json& step, const char* key, bool fallback, const std::string& where) {
  if (!step.is_object() || !step.contains(key) || step.at(key).is_null()) return fallback;
  if (!step.at(key).is_boolean())
    throw detail::tokenizer_error(where, step.dump().substr(0, 120) + ": \"" + key + "\" is not true or false");
  return step.at(key).get<bool>();
}

}  // namespace headwise::text::detail
#endif  // HEADWISE_TEXT_DEFINITIONS
