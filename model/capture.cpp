#include "model/capture.h"

#include <algorithm>

#include "kernels/error.h"

namespace e3::model {

FinalMode parse_final_mode(const std::string& s) {
  if (s == "post-norm") return FinalMode::PostNorm;
  if (s == "pre-norm") return FinalMode::PreNorm;
  if (s == "none") return FinalMode::None;
  E3_THROW(ErrorKind::Usage, "--final must be post-norm, pre-norm or none, not '{}'", s);
}

const char* final_mode_name(FinalMode m) {
  switch (m) {
    case FinalMode::PostNorm: return "post-norm";
    case FinalMode::PreNorm: return "pre-norm";
    case FinalMode::None: return "none";
  }
  return "?";
}

void validate_capture_ids(const std::vector<int>& ids, int64_t num_layers) {
  E3_REQUIRE(!ids.empty(), ErrorKind::Usage, "--layers is empty; give at least one capture id");
  for (int id : ids) {
    E3_REQUIRE(id >= 0, ErrorKind::Usage, "capture id {} is negative", id);
    E3_REQUIRE(id < num_layers, ErrorKind::Usage,
               "capture id {} is not below the {} layers of the model (ids run 0..{}; the last "
               "layer's output is stored with --final pre-norm or post-norm)",
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
  if (final != FinalMode::None) seen_.push_back({kFinal});
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
  auto name = [](int id) { return id == kFinal ? std::string("final") : fmt::format("{}", id); };
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

HostCapture::HostCapture(kernels::Backend& backend, std::vector<int> ids, FinalMode final, int64_t hidden_size,
                         int64_t max_tokens)
    : backend_(backend),
      ids_(std::move(ids)),
      distinct_(distinct_ids(ids_)),
      final_(final),
      hidden_(hidden_size),
      max_tokens_(max_tokens),
      audit_(distinct_, final, hidden_size) {
  slots_.resize(distinct_.size());
  for (auto& s : slots_) s.resize(static_cast<size_t>(max_tokens_ * hidden_));
  if (final_ != FinalMode::None) final_buf_.resize(static_cast<size_t>(max_tokens_ * hidden_));
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

void HostCapture::capture_final(kernels::Tensor state) {
  audit_.record(CaptureAudit::kFinal, state.rows, state.cols);
  if (final_ == FinalMode::None || state.rows > max_tokens_ || state.cols != hidden_) return;
  backend_.download_float(state, final_buf_.data());
}

const float* HostCapture::layer(size_t k) const {
  return slots_[static_cast<size_t>(slot_of(ids_.at(k)))].data();
}

}  // namespace e3::model
