#include "jobs/step_writer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/storage_codec.h"

namespace e3::jobs {

ShardCommitter::ShardCommitter(std::filesystem::path out_dir, io::ShardAttributes attrs,
                               std::vector<const ShardPlan*> todo, NonfiniteCheck check, OnCommit on_commit,
                               BeforePublish before_publish, int threads)
    : out_dir_(std::move(out_dir)),
      attrs_(std::move(attrs)),
      finals_(io::final_datasets(attrs_.final_mode)),
      todo_(std::move(todo)),
      check_(std::move(check)),
      threads_(std::max(1, threads)),
      on_commit_(std::move(on_commit)),
      before_publish_(std::move(before_publish)),
      written_(todo_.size(), 0),
      publisher_([this] { publish_loop(); }) {}

ShardCommitter::~ShardCommitter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  publisher_.join();
}

void ShardCommitter::rethrow() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void ShardCommitter::publish_loop() {
  for (;;) {
    std::unique_ptr<io::ShardWriter> shard;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !to_publish_.empty(); });
      if (to_publish_.empty()) return;
      shard = std::move(to_publish_.front());
      to_publish_.pop_front();
      publishing_ = true;
    }
    try {
      if (before_publish_) before_publish_(shard->shard_index());
      io::CommittedShard c = shard->publish();
      spdlog::debug("committed {} ({} samples)", c.file, c.samples.size());
      if (on_commit_) on_commit_(c);
      std::lock_guard<std::mutex> lock(mutex_);
      committed_.push_back(std::move(c));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      publishing_ = false;
    }
    cv_.notify_all();
  }
}

void ShardCommitter::commit_through(size_t upto) {
  for (; next_to_close_ < upto; ++next_to_close_) {
    const ShardPlan* s = todo_[next_to_close_];
    if (!writer_ || writer_->shard_index() != s->index)
      writer_ = std::make_unique<io::ShardWriter>(out_dir_, s->index, attrs_, &account_, threads_);
    writer_->close();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      to_publish_.push_back(std::move(writer_));
    }
    cv_.notify_all();
  }
  rethrow();
}

void ShardCommitter::write(const std::vector<StepSample>& samples, const model::StagedCapture& capture, int slot) {
  const size_t row = capture.codec().row_bytes(capture.hidden_size());
  std::vector<const void*> rows(capture.num_ids());
  const std::vector<const void*> finals = capture.final_states(slot);  // the step's blocks
  std::vector<const void*> final_rows(finals.size());                   // this sample's rows in them
  std::vector<uint8_t> flagged;
  if (!samples.empty()) {
    const io::StageTimer timer(&account_, io::WriteStage::Scan);
    flagged = nonfinite_tokens(capture, slot, samples.back().offset + static_cast<int64_t>(samples.back().ids.size()));
  }
  for (const StepSample& ss : samples) {
    // Shards before this sample's are complete: every sample of theirs came earlier.
    size_t pos = next_to_close_;
    while (todo_[pos] != ss.shard) ++pos;
    commit_through(pos);
    if (!writer_) writer_ = std::make_unique<io::ShardWriter>(out_dir_, ss.shard->index, attrs_, &account_, threads_);
    for (size_t k = 0; k < rows.size(); ++k)
      rows[k] = static_cast<const char*>(capture.layer(slot, k)) + static_cast<size_t>(ss.offset) * row;
    for (size_t j = 0; j < finals.size(); ++j)
      final_rows[j] = static_cast<const char*>(finals[j]) + static_cast<size_t>(ss.offset) * row;
    const io::SampleRecord& r = *ss.record;
    // A sample with a flagged token is scanned again, alone, for where the first bad value is.
    std::optional<std::string> reason;
    if (!flagged.empty() && std::any_of(flagged.begin() + ss.offset,
                                        flagged.begin() + ss.offset + static_cast<int64_t>(ss.ids.size()),
                                        [](uint8_t f) { return f != 0; }))
      reason = nonfinite_reason(rows, final_rows, static_cast<int64_t>(ss.ids.size()));
    if (reason) {
      const std::string what = fmt::format("sample {} ({}:{}{}): {}", r.index, check_.data_path, r.line,
                                           r.has_id ? fmt::format(", id \"{}\"", printable(r.id)) : "", *reason);
      E3_REQUIRE(check_.mode == OnNonfinite::Skip, ErrorKind::NonFinite,
                 "{}; nothing of it was written (--on-nonfinite skip would leave it out and go on)", what);
      spdlog::warn("{}: left out (--on-nonfinite skip)", what);
      writer_->skip_sample({r.index, r.line, *reason});
    } else {
      writer_->write_sample(r.index, r.has_id ? &r.id : nullptr, ss.ids, ss.mask, rows, final_rows);
    }
    if (++written_[pos] == ss.shard->samples_to_write) commit_through(pos + 1);
  }
}

std::vector<uint8_t> ShardCommitter::nonfinite_tokens(const model::StagedCapture& capture, int slot,
                                                     int64_t tokens) const {
  const StorageCodec& codec = capture.codec();
  const int64_t H = attrs_.hidden_size;
  const size_t row = codec.row_bytes(H);
  std::vector<const void*> blocks;
  for (size_t k = 0; k < capture.num_ids(); ++k) {
    const void* b = capture.layer(slot, k);
    if (std::find(blocks.begin(), blocks.end(), b) == blocks.end()) blocks.push_back(b);  // a repeated id once
  }
  for (const void* b : capture.final_states(slot)) blocks.push_back(b);
  // Chunks of tokens, each owned by one thread: a token's flag is written by one thread only.
  constexpr int64_t kChunk = 256;
  const int64_t chunks = (tokens + kChunk - 1) / kChunk;
  std::vector<uint8_t> flags(static_cast<size_t>(tokens), 0);
  int any = 0;
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 4) reduction(| : any)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t t0 = c * kChunk, t1 = std::min(tokens, t0 + kChunk);
    for (const void* b : blocks) {
      for (int64_t t = t0; t < t1;) {
        const auto bad = codec.first_nonfinite(
            codec.staged(static_cast<const char*>(b) + static_cast<size_t>(t) * row, static_cast<size_t>(t1 - t), H), H);
        if (!bad) break;
        t += static_cast<int64_t>(bad->row);
        flags[static_cast<size_t>(t)] = 1;
        any = 1;
        ++t;
      }
    }
  }
  if (!any) flags.clear();
  return flags;
}

std::optional<std::string> ShardCommitter::nonfinite_reason(const std::vector<const void*>& rows,
                                                            const std::vector<const void*>& final_rows,
                                                            int64_t tokens) const {
  const StorageCodec& codec = storage_codec(attrs_.dtype);
  auto describe = [&](const void* block, const std::string& what) -> std::optional<std::string> {
    const auto bad = codec.first_nonfinite(codec.staged(block, static_cast<size_t>(tokens), attrs_.hidden_size),
                                           attrs_.hidden_size);
    if (!bad) return std::nullopt;
    return fmt::format("{} in {} at token {} of {}, column {}{}", std::isnan(bad->value) ? "NaN" : "infinity", what,
                       bad->row, tokens, bad->column,
                       codec.dtype() == DType::F16 && !std::isnan(bad->value) ? " (beyond fp16's range? try --dtype bf16)"
                                                                              : "");
  };
  for (size_t k = 0; k < rows.size(); ++k)
    if (auto r = describe(rows[k], fmt::format("capture id {}", attrs_.layer_ids[k]))) return r;
  for (size_t j = 0; j < final_rows.size() && j < finals_.size(); ++j)
    if (auto r = describe(final_rows[j], fmt::format("the final state ({})", finals_[j].norm))) return r;
  return std::nullopt;
}

void ShardCommitter::finish(bool all_written) {
  if (all_written) commit_through(todo_.size());
  writer_.reset();  // a partial shard: its temporary file is removed
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return (to_publish_.empty() && !publishing_) || error_; });
  if (error_) std::rethrow_exception(error_);
}

std::string capture_stats(const model::StagedCapture& capture, int slot, int64_t tokens) {
  const StorageCodec& codec = capture.codec();
  const int64_t H = capture.hidden_size();
  const size_t rows_at_once = std::max<size_t>(1, 4096 / static_cast<size_t>(H));
  std::vector<float> chunk(rows_at_once * static_cast<size_t>(H));
  auto describe = [&](const void* rows) {
    double sum_sq = 0;
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    const size_t row = codec.row_bytes(H), n = static_cast<size_t>(tokens * H);
    for (size_t begin = 0; begin < static_cast<size_t>(tokens); begin += rows_at_once) {
      const size_t count = std::min(rows_at_once, static_cast<size_t>(tokens) - begin);
      codec.decode(codec.staged(static_cast<const char*>(rows) + begin * row, count, H), H, chunk.data());
      for (size_t i = 0; i < count * static_cast<size_t>(H); ++i) {
        sum_sq += static_cast<double>(chunk[i]) * chunk[i];
        lo = std::min(lo, chunk[i]);
        hi = std::max(hi, chunk[i]);
      }
    }
    return fmt::format("rms {:.4g} min {:.4g} max {:.4g}", n ? std::sqrt(sum_sq / static_cast<double>(n)) : 0.0, lo,
                       hi);
  };
  std::string out;
  for (size_t k = 0; k < capture.num_ids(); ++k)
    out += fmt::format("{}id {}: {}", out.empty() ? "" : "; ", capture.id(k), describe(capture.layer(slot, k)));
  const std::vector<const void*> final_rows = capture.final_states(slot);
  const std::vector<model::FinalNorm> norms = model::stored_finals(capture.final_mode());
  for (size_t j = 0; j < final_rows.size(); ++j)
    out += fmt::format("; final ({}): {}", model::final_norm_name(norms[j]), describe(final_rows[j]));
  return out;
}

AsyncStepWriter::AsyncStepWriter(ShardCommitter& committer, model::StagedCapture& capture, kernels::Backend& backend)
    : committer_(committer), capture_(capture), backend_(backend), busy_(static_cast<size_t>(capture.slots()), false),
      thread_([this] { run(); }) {}

AsyncStepWriter::~AsyncStepWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AsyncStepWriter::rethrow_locked() {
  if (error_) std::rethrow_exception(error_);
}

void AsyncStepWriter::acquire(int slot) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !busy_[static_cast<size_t>(slot)] || error_; });
}

std::exception_ptr AsyncStepWriter::error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void AsyncStepWriter::submit(int64_t step, int slot, uint64_t ticket, std::vector<StepSample> samples) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrow_locked();
    busy_[static_cast<size_t>(slot)] = true;
    queue_.push_back({step, slot, ticket, std::move(samples)});
  }
  cv_.notify_all();
}

void AsyncStepWriter::finish(bool all_written) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return (queue_.empty() && std::none_of(busy_.begin(), busy_.end(), [](bool b) { return b; })) || error_; });
  rethrow_locked();
  lock.unlock();
  committer_.finish(all_written);
}

void AsyncStepWriter::run() {
  for (;;) {
    Job job;
    bool failed;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      failed = static_cast<bool>(error_);
    }
    // After a failure the steps still queued are dropped unwritten: the first error is the
    // root cause the job reports, and shards must not move on past it.
    if (!failed) try {
      {
        const io::StageTimer timer(&committer_.account(), io::WriteStage::DeviceWait);
        backend_.wait_ticket(job.ticket);
      }
      const uint64_t first = job.ticket - static_cast<uint64_t>(capture_.copies_per_step() - 1);
      committer_.account().add(io::WriteStage::DeviceCopy,
                               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(backend_.copy_seconds(first, job.ticket))));
      if (spdlog::should_log(spdlog::level::debug) && !job.samples.empty()) {
        const StepSample& last = job.samples.back();
        spdlog::debug("step {} capture stats: {}", job.step,
                      capture_stats(capture_, job.slot, last.offset + static_cast<int64_t>(last.ids.size())));
      }
      committer_.write(job.samples, capture_, job.slot);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_[static_cast<size_t>(job.slot)] = false;
    }
    cv_.notify_all();
  }
}

}  // namespace e3::jobs
