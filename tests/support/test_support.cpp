#include "support/test_support.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/dtype.h"

namespace e3::test {

TempDir::TempDir() {
  std::string templ = (std::filesystem::temp_directory_path() / "e3test-XXXXXX").string();
  char* made = ::mkdtemp(templ.data());
  if (!made) throw std::runtime_error("mkdtemp failed");
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_raw_safetensors(const std::filesystem::path& path, uint64_t header_len, const std::string& header,
                           const std::vector<uint8_t>& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint8_t len[8];
  std::memcpy(len, &header_len, 8);
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

void write_safetensors(const std::filesystem::path& path, const std::vector<StTensor>& tensors) {
  std::string header = "{";
  std::vector<uint8_t> data;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StTensor& t = tensors[i];
    const size_t begin = data.size();
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    header += fmt::format("{}\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", i ? "," : "", t.name,
                          t.dtype, fmt::join(t.shape, ","), begin, data.size());
  }
  header += "}";
  write_raw_safetensors(path, header.size(), header, data);
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<uint8_t> bf16_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = float_to_bf16(values[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

std::filesystem::path golden_case(const std::string& name) {
  const std::filesystem::path own = std::filesystem::path(E3_GOLDEN_DIR) / name;
  return std::filesystem::exists(own) ? own : std::filesystem::path(E3_SHARED_GOLDEN_DIR) / name;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

io::RunFingerprint small_run_fingerprint() {
  io::RunFingerprint f;
  f.model_fingerprint = "m";
  f.layer_ids = {1};
  f.final_mode = "none";
  f.dtype = "fp32";
  f.max_seq_len = 16;
  f.on_long = "skip";
  f.samples_per_shard = 1;
  f.tool_version = "t";
  return f;
}

}  // namespace e3::test
