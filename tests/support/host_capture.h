// A capture sink for tests: keeps the captured states of one step in host memory as fp32, so
// that a test can compare them with a reference. The extraction itself stages its states on
// the device (model::StagedCapture).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "model/capture.h"

namespace e3::test {

// Keeps the captured states of one step as fp32 [tokens, H] per requested id.
class HostCapture final : public model::CaptureSink {
 public:
  HostCapture(kernels::Backend& backend, std::vector<int> ids, model::FinalMode final, int64_t hidden_size,
              int64_t max_tokens);

  bool wants(int id) const override;
  model::FinalMode final_mode() const override { return final_; }
  void capture(int id, kernels::Tensor state) override;
  void capture_final(model::FinalNorm which, kernels::Tensor state) override;

  void begin_step(int64_t tokens);
  void audit(int rank) const { audit_.check(rank); }

  // The state of the k-th requested id (in request order, duplicates allowed): [tokens, H].
  const float* layer(size_t k) const;
  // [tokens, H], or null when `which` is not stored.
  const float* final_state(model::FinalNorm which) const;
  size_t num_ids() const { return ids_.size(); }
  int64_t hidden_size() const { return hidden_; }
  // The audit as seen by the forward pass.
  model::CaptureAudit& audit_state() { return audit_; }

 private:
  int slot_of(int id) const;
  kernels::Backend& backend_;
  std::vector<int> ids_;       // as requested
  std::vector<int> distinct_;  // each id once
  model::FinalMode final_;
  int64_t hidden_;
  int64_t max_tokens_;
  std::vector<std::vector<float>> slots_;  // per distinct id
  std::vector<model::FinalNorm> finals_;
  std::vector<std::vector<float>> final_bufs_;  // per stored final state, in finals_ order
  model::CaptureAudit audit_;
};

}  // namespace e3::test
