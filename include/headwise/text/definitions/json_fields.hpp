// The definitions of headwise/text/json_fields.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/json_fields.hpp"

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
