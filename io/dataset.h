// The JSONL input: one sample per line, {"id": str, "input_ids": [int], "loss_mask": [0|1]}.
// Opening validates every line up front, so bad input stops the run before anything is
// written; samples are then re-read by byte offset when they are batched, so memory holds
// only the index.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/named_enum.h"

namespace e3::io {

// --on-long: what a sample over --max-seq-len does.
enum class OnLong { Skip, Truncate, Error };
inline constexpr NamedValue<OnLong> kOnLongNames[] = {
    {OnLong::Skip, "skip"}, {OnLong::Truncate, "truncate"}, {OnLong::Error, "error"}};
constexpr const auto& name_table(OnLong) { return kOnLongNames; }

struct DatasetOptions {
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  OnLong on_long = OnLong::Skip;
};

struct SampleRecord {
  int64_t index = 0;         // 0-based count of non-blank lines before this one
  int64_t line = 0;          // 1-based physical line number
  uint64_t offset = 0;       // byte offset of the line in the file
  uint64_t length = 0;       // bytes of the line, without the newline
  int64_t num_tokens = 0;    // tokens that will be processed (after truncation)
  int64_t original_tokens = 0;
  bool skipped = false;      // longer than --max-seq-len with --on-long skip
  bool has_id = false;
  std::string id;
};

class Dataset {
 public:
  // Checks the whole file. Throws one input error naming up to 20 bad lines, each
  // "FILE:LINE: what is wrong" (then "and N more"), or saying that the file is not a regular
  // file or holds no samples.
  static Dataset open(const std::filesystem::path& path, const DatasetOptions& options);

  const std::filesystem::path& path() const { return path_; }
  const std::vector<SampleRecord>& samples() const { return samples_; }
  int64_t num_skipped() const { return skipped_; }
  int64_t num_truncated() const { return truncated_; }
  // A fingerprint of the token counts per sample (not of the token values).
  std::string shape_fingerprint() const;

  // Reads one sample's tokens and loss mask, truncated as the options say.
  void read(const SampleRecord& rec, std::vector<int32_t>& ids, std::vector<uint8_t>& mask) const;

 private:
  std::filesystem::path path_;
  DatasetOptions options_;
  std::vector<SampleRecord> samples_;
  mutable std::ifstream reader_;  // opened on first read
  int64_t skipped_ = 0;
  int64_t truncated_ = 0;
};

}  // namespace e3::io
