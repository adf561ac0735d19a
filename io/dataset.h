// The JSONL input: one sample per line, either token ids {"id": str, "input_ids": [int],
// "loss_mask": [0|1]} or text the model's tokenizer and chat template turn into them
// (io/chat_input.h: OpenAI messages, ShareGPT conversations, plain text). Kinds may mix in one
// file. Opening validates (and tokenizes) every line up front, on several threads, so bad input
// stops the run before anything is written; samples are then re-read by byte offset (and
// tokenized again) when they are batched, so memory holds only the index.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/named_enum.h"
#include "io/chat_encoder.h"
#include "io/chat_input.h"
#include "io/file_io.h"

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
  // The tokenizer and chat template, loaded the first time a line needs them (a model whose
  // tokenizer cannot be read still runs token-id files). Unset: text lines are refused.
  std::function<std::shared_ptr<const ChatEncoder>()> load_chat = {};
  int threads = 1;  // lines checked (and tokenized) at once
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
  LineKind kind = LineKind::TokenIds;
  bool mask_all_zero = false;  // a conversation none of whose tokens is trained on
  uint64_t content_hash = 0;   // of the id, input_ids and loss_mask (untruncated)
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
  // Conversations whose loss mask is all zero (no assistant turn, or every reply empty).
  int64_t num_mask_all_zero() const { return mask_all_zero_; }
  // The lines holding text, tokenized by the chat encoder; 0 for a token-id file.
  int64_t num_text_lines() const { return text_lines_; }
  // The tokenizer and template that made the ids of the text lines (null when there are none).
  const std::shared_ptr<const ChatEncoder>& chat() const { return chat_; }
  // A fingerprint of the token counts per sample (not of the token values).
  std::string shape_fingerprint() const;
  // A fingerprint of every sample's content: its id, input_ids and loss_mask, in order.
  std::string content_fingerprint() const;

  // Reads one sample's tokens and loss mask, truncated as the options say. Thread-safe.
  void read(const SampleRecord& rec, std::vector<int32_t>& ids, std::vector<uint8_t>& mask) const;
  // The same, untruncated, with the tokenized text when the line holds text (tokenize --show).
  EncodedSample read_encoded(const SampleRecord& rec) const;

 private:
  std::filesystem::path path_;
  DatasetOptions options_;
  std::vector<SampleRecord> samples_;
  std::shared_ptr<const Fd> file_;  // the file checked, re-read by offset (pread: from any thread)
  int64_t skipped_ = 0;
  int64_t truncated_ = 0;
  int64_t mask_all_zero_ = 0;
  int64_t text_lines_ = 0;
  std::shared_ptr<const ChatEncoder> chat_;
};

}  // namespace e3::io
