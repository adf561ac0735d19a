// The decoder-only transformer loop shared by every architecture: embedding, layers of
// (norm, attention, all-reduce, residual add, norm, FFN, all-reduce, residual add), final
// norm, with capture points between layers. A family's descriptor only says which blocks to
// build (its attention kind, the FFN its config describes) and their tensor names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/blocks.h"
#include "model/config.h"
#include "model/rope.h"

namespace e3::model {

struct DecoderLayer {
  kernels::Tensor input_norm;           // [1, H]
  kernels::Tensor post_attention_norm;  // [1, H]
  std::unique_ptr<AttentionBlock> attention;
  std::unique_ptr<FfnBlock> ffn;
};

// What an architecture's wiring produces.
struct DecoderParts {
  kernels::Tensor embed;       // [vocab, H], replicated
  kernels::Tensor final_norm;  // [1, H]
  std::vector<DecoderLayer> layers;
  WorkspaceNeeds needs;
  RopeFrequencies rope;
};

// Builds this rank's slice of the decoder of the config's family: each layer's attention block
// of the family's attention kind, its FFN as the config marks the layer. Layers at or past
// num_hidden_layers (DeepSeek's and GLM's next-token-prediction layers) are never named, so
// never read.
DecoderParts build_decoder(const ModelConfig& c, TpSlice tp, WeightLoader& loader);

}  // namespace e3::model
