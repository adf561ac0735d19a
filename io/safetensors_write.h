// Writes one safetensors file (https://github.com/huggingface/safetensors, "Format"): the
// speculators trainer reads its hidden states from these.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "io/tensor_file.h"

namespace e3::io {

// One safetensors file: u64 LE header size, JSON header (with "__metadata__" string map when
// non-empty, padded with spaces to a multiple of 8), then the tensors' bytes in the given order.
// Written as PATH.tmp.<pid>, closed and renamed to PATH (durability is the caller's choice).
// Throws ErrorKind::Output naming PATH on any failure (disk full, a name that is not UTF-8...),
// ErrorKind::Internal on a caller's bug (duplicate or empty name, bad shape, null data).
// Each tensor starts at a multiple of 8 only if the ones before it have sizes that are: put the
// widest element type first, as safetensors' own writer does, for readers that map the file.
// With `direct`, written past the page cache through it (TempFile); the same bytes. With
// `hold`, closed under its temporary name and appended there, for the caller to commit.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, DirectBuffer* direct = nullptr,
                       std::vector<TempFile>* hold = nullptr);

}  // namespace e3::io
