// The one reader of a checkpoint's tensors for the loaders (attention, latent attention, whole
// models): each tensor looked up by name (under a prefix), its shape checked against what the
// config implies before it is read, converted to the computing type or kept as stored (in place
// where it can be); an FP8 tensor with its block scales (`name`_scale_inv, as DeepSeek-V3's
// checkpoints and Hugging Face's FineGrainedFP8Config write them); one matrix of an expert stack
// (Gemma 4's, gpt-oss's dense ones), or of gpt-oss's MXFP4 stacks (`name`_blocks, `name`_scales);
// a depthwise conv1d's weight. Every error names the checkpoint and the tensor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "headwise/io/checkpoint.hpp"
#include "headwise/io/llama_config.hpp"
#include "headwise/io/safetensors.hpp"
#include "headwise/types.hpp"

namespace headwise::io::detail {

/// Where a TensorReader reads: names under `prefix`; FP8 tensors scaled as `fp8` says (none: an FP8
/// tensor is refused by name); `shape_hint` added to a matrix's shape error.
struct TensorReaderOptions {
  std::string prefix;
  std::optional<LlamaConfig::Fp8Blocks> fp8;
  const char* shape_hint = "";
};

class TensorReader {
 public:
  /// `where` begins every message ("headwise: model: <folder>: ").
  TensorReader(const Checkpoint& model, std::string where, TensorReaderOptions options = {})
      : model_(model), where_(std::move(where)), options_(std::move(options)) {}
  const std::string& where() const { return where_; }
  bool has(const std::string& name) const { return model_.contains(options_.prefix + name); }
  /// The prefix of every name it reads ("model.layers.0.self_attn.").
  const std::string& prefix() const { return options_.prefix; }
  [[noreturn]] void fail(const std::string& what) const { throw SafetensorsError(where_ + what); }

  /// Tensor `name` [rows, cols] as stored; an FP8 one times its block scales.
  template <class Scalar>
  Matrix<Scalar> matrix(const std::string& name, std::uint64_t rows, std::uint64_t cols) const {
    const std::string key = options_.prefix + name;
    check(key, {rows, cols}, options_.shape_hint);
    Matrix<Scalar> m = model_.file_of(key).matrix<Scalar>(key, Fp8::as_stored);
    const Dtype dtype = model_.file_of(key).info(key).dtype;
    if (is_fp8(dtype)) apply_block_scales(key, dtype, m);
    else if (model_.contains(key + "_scale_inv"))
      fail("tensor \"" + key + "_scale_inv\" scales \"" + key + "\", which is " + dtype_name(dtype) + ", not FP8");
    return m;
  }
  /// An nn.Linear weight [out, in], as the (in, out) matrix x W multiplies by.
  template <class Scalar>
  Matrix<Scalar> linear(const std::string& name, std::uint64_t out, std::uint64_t in) const {
    return transposed(matrix<Scalar>(name, out, in));
  }
  /// An nn.Linear weight [out, in] (an embedding [vocab, d]) kept as stored, in place where it can be
  /// (SafetensorsFile::stored_matrix); an FP8 one in place with its block scales for a float
  /// product (blocks of a multiple of 16 columns, as every FP8 checkpoint has), else converted
  /// once (times its scales) to the computing type.
  template <class Scalar>
  StoredMatrix stored(const std::string& name, std::uint64_t out, std::uint64_t in) const {
    const std::string key = options_.prefix + name;
    check(key, {out, in}, options_.shape_hint);
    const Dtype dtype = model_.file_of(key).info(key).dtype;
    if (is_fp8(dtype)) {
      BlockScales scales = block_scales(key, dtype, {static_cast<Index>(out), static_cast<Index>(in)});
      if (fp8_in_place<Scalar>(dtype)) return model_.file_of(key).stored_matrix(key, scales);
    }
    if (is_fp8(dtype) || model_.contains(key + "_scale_inv"))
      return StoredMatrix::from(matrix<Scalar>(name, out, in), computing_type<Scalar>());
    return model_.file_of(key).stored_matrix<Scalar>(key);
  }
  /// A weight stored [in, out] (GPT-2's Conv1D) as the [out, in] a product reads: transposed
  /// once, in its stored type where a product in Scalar reads that.
  template <class Scalar>
  StoredMatrix stored_transposed(const std::string& name, std::uint64_t in, std::uint64_t out) const {
    const std::string key = options_.prefix + name;
    const Matrix<Scalar> m = matrix<Scalar>(name, in, out);
    const auto readable = SafetensorsFile::read_in_place<Scalar>(model_.file_of(key).info(key).dtype);
    return StoredMatrix::from(m.transpose(), readable ? *readable : computing_type<Scalar>());
  }
  /// Matrix `index` of a stack `name` [count, in, out] stored input-major (gpt-oss's dense
  /// experts), as the [out, in] a product reads: transposed once, in its stored type where a
  /// product in Scalar reads that.
  template <class Scalar>
  StoredMatrix stored_slice_transposed(const std::string& name, Index index, std::uint64_t count, std::uint64_t in, std::uint64_t out) const {
    const std::string key = options_.prefix + name;
    check(key, {count, in, out}, options_.shape_hint);
    const SafetensorsFile& file = model_.file_of(key);
    const auto readable = SafetensorsFile::read_in_place<Scalar>(file.info(key).dtype);
    return StoredMatrix::from(file.slice<Scalar>(key, index).transpose(), readable ? *readable : computing_type<Scalar>());
  }
  /// Matrix `index` [out, in] of a stack `name` [count, out, in] (Gemma 4's experts), kept as
  /// stored where a product in Scalar reads that type (a copy: a slice is not a tensor of its own).
  template <class Scalar>
  StoredMatrix stored_slice(const std::string& name, Index index, std::uint64_t count, std::uint64_t out, std::uint64_t in) const {
    const std::string key = options_.prefix + name;
    check(key, {count, out, in}, options_.shape_hint);
    const SafetensorsFile& file = model_.file_of(key);
    const auto readable = SafetensorsFile::read_in_place<Scalar>(file.info(key).dtype);
    return StoredMatrix::from(file.slice<Scalar>(key, index), readable ? *readable : computing_type<Scalar>());
  }
  /// Matrix `index` [out, in] of the MXFP4 stack `name`_blocks / `name`_scales (gpt-oss's experts
  /// as released): in place for a float product, widened once to F64 for a double one.
  template <class Scalar>
  StoredMatrix stored_mxfp4(const std::string& name, Index index, std::uint64_t count, std::uint64_t out, std::uint64_t in) const {
    const std::string blocks = options_.prefix + name + "_blocks", scales = options_.prefix + name + "_scales";
    if (in % 32 != 0) fail("\"" + blocks + "\": " + std::to_string(in) + " inputs are not whole MXFP4 blocks of 32");
    check(blocks, {count, out, in / 32, 16}, " (MXFP4: [count, out, in / 32, 16] bytes)");
    check(scales, {count, out, in / 32}, " (MXFP4: a scale byte per block of 32)");
    StoredMatrix m = model_.file_of(blocks).mxfp4_matrix(blocks, model_.file_of(scales), scales, index);
    if constexpr (std::is_same_v<Scalar, double>) return StoredMatrix::from(m.to_matrix<double>(), WeightType::f64);
    else return m;
  }
  /// The type a layer in Scalar keeps the named tensors in (MultiHeadWeights::kept_as): their
  /// stored type where they share one that a product in Scalar reads (F32, BF16, F16, FP8 with
  /// blocks of a multiple of 16 columns for float; F64 for double), else Scalar's own (mixed
  /// types, F64 for float).
  /// Names the checkpoint lacks are skipped.
  template <class Scalar>
  WeightType kept_type(std::initializer_list<const char*> names) const {
    std::optional<WeightType> kept;
    for (const char* name : names) {
      const std::string key = options_.prefix + name;
      if (!model_.contains(key)) continue;
      const Dtype dtype = model_.file_of(key).info(key).dtype;
      const std::optional<WeightType> readable = is_fp8(dtype) ? fp8_in_place<Scalar>(dtype)
                                                 : model_.contains(key + "_scale_inv") ? std::nullopt
                                                                                       : SafetensorsFile::read_in_place<Scalar>(dtype);
      if (!readable || (kept && *kept != *readable)) return computing_type<Scalar>();
      kept = readable;
    }
    return kept ? *kept : computing_type<Scalar>();
  }
  /// The block scales of FP8 tensor `name` [out, in] (MultiHeadWeights::fp8_scales), checked.
  BlockScales fp8_scales(const std::string& name, std::uint64_t out, std::uint64_t in) const {
    const std::string key = options_.prefix + name;
    check(key, {out, in}, options_.shape_hint);
    return block_scales(key, model_.file_of(key).info(key).dtype, {static_cast<Index>(out), static_cast<Index>(in)});
  }
  /// A depthwise conv1d's weight [channels, 1, kernel] as the (channels, kernel) matrix.
  template <class Scalar>
  Matrix<Scalar> depthwise_conv(const std::string& name, std::uint64_t channels, std::uint64_t kernel) const {
    const std::string key = options_.prefix + name;
    check(key, {channels, 1, kernel}, "");
    const std::vector<Scalar> v = model_.file_of(key).values<Scalar>(key);
    return Eigen::Map<const Matrix<Scalar>>(v.data(), static_cast<Index>(channels), static_cast<Index>(kernel));
  }
  /// A 1-D tensor `name` [size] (a norm's weight, a bias, the sinks), required.
  template <class Scalar>
  RowVector<Scalar> vector(const std::string& name, std::uint64_t size) const {
    const std::string key = options_.prefix + name;
    check(key, {size}, "");
    return model_.file_of(key).row_vector<Scalar>(key);
  }
  /// The same, or empty where the checkpoint has none (an optional bias).
  template <class Scalar>
  RowVector<Scalar> optional_vector(const std::string& name, std::uint64_t size) const {
    return has(name) ? vector<Scalar>(name, size) : RowVector<Scalar>();
  }

 private:
  /// m transposed a tile of 32 x 32 at a time: each tile's rows and columns a few cache lines
  /// (a whole row of one against a column of the other misses a line an entry).
  template <class Scalar>
  static Matrix<Scalar> transposed(const Matrix<Scalar>& m) {
    constexpr Index tile = 32;
    Matrix<Scalar> t(m.cols(), m.rows());
    for (Index i = 0; i < m.rows(); i += tile)
      for (Index j = 0; j < m.cols(); j += tile) {
        const Index rows = std::min(tile, m.rows() - i), cols = std::min(tile, m.cols() - j);
        t.block(j, i, cols, rows) = m.block(i, j, rows, cols).transpose();
      }
    return t;
  }
  template <class Scalar>
  static WeightType computing_type() {
    return std::is_same_v<Scalar, float> ? WeightType::f32 : WeightType::f64;
  }
  void check(const std::string& key, const std::vector<std::uint64_t>& shape, const char* hint) const {
    if (!model_.contains(key)) fail("missing tensor \"" + key + "\"");
    const auto& stored = model_.file_of(key).info(key).shape;
    if (stored != shape) fail("tensor \"" + key + "\" has shape " + shape_string(stored) + ", expected " + shape_string(shape) + hint);
  }
  static bool is_fp8(Dtype dtype) { return dtype == Dtype::F8_E4M3 || dtype == Dtype::F8_E5M2; }
  /// The FP8 type a product in Scalar reads `dtype` as in place, with the config's blocks: float only.
  template <class Scalar>
  std::optional<WeightType> fp8_in_place(Dtype dtype) const {
    if (!std::is_same_v<Scalar, float> || !options_.fp8 || options_.fp8->cols % 16 != 0) return std::nullopt;
    return dtype == Dtype::F8_E4M3 ? WeightType::f8_e4m3 : WeightType::f8_e5m2;
  }
  /// The block scales of FP8 tensor `key` (shape: its rows and columns), `key`_scale_inv as
  /// quantization_config's weight_block_size lays them out, checked: present, of the grid's shape,
  /// finite; the tensor's format the config's fmt.
  BlockScales block_scales(const std::string& key, Dtype dtype, StoredShape shape) const {
    const auto& fp8 = options_.fp8;
    if (!fp8)
      fail("tensor \"" + key + "\" is " + dtype_name(dtype) +
           ", but the config has no quantization_config (fp8, weight_block_size) saying how it is scaled");
    if ((dtype == Dtype::F8_E5M2) != fp8->e5m2)
      fail("tensor \"" + key + "\" is " + dtype_name(dtype) + ", but quantization_config's fmt says " + (fp8->e5m2 ? "e5m2" : "e4m3"));
    const std::string scale_key = key + "_scale_inv";
    const auto blocks = [](Index size, Index block) { return static_cast<std::uint64_t>((size + block - 1) / block); };
    check(scale_key, {blocks(shape.rows, fp8->rows), blocks(shape.cols, fp8->cols)}, " (one scale per weight_block_size block)");
    BlockScales scales{model_.file_of(scale_key).matrix<double>(scale_key), fp8->rows, fp8->cols};
    if (!scales.grid.allFinite()) fail("tensor \"" + scale_key + "\" has a scale that is not finite");
    return scales;
  }
  /// m (rows, cols) as stored in FP8, times each block's scale, as DeepSeek-V3's checkpoints and
  /// Hugging Face dequantize: m(i, j) * weight_scale_inv(i / rows, j / cols), edge blocks partial.
  template <class Scalar>
  void apply_block_scales(const std::string& key, Dtype dtype, Matrix<Scalar>& m) const {
    const BlockScales s = block_scales(key, dtype, {m.rows(), m.cols()});
    for (Index i = 0; i < m.rows(); ++i)
      for (Index j = 0; j < m.cols(); j += s.block_cols)
        m.row(i).segment(j, std::min(s.block_cols, m.cols() - j)) *= static_cast<Scalar>(s.grid(i / s.block_rows, j / s.block_cols));
  }

  const Checkpoint& model_;
  std::string where_;
  TensorReaderOptions options_;
};

}  // namespace headwise::io::detail
