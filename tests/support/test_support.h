// Helpers shared by the tests: temporary directories, synthetic safetensors files, paths
// of the golden cases kept in the repository.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/manifest.h"
#include "core/error.h"

namespace e3::test {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes a valid safetensors file.
void write_safetensors(const std::filesystem::path& path, const std::vector<StTensor>& tensors);
// Writes raw bytes: an 8-byte little-endian header length, the header text, then `data`.
void write_raw_safetensors(const std::filesystem::path& path, uint64_t header_len, const std::string& header,
                           const std::vector<uint8_t>& data);

std::vector<uint8_t> f32_bytes(const std::vector<float>& values);
std::vector<uint8_t> bf16_bytes(const std::vector<float>& values);
void write_text(const std::filesystem::path& path, const std::string& text);

// tests/golden/<name>
std::filesystem::path golden_case(const std::string& name);

// Deterministic pseudo-random floats in [-1, 1).
std::vector<float> random_floats(size_t n, uint64_t seed);

// A run fingerprint for output-directory tests: one capture id, fp32, one sample per shard.
io::RunFingerprint small_run_fingerprint();

// Runs `f` and returns the e3::Error it threw, or nothing if it threw none.
template <typename F>
std::optional<e3::Error> error_of(F&& f) {
  try {
    f();
  } catch (const e3::Error& e) {
    return e;
  }
  return std::nullopt;
}

inline ::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

}  // namespace e3::test
