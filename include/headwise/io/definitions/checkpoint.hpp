// The definitions of headwise/io/checkpoint.hpp, included at its end where the
// readers' definitions are compiled: header-only, or in src/io.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/io/checkpoint.hpp"

#include <filesystem>

#include <nlohmann/json.hpp>

namespace headwise::io {

HEADWISE_IO_INLINE Checkpoint Checkpoint::open(const std::string& folder) {
  const std::string index = folder + "/model.safetensors.index.json";
  if (!std::filesystem::exists(index)) return of_file(folder, SafetensorsFile::open(folder + "/model.safetensors"));
  return of_index(folder, index, read_text_file(index, "checkpoint index"),
                  [&](const std::string& file) { return SafetensorsFile::open(folder + "/" + file); });
}

HEADWISE_IO_INLINE Checkpoint Checkpoint::of_index(const std::string& folder, const std::string& index, const std::string& text,
    const std::function<SafetensorsFile(const std::string&)>& open_shard) {
  Checkpoint c;
  c.folder_ = folder;
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  const auto map = json.is_object() ? json.find("weight_map") : json.end();
  if (json.is_discarded() || !json.is_object() || map == json.end() || !map->is_object())
    throw SafetensorsError("headwise: checkpoint index: " + index + " has no \"weight_map\" object");
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      throw SafetensorsError("headwise: checkpoint index: " + index + ": tensor \"" + tensor + "\" maps to " + file.dump() +
                             ", expected a file name in the folder");
    auto& shard = c.files_[file.get<std::string>()];
    if (!shard) shard = std::make_shared<SafetensorsFile>(open_shard(file.get<std::string>()));
    if (!shard->contains(tensor))
      throw SafetensorsError("headwise: checkpoint index: " + index + " puts \"" + tensor + "\" in " +
                             file.get<std::string>() + ", which does not hold it");
    c.where_[tensor] = shard.get();
  }
  return c;
}


}  // namespace headwise::io
