// The model interface the jobs layer drives: load a checkpoint's slice, run packed prefill
// steps, report captures. Architectures are thin wiring over the blocks in blocks.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "model/capture.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "parallel/communicator.h"

namespace e3::model {

// Several samples packed into one step, in host memory.
struct HostBatch {
  std::vector<int32_t> tokens;      // [tokens]
  std::vector<int32_t> positions;   // [tokens], restarting at 0 for each sample
  std::vector<int32_t> cu_seqlens;  // [samples + 1]
  int64_t max_seqlen = 0;

  void clear();
  void add_sequence(const int32_t* ids, int64_t n);
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int num_seqs() const { return static_cast<int>(cu_seqlens.empty() ? 0 : cu_seqlens.size() - 1); }
};

struct ModelOptions {
  int tp_rank = 0;
  int tp_size = 1;
  int64_t max_tokens = 0;   // token budget of one step: sizes the workspace
  int64_t max_seq_len = 0;  // longest sequence: sizes the RoPE tables
  int load_threads = 0;     // threads reading the checkpoint; 0: model::default_load_threads()
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual size_t weight_bytes() const = 0;
  virtual size_t workspace_bytes() const = 0;
  // One prefill step. `sink` may be null on ranks that do not capture.
  virtual void forward(const HostBatch& batch, CaptureSink* sink) = 0;
};

// Loads this rank's slice of the checkpoint. Every missing tensor or wrong shape is an
// error before any compute.
std::unique_ptr<Model> load_model(const ModelConfig& config, const Checkpoint& ckpt, kernels::Backend& backend,
                                  parallel::Communicator& comm, const ModelOptions& options);

// The model with random weights of the config's shapes (the benchmark: no checkpoint).
std::unique_ptr<Model> make_random_model(const ModelConfig& config, kernels::Backend& backend,
                                         parallel::Communicator& comm, const ModelOptions& options, uint64_t seed);

struct MemoryPlan {
  size_t weight_bytes = 0;
  size_t workspace_bytes = 0;
};
// The memory one rank would use, computed from the config alone (no weights are read); bf16 as the
// CUDA backend with these options would carve it.
MemoryPlan plan_memory(const ModelConfig& config, DType compute_dtype, const ModelOptions& options,
                       const kernels::CudaOptions& cuda = {});

}  // namespace e3::model
