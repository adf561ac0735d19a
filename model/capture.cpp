#include "model/capture.h"

#include <algorithm>

#include "core/error.h"

namespace e3::model {

const char* final_norm_name(FinalNorm n) { return n == FinalNorm::Post ? "post-norm" : "pre-norm"; }

std::vector<FinalNorm> stored_finals(FinalMode m) {
  switch (m) {
    case FinalMode::PostNorm: return {FinalNorm::Post};
    case FinalMode::PreNorm: return {FinalNorm::Pre};
    case FinalMode::Both: return {FinalNorm::Post, FinalNorm::Pre};
    case FinalMode::None: break;
  }
  return {};
}

void validate_capture_ids(const std::vector<int>& ids, int64_t num_layers) {
  E3_REQUIRE(!ids.empty(), ErrorKind::Usage, "--layers is empty; give at least one capture id");
  for (int id : ids) {
    E3_REQUIRE(id >= 0, ErrorKind::Usage, "capture id {} is negative", id);
    E3_REQUIRE(id < num_layers, ErrorKind::Usage,
               "capture id {} is not below the {} layers of the model (ids run 0..{}; the last "
               "layer's output is stored with --final pre-norm, post-norm or both)",
               id, num_layers, num_layers - 1);
  }
}

std::vector<int> distinct_ids(const std::vector<int>& ids) {
  std::vector<int> out;
  for (int id : ids)
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  return out;
}

CaptureAudit::CaptureAudit(std::vector<int> distinct, FinalMode final, int64_t hidden_size)
    : hidden_size_(hidden_size) {
  for (int id : distinct) seen_.push_back({id});
  for (FinalNorm n : stored_finals(final)) seen_.push_back({final_id(n)});
}

void CaptureAudit::begin_step(int64_t tokens) {
  tokens_ = tokens;
  for (Seen& s : seen_) s = Seen{s.id};
  unexpected_.clear();
}

void CaptureAudit::record(int id, int64_t rows, int64_t cols) {
  for (Seen& s : seen_) {
    if (s.id == id) {
      ++s.count;
      s.rows = rows;
      s.cols = cols;
      return;
    }
  }
  unexpected_.push_back({id, 1, rows, cols});
}

void CaptureAudit::check(int rank) const {
  auto name = [](int id) {
    if (id == kFinalPost) return std::string("final (post-norm)");
    if (id == kFinalPre) return std::string("final (pre-norm)");
    return fmt::format("{}", id);
  };
  if (!unexpected_.empty()) {
    const Seen& u = unexpected_.front();
    E3_THROW(ErrorKind::Audit, "rank {}: capture id {} was captured with shape [{}, {}] but not requested", rank,
             name(u.id), u.rows, u.cols);
  }
  for (const Seen& s : seen_) {
    E3_REQUIRE(s.count == 1, ErrorKind::Audit,
               "rank {}: capture id {} was captured {} times in a step of {} tokens (expected once, [{}, {}])",
               rank, name(s.id), s.count, tokens_, tokens_, hidden_size_);
    E3_REQUIRE(s.rows == tokens_ && s.cols == hidden_size_, ErrorKind::Audit,
               "rank {}: capture id {} has shape [{}, {}], expected [{}, {}]", rank, name(s.id), s.rows,
               s.cols, tokens_, hidden_size_);
  }
}

StagedCapture::StagedCapture(kernels::Backend& backend, std::vector<int> ids, FinalMode final, DType storage,
                             int64_t hidden_size, int64_t max_tokens, int slots)
    : backend_(backend),
      ids_(std::move(ids)),
      distinct_(distinct_ids(ids_)),
      final_(final),
      finals_(stored_finals(final)),
      codec_(storage_codec(storage)),
      hidden_(hidden_size),
      max_tokens_(max_tokens),
      slots_(slots),
      regions_(static_cast<int>(distinct_.size() + finals_.size())),
      audit_(distinct_, final, hidden_size) {
  const size_t bytes = static_cast<size_t>(slots_) * static_cast<size_t>(regions_) * region_bytes();
  device_ = backend_.allocate(bytes);
  host_ = backend_.allocate_host(bytes);
}

size_t StagedCapture::region_bytes() const {
  return static_cast<size_t>(max_tokens_) * codec_.row_bytes(hidden_);
}

void StagedCapture::stage(kernels::Tensor state, int region) {
  const size_t offset = (static_cast<size_t>(slot_) * static_cast<size_t>(regions_) + static_cast<size_t>(region)) *
                        region_bytes();
  switch (codec_.device_encode()) {
    case DeviceEncode::E4m3Rows:
      // Encoded from the captured values themselves, so that a NaN or infinity among them
      // reaches the writer's check (encode_e4m3_row marks such a row) before anything is stored.
      backend_.encode_e4m3_rows(
          state, device_.view(DType::U8, state.rows, static_cast<int64_t>(codec_.row_bytes(hidden_)), offset));
      return;
    case DeviceEncode::Convert:
      backend_.copy(state, device_.view(codec_.dtype(), state.rows, state.cols, offset));
      return;
  }
}

int StagedCapture::region_of(int id) const {
  auto it = std::find(distinct_.begin(), distinct_.end(), id);
  return it == distinct_.end() ? -1 : static_cast<int>(it - distinct_.begin());
}

bool StagedCapture::wants(int id) const { return region_of(id) >= 0; }

void StagedCapture::begin_step(int slot, int64_t tokens) {
  E3_REQUIRE(slot >= 0 && slot < slots_ && tokens > 0 && tokens <= max_tokens_, ErrorKind::Internal,
             "capture slot {} of {}, step of {} tokens (at most {})", slot, slots_, tokens, max_tokens_);
  slot_ = slot;
  tokens_ = tokens;
  audit_.begin_step(tokens);
}

void StagedCapture::capture(int id, kernels::Tensor state) {
  audit_.record(id, state.rows, state.cols);
  const int r = region_of(id);
  if (r < 0 || state.rows != tokens_ || state.cols != hidden_) return;  // the audit reports it
  stage(state, r);
}

int StagedCapture::final_region(FinalNorm which) const {
  const auto it = std::find(finals_.begin(), finals_.end(), which);
  return it == finals_.end() ? -1 : static_cast<int>(distinct_.size()) + static_cast<int>(it - finals_.begin());
}

void StagedCapture::capture_final(FinalNorm which, kernels::Tensor state) {
  audit_.record(CaptureAudit::final_id(which), state.rows, state.cols);
  const int r = final_region(which);
  if (r < 0 || state.rows != tokens_ || state.cols != hidden_) return;  // the audit reports it
  stage(state, r);
}

uint64_t StagedCapture::finish_step() {
  const size_t used = static_cast<size_t>(tokens_) * codec_.row_bytes(hidden_);
  uint64_t ticket = 0;
  for (int r = 0; r < regions_; ++r) {
    const size_t offset = (static_cast<size_t>(slot_) * static_cast<size_t>(regions_) + static_cast<size_t>(r)) * region_bytes();
    ticket = backend_.copy_to_host_async(static_cast<const char*>(device_.data()) + offset,
                                         static_cast<char*>(host_.data()) + offset, used);
  }
  return ticket;  // copies of one step share a stream: the last one finishing means all did
}

const void* StagedCapture::layer(int slot, size_t k) const {
  const int r = region_of(ids_.at(k));
  return static_cast<const char*>(host_.data()) +
         (static_cast<size_t>(slot) * static_cast<size_t>(regions_) + static_cast<size_t>(r)) * region_bytes();
}

std::vector<const void*> StagedCapture::final_states(int slot) const {
  std::vector<const void*> out;
  for (FinalNorm n : finals_)
    out.push_back(static_cast<const char*>(host_.data()) +
                  (static_cast<size_t>(slot) * static_cast<size_t>(regions_) + static_cast<size_t>(final_region(n))) *
                      region_bytes());
  return out;
}

}  // namespace e3::model
