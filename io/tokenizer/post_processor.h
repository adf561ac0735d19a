// tokenizer.json's post-processors: the special tokens added around a text when
// add_special_tokens is true (TemplateProcessing, RobertaProcessing, BertProcessing), and
// ByteLevel's trimming of offsets.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/tokenizer/tokenizer.h"

namespace e3::tok {

// Per token, how many whitespace characters (a space's byte-level 'Ġ' included) begin and end its
// text: what ByteLevel trims from its offsets.
using TrimCounts = std::vector<std::pair<uint32_t, uint32_t>>;

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // `trim` has one entry per token when trims_offsets(), else it is empty.
  virtual void process(std::vector<Token>& tokens, TrimCounts& trim, bool add_special_tokens) const = 0;
  virtual bool trims_offsets() const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const std::string& where);
// transformers' own template for add_bos_token / add_eos_token: [bos] $A [eos].
std::unique_ptr<PostProcessor> make_bos_eos_template(int32_t bos_id, int32_t eos_id);

}  // namespace e3::tok
