// Tensors on disk: NumPy .npy and safetensors (single files and sharded checkpoints with
// model.safetensors.index.json). All writers go through write_file_atomic.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <string_view>

namespace pare::core {

/// Reads a .npy file (format 1.0/2.0/3.0; dtypes f2 f4 f8 i1 u1 i2 i4 i8 b1, little-endian,
/// C or Fortran order). Throws InputError naming the file on anything malformed or truncated.
at::Tensor load_npy(const std::string& path);
/// Writes a contiguous CPU copy of `t` as .npy (format 1.0, data 64-byte aligned as numpy does).
/// Throws InputError for bfloat16 and other types NumPy lacks.
void save_npy(const at::Tensor& t, const std::string& path);

/// Tensors of a safetensors file by name (dtypes F32 F16 BF16 F64 I8 U8 I16 I32 I64 BOOL; CPU,
/// contiguous), plus its "__metadata__" in `metadata` if given. The tensors view the file's
/// mapping (MappedFile, copy-on-write), so loading an N-GB checkpoint copies none of it.
/// `path` may also be a model.safetensors.index.json: every shard it lists is read (relative to
/// the index's folder) and `metadata` gets the index's "metadata" (non-strings as JSON text).
/// Throws InputError naming the file (and tensor) when the header is malformed or lies about
/// offsets/sizes, as the reference implementation validates them: tensors must tile the data.
std::map<std::string, at::Tensor> load_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata = nullptr);

/// load_safetensors() of safetensors bytes in memory (a checkpoint's payload); `what` names them
/// in messages.
std::map<std::string, at::Tensor> parse_safetensors(std::string_view bytes, const std::string& what,
                                                    std::map<std::string, std::string>* metadata = nullptr);
/// save_safetensors() of one file into `out`, which the caller writes atomically.
void write_safetensors(std::ostream& out, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
/// Writes tensors as safetensors (tensors in name order, contiguous offsets, header padded with
/// spaces to 8 bytes, `metadata` as "__metadata__"), from contiguous CPU copies.
/// When `path` ends in ".index.json" (e.g. "model.safetensors.index.json") writes shards
/// "<stem>-00001-of-0000K.safetensors" next to it, each holding at most `max_shard_bytes` of data
/// (a larger tensor gets a shard of its own; 0: one shard), then the index
/// {"metadata": {"total_size": N, ...metadata}, "weight_map": {tensor: shard}} at `path`.
/// Otherwise writes one file at `path`, and `max_shard_bytes` > 0 is an InputError.
/// Throws InputError for element types safetensors lacks (nothing is written then).
void save_safetensors(const std::map<std::string, at::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {},
                      int64_t max_shard_bytes = 0);

}  // namespace pare::core
