// Checkpoint: the tensors of a Hugging Face checkpoint folder, in one file (model.safetensors) or
// sharded (model.safetensors.index.json: {"weight_map": {tensor: file}}). Each shard is opened
// (mapped and validated) once, when the checkpoint is opened, whatever the number of tensors or
// layers read from it later. Needs nlohmann_json, like io/safetensors.hpp.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "headwise/io/safetensors.hpp"

namespace headwise::io {

/// The text of a small file (a config.json, an index); throws SafetensorsError naming it.
inline std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw SafetensorsError(std::string("headwise: ") + what + ": cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw SafetensorsError(std::string("headwise: ") + what + ": cannot read " + path);
  return text.str();
}

class Checkpoint {
 public:
  /// Opens folder/model.safetensors.index.json and its shards if the index exists, else
  /// folder/model.safetensors. Throws SafetensorsError naming a missing or malformed file.
  static Checkpoint open(const std::string& folder) {
    Checkpoint c;
    c.folder_ = folder;
    const std::string index = folder + "/model.safetensors.index.json";
    if (!std::filesystem::exists(index)) {
      c.files_.emplace("model.safetensors", std::make_shared<SafetensorsFile>(SafetensorsFile::open(folder + "/model.safetensors")));
      for (const std::string& name : c.files_.begin()->second->names()) c.where_[name] = c.files_.begin()->second.get();
      return c;
    }
    const nlohmann::json json = nlohmann::json::parse(read_text_file(index, "checkpoint index"), nullptr, false);
    const auto map = json.is_object() ? json.find("weight_map") : json.end();
    if (json.is_discarded() || !json.is_object() || map == json.end() || !map->is_object())
      throw SafetensorsError("headwise: checkpoint index: " + index + " has no \"weight_map\" object");
    for (const auto& [tensor, file] : map->items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        throw SafetensorsError("headwise: checkpoint index: " + index + ": tensor \"" + tensor +
                               "\" maps to " + file.dump() + ", expected a file name in the folder");
      auto& shard = c.files_[file.get<std::string>()];
      if (!shard) shard = std::make_shared<SafetensorsFile>(SafetensorsFile::open(folder + "/" + file.get<std::string>()));
      if (!shard->contains(tensor))
        throw SafetensorsError("headwise: checkpoint index: " + index + " puts \"" + tensor + "\" in " +
                               file.get<std::string>() + ", which does not hold it");
      c.where_[tensor] = shard.get();
    }
    return c;
  }

  const std::string& folder() const { return folder_; }
  /// The number of files (shards) opened.
  std::size_t file_count() const { return files_.size(); }
  bool contains(const std::string& tensor) const { return where_.count(tensor) != 0; }
  /// The file that holds `tensor`; throws SafetensorsError if none does.
  const SafetensorsFile& file_of(const std::string& tensor) const {
    const auto it = where_.find(tensor);
    if (it == where_.end()) throw SafetensorsError("headwise: checkpoint: " + folder_ + ": missing tensor \"" + tensor + "\"");
    return *it->second;
  }

 private:
  std::string folder_;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

}  // namespace headwise::io
