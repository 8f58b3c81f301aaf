// The definitions of headwise/io/config_reader.hpp, included at its end where the
// readers' definitions are compiled: header-only, or in src/io.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/io/config_reader.hpp"

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
