// Writes what `torch.save(dict, PATH)` writes, without torch: the SpecForge (.ckpt) and
// ModelOpt (.pt) trainers read their samples, and their draft vocabularies, with torch.load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "io/tensor_file.h"

namespace e3::io {

// A value of a torch.save dict: a tensor, a string or an integer.
using TorchValue = std::variant<TensorRef, std::string, int64_t>;

// What `torch.save({key: value, ...}, PATH)` writes (the zip "new" format, pickle protocol 2),
// loadable by torch.load on torch 1.13 through current 2.x, including weights_only=True and
// mmap=True (each tensor record starts at a multiple of 64 bytes, as torch's own). Keys keep
// the given order; a TensorRef's name is not used (the key names it). Written as
// PATH.tmp.<pid>, closed and renamed to PATH. Throws ErrorKind::Output naming PATH on any
// failure, including a file that would reach 4 GiB (see the .cpp), ErrorKind::Internal on a
// caller's bug (duplicate key, bad shape, null data).
// With `direct`, written past the page cache through it (TempFile); the same bytes. With
// `hold`, the file is closed under its temporary name and appended there instead of renamed:
// the caller commits it (or drops it, which removes it).
void write_torch_dict(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, TorchValue>>& entries, DirectBuffer* direct = nullptr,
                      std::vector<TempFile>* hold = nullptr);
// What `torch.save(tensor, PATH)` writes: the tensor alone, not in a dict (ModelOpt's draft
// vocabulary file, d2t). The same layout and guarantees as write_torch_dict.
void write_torch_tensor(const std::filesystem::path& path, const TensorRef& tensor);

}  // namespace e3::io
