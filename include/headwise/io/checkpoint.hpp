// Checkpoint: the tensors of a Hugging Face checkpoint folder, in one file (model.safetensors) or
// sharded (model.safetensors.index.json: {"weight_map": {tensor: file}}). Each shard is opened
// (mapped and validated) once, when the checkpoint is opened, whatever the number of tensors or
// layers read from it later. Needs nlohmann_json, like io/safetensors.hpp.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/safetensors.hpp"

namespace headwise::io {

/// The text of a small file (a config.json, an index); throws SafetensorsError naming it, and
/// naming a directory or a named pipe as such (a pipe is never waited on).
inline std::string read_text_file(const std::string& path, const char* what) { return detail::read_text(path, what); }

class Checkpoint {
 public:
  /// Opens folder/model.safetensors.index.json and its shards if the index exists, else
  /// folder/model.safetensors. Throws SafetensorsError naming a missing or malformed file.
  static Checkpoint open(const std::string& folder);

  /// The checkpoint of one file already open; `folder` names it in messages.
  static Checkpoint of_file(const std::string& folder, SafetensorsFile file) {
    Checkpoint c;
    c.folder_ = folder;
    const auto& shared = c.files_.emplace("model.safetensors", std::make_shared<SafetensorsFile>(std::move(file))).first->second;
    for (const std::string& name : shared->names()) c.where_[name] = shared.get();
    return c;
  }

  /// The checkpoint an index describes: `text` is the index file's ({"weight_map": {tensor:
  /// file}}), `index` its name in messages, and open_shard(file) opens each file it names once
  /// (from the folder for open(); from memory in the fuzzer). Throws SafetensorsError naming an
  /// index that is not such an object, a file name with a '/', or a shard that lacks its tensor.
  static Checkpoint of_index(const std::string& folder, const std::string& index, const std::string& text,
                             const std::function<SafetensorsFile(const std::string&)>& open_shard);

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

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_IO_DEFINITIONS_OF("headwise/io/definitions/checkpoint.hpp")
