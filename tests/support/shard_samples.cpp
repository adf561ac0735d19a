#include "support/shard_samples.h"

#include "core/storage_codec.h"

namespace e3::test {

void write_float_sample(io::ShardWriter& w, int64_t index, const std::string* id, const std::vector<int32_t>& input_ids,
                        const std::vector<uint8_t>& loss_mask, const std::vector<const float*>& layers,
                        const std::vector<const float*>& finals) {
  const StorageCodec& codec = storage_codec(w.attributes().dtype);
  const int64_t H = w.attributes().hidden_size;
  const size_t T = input_ids.size();
  std::vector<std::vector<uint8_t>> blocks;
  auto encode = [&](const std::vector<const float*>& states) {
    std::vector<const void*> rows;
    for (const float* x : states) {
      blocks.emplace_back(T * codec.row_bytes(H));
      codec.encode(x, T, H, blocks.back().data());
      rows.push_back(blocks.back().data());
    }
    return rows;
  };
  blocks.reserve(layers.size() + finals.size());  // the rows point into them
  const std::vector<const void*> layer_rows = encode(layers), final_rows = encode(finals);
  w.write_sample(index, id, input_ids, loss_mask, layer_rows, final_rows);
}

}  // namespace e3::test
