// Writing samples of float states into a shard, as a test makes them: encoded with the
// shard's storage codec, then handed to the production writer as the capture would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/shard_writer.h"

namespace e3::test {

// `layers[k]` points at the sample's capture k, [T, H] fp32; `finals[j]` likewise for the
// j-th of final_datasets(final_mode). T is input_ids.size().
void write_float_sample(io::ShardWriter& w, int64_t index, const std::string* id, const std::vector<int32_t>& input_ids,
                        const std::vector<uint8_t>& loss_mask, const std::vector<const float*>& layers,
                        const std::vector<const float*>& finals);

}  // namespace e3::test
