// A config checked against the checkpoint it describes, before anything is sized from it.
#pragma once

#include "model/config.h"
#include "model/safetensors.h"

namespace e3::model {

// Checks the config's sizes against the checkpoint's tensors, named by the family's
// descriptor (embeddings, last layer, the first dense MLP and the first MoE layer's last
// expert); throws a model error naming the key, the tensor and its shape.
void check_config_against_checkpoint(const ModelConfig& c, const Checkpoint& ckpt);

}  // namespace e3::model
