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

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/json_fields.hpp")
