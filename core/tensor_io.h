// Tensors on disk: NumPy .npy and safetensors (single files and sharded checkpoints with
// model.safetensors.index.json). All writers go through write_file_atomic.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>

namespace pare::core {

/// Reads a .npy file (format 1.0/2.0/3.0; dtypes f2 f4 f8 i1 u1 i2 i4 i8 b1, little-endian,
/// C or Fortran order). Throws InputError naming the file on anything malformed or truncated.
at::Tensor load_npy(const std::string& path);
/// Writes a contiguous CPU copy of `t` as .npy (format 1.0).
void save_npy(const at::Tensor& t, const std::string& path);

/// Tensors of a safetensors file by name, plus its "__metadata__" in `metadata` if given.
/// `path` may also be a model.safetensors.index.json: every shard it lists is read.
/// Throws InputError naming the file when the header is malformed or lies about offsets/sizes.
std::map<std::string, at::Tensor> load_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata = nullptr);

/// Writes tensors as safetensors. With `max_shard_bytes` > 0 and more data than that, writes
/// shards "<stem>-00001-of-0000K.safetensors" next to `path` and an index at `path`
/// (which should then end in ".index.json"); otherwise one file at `path`.
void save_safetensors(const std::map<std::string, at::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {},
                      int64_t max_shard_bytes = 0);

}  // namespace pare::core
