// Capture points. Capture id k is HF's output_hidden_states[k]: 0 is the embedding output,
// j (1 <= j < L) is the output of decoder layer j-1. The final state (post- or pre-norm) is
// captured separately. The audit checks after every step that each requested id was
// captured exactly once with shape [tokens, hidden_size].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/named_enum.h"
#include "core/storage_codec.h"
#include "kernels/backend.h"

namespace e3::model {

// Which final states a run stores. Both serves every trainer from one run: speculators wants
// the state before the final norm, SpecForge and ModelOpt the one after it.
enum class FinalMode { None, PostNorm, PreNorm, Both };
inline constexpr NamedValue<FinalMode> kFinalModeNames[] = {{FinalMode::PostNorm, "post-norm"},
                                                            {FinalMode::PreNorm, "pre-norm"},
                                                            {FinalMode::Both, "both"},
                                                            {FinalMode::None, "none"}};
constexpr const auto& name_table(FinalMode) { return kFinalModeNames; }

// One final state: after the model's final RMSNorm (HF hidden_states[L]) or before it (vLLM's id L).
enum class FinalNorm { Post, Pre };
const char* final_norm_name(FinalNorm n);  // "post-norm" | "pre-norm"
// The final states `m` stores, in the order of their datasets (io::final_dataset_names):
// the post-norm one first.
std::vector<FinalNorm> stored_finals(FinalMode m);
constexpr bool stores_final(FinalMode m, FinalNorm n) {
  return m == FinalMode::Both || (n == FinalNorm::Post ? m == FinalMode::PostNorm : m == FinalMode::PreNorm);
}

// Checks ids against the layer count (0 <= id < L); throws a usage error naming the id.
void validate_capture_ids(const std::vector<int>& ids, int64_t num_layers);

// What the model calls at its capture points.
class CaptureSink {
 public:
  virtual ~CaptureSink() = default;
  virtual bool wants(int id) const = 0;
  virtual FinalMode final_mode() const = 0;
  virtual void capture(int id, kernels::Tensor state) = 0;
  virtual void capture_final(FinalNorm which, kernels::Tensor state) = 0;
};

// Counts captures of one step and checks them against the request.
class CaptureAudit {
 public:
  static constexpr int kFinalPost = -1;
  static constexpr int kFinalPre = -2;
  static int final_id(FinalNorm n) { return n == FinalNorm::Post ? kFinalPost : kFinalPre; }

  CaptureAudit(std::vector<int> distinct_ids, FinalMode final, int64_t hidden_size);
  void begin_step(int64_t tokens);
  void record(int id, int64_t rows, int64_t cols);
  // Throws an audit error naming the rank, the id, and the shape seen.
  void check(int rank) const;

 private:
  struct Seen {
    int id;
    int count = 0;
    int64_t rows = 0, cols = 0;
  };
  std::vector<Seen> seen_;        // one per distinct id, then each final state requested
  std::vector<Seen> unexpected_;  // captures nobody asked for
  int64_t hidden_size_;
  int64_t tokens_ = 0;
};

// Captures into device staging buffers, converted to the storage dtype, then copies them out
// asynchronously: a step's states reach (pinned) host memory while the next step computes.
// `slots` steps can be in flight; the caller keeps a slot's host rows until it is done.
class StagedCapture final : public CaptureSink {
 public:
  StagedCapture(kernels::Backend& backend, std::vector<int> ids, FinalMode final, DType storage,
                int64_t hidden_size, int64_t max_tokens, int slots);

  bool wants(int id) const override;
  FinalMode final_mode() const override { return final_; }
  void capture(int id, kernels::Tensor state) override;
  void capture_final(FinalNorm which, kernels::Tensor state) override;

  void begin_step(int slot, int64_t tokens);
  void audit(int rank) const { audit_.check(rank); }
  // Enqueues the copies out of this step; wait on the ticket before reading its rows.
  uint64_t finish_step();
  // The copies of a step are this many consecutive tickets, the one finish_step returns last.
  int copies_per_step() const { return regions_; }

  // Host rows of the k-th requested id in `slot`: [tokens, H] in the storage dtype, each row
  // codec().row_bytes(H) long (fp8: codes then scale, core/e4m3.h).
  const void* layer(int slot, size_t k) const;
  // The final states stored, in dataset order (stored_finals), same row layout as layer().
  std::vector<const void*> final_states(int slot) const;
  size_t num_ids() const { return ids_.size(); }
  int id(size_t k) const { return ids_[k]; }
  DType storage() const { return codec_.dtype(); }
  const StorageCodec& codec() const { return codec_; }
  int64_t hidden_size() const { return hidden_; }
  int slots() const { return slots_; }

 private:
  int region_of(int id) const;           // distinct id index
  int final_region(FinalNorm which) const;  // after the distinct ids, or -1 when not stored
  size_t region_bytes() const;
  void stage(kernels::Tensor state, int region);  // into this step's region, in the storage dtype
  kernels::Backend& backend_;
  std::vector<int> ids_, distinct_;
  FinalMode final_;
  std::vector<FinalNorm> finals_;
  const StorageCodec& codec_;
  int64_t hidden_, max_tokens_;
  int slots_, regions_;
  int slot_ = 0;
  int64_t tokens_ = 0;
  kernels::DeviceBuffer device_, host_;  // [slots][regions][max_tokens][H]
  CaptureAudit audit_;
};

// The distinct ids of a request, in first-seen order.
std::vector<int> distinct_ids(const std::vector<int>& ids);

}  // namespace e3::model
