#include "io/safetensors_write.h"

#include <nlohmann/json.hpp>

#include <set>

#include "core/error.h"

namespace e3::io {

namespace {

// safetensors refuses larger headers (MAX_HEADER_SIZE in its reader).
constexpr size_t kMaxHeaderBytes = 100'000'000;

// The header text, padded with spaces to a multiple of 8 so the data starts 8-aligned.
std::string header_text(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                        const std::vector<uint64_t>& sizes, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    nlohmann::ordered_json info;
    info["dtype"] = safetensors_dtype(tensors[i].element);
    info["shape"] = tensors[i].shape;
    info["data_offsets"] = {offset, offset + sizes[i]};
    header[tensors[i].name] = std::move(info);
    offset += sizes[i];
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    // Names and metadata come from sample files; JSON cannot carry text that is not UTF-8.
    E3_THROW(ErrorKind::Output, "{}: cannot write the safetensors header: {}", path.string(), e.what());
  }
  text.resize((text.size() + 7) / 8 * 8, ' ');
  E3_REQUIRE(text.size() <= kMaxHeaderBytes, ErrorKind::Output,
             "{}: the safetensors header would be {} bytes, over the format's limit of {}", path.string(),
             text.size(), kMaxHeaderBytes);
  return text;
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata, DirectBuffer* direct,
                       std::vector<TempFile>* hold) {
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  std::set<std::string> names;
  for (const TensorRef& t : tensors) {
    E3_REQUIRE(!t.name.empty() && t.name != "__metadata__", ErrorKind::Internal,
               "{}: '{}' cannot name a safetensors tensor", path.string(), t.name);
    E3_REQUIRE(names.insert(t.name).second, ErrorKind::Internal, "{}: two tensors named '{}'", path.string(),
               t.name);
    sizes.push_back(tensor_bytes(t, path));
  }
  const std::string header = header_text(path, tensors, sizes, metadata);

  TempFile file(path, direct);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  file.write(length, sizeof length);
  file.write(header.data(), header.size());
  for (size_t i = 0; i < tensors.size(); ++i) file.write_tensor(tensors[i], sizes[i]);
  if (!hold) return file.commit();
  file.close();
  hold->push_back(std::move(file));
}

}  // namespace e3::io
