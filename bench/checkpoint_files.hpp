// What the loading and whole-model benchmarks share: a safetensors checkpoint written once, streamed
// (tensors of any dtype, each byte from a fill rule, never all in memory), and the process's peak
// resident set (VmHWM, reset by writing 5 to /proc/self/clear_refs: Linux 4.0 and later), which
// counts the mapped file's pages that were touched.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bench_files {

struct Tensor {
  std::string name;
  std::string dtype;  // a safetensors dtype: "BF16", "F32", "U8", "F8_E4M3", ...
  std::vector<std::uint64_t> shape;
};

inline std::uint64_t dtype_bytes(const std::string& dtype) { return dtype == "F32" ? 4 : dtype == "BF16" || dtype == "F16" ? 2 : 1; }

/// model.safetensors (every tensor's bytes from fill(tensor, i, random byte)) and config.json into
/// `dir`, unless a model.safetensors of the expected size is there already.
inline void write_checkpoint(const std::string& dir, const std::vector<Tensor>& tensors, const std::string& config,
                             const std::function<unsigned char(const Tensor&, std::uint64_t, unsigned char)>& fill) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t bytes = 0;
  for (const Tensor& t : tensors) {
    std::uint64_t count = dtype_bytes(t.dtype);
    for (const auto s : t.shape) count *= s;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {bytes, bytes + count}}};
    bytes += count;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data 8-byte aligned, as safetensors writes it
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config;
  const std::string path = dir + "/model.safetensors";
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 8 + text.size() + bytes) return;
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::uint32_t state = 12345;
  std::vector<unsigned char> block;
  for (const Tensor& t : tensors) {
    std::uint64_t size = dtype_bytes(t.dtype);
    for (const auto s : t.shape) size *= s;
    for (std::uint64_t done = 0; done < size;) {
      block.resize(std::min<std::uint64_t>(size - done, 1 << 22));
      for (std::size_t i = 0; i < block.size(); ++i) {
        state = state * 1664525u + 1013904223u;
        block[i] = fill(t, done + i, static_cast<unsigned char>(state >> 24));
      }
      out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(block.size()));
      done += block.size();
    }
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

/// Resets the peak resident set; false if this system cannot.
inline bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  return static_cast<bool>(clear);
}

/// The peak resident set in MiB since the last reset (VmHWM), or -1 if unknown.
inline double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // in kB
  return -1;
}

}  // namespace bench_files
