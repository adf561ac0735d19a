#include "support/host_capture.h"

#include <algorithm>

#include "core/error.h"

namespace e3::test {

using model::FinalMode;
using model::FinalNorm;

HostCapture::HostCapture(kernels::Backend& backend, std::vector<int> ids, FinalMode final, int64_t hidden_size,
                         int64_t max_tokens)
    : backend_(backend),
      ids_(std::move(ids)),
      distinct_(model::distinct_ids(ids_)),
      final_(final),
      hidden_(hidden_size),
      max_tokens_(max_tokens),
      audit_(distinct_, final, hidden_size) {
  slots_.resize(distinct_.size());
  for (auto& s : slots_) s.resize(static_cast<size_t>(max_tokens_ * hidden_));
  finals_ = model::stored_finals(final_);
  final_bufs_.resize(finals_.size());
  for (auto& b : final_bufs_) b.resize(static_cast<size_t>(max_tokens_ * hidden_));
}

int HostCapture::slot_of(int id) const {
  auto it = std::find(distinct_.begin(), distinct_.end(), id);
  return it == distinct_.end() ? -1 : static_cast<int>(it - distinct_.begin());
}

bool HostCapture::wants(int id) const { return slot_of(id) >= 0; }

void HostCapture::begin_step(int64_t tokens) {
  E3_REQUIRE(tokens > 0 && tokens <= max_tokens_, ErrorKind::Internal, "a step of {} tokens exceeds the capture buffer of {}",
             tokens, max_tokens_);
  audit_.begin_step(tokens);
}

void HostCapture::capture(int id, kernels::Tensor state) {
  audit_.record(id, state.rows, state.cols);
  const int slot = slot_of(id);
  if (slot < 0 || state.rows > max_tokens_ || state.cols != hidden_) return;  // the audit reports it
  backend_.download_float(state, slots_[static_cast<size_t>(slot)].data());
}

void HostCapture::capture_final(FinalNorm which, kernels::Tensor state) {
  audit_.record(model::CaptureAudit::final_id(which), state.rows, state.cols);
  const auto it = std::find(finals_.begin(), finals_.end(), which);
  if (it == finals_.end() || state.rows > max_tokens_ || state.cols != hidden_) return;  // the audit reports it
  backend_.download_float(state, final_bufs_[static_cast<size_t>(it - finals_.begin())].data());
}

const float* HostCapture::final_state(FinalNorm which) const {
  const auto it = std::find(finals_.begin(), finals_.end(), which);
  return it == finals_.end() ? nullptr : final_bufs_[static_cast<size_t>(it - finals_.begin())].data();
}

const float* HostCapture::layer(size_t k) const {
  return slots_[static_cast<size_t>(slot_of(ids_.at(k)))].data();
}

}  // namespace e3::test
