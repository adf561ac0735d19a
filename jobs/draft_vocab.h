// The reduced vocabulary of an EAGLE-3 draft model and the files each trainer reads it from
// (docs/TRAINERS.md, "Draft vocabulary"): the N target tokens most often masked (loss_mask 1) in
// the data, chosen as speculators' `build_vocab_mappings_from_distribution` chooses them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/token_counts.h"
#include "jobs/export.h"

namespace e3::jobs {

inline constexpr int64_t kDefaultDraftVocabSize = 32000;  // the trainers' own default

struct DraftVocab {
  int64_t target_vocab_size = 0;
  // The N target ids, most frequent first; equal counts: the lower id first. Then the ids added
  // when fewer than N distinct ids are masked: the lowest ids not counted, ascending.
  std::vector<int64_t> by_frequency;
  std::vector<int64_t> ascending;  // the same ids, ascending
  int64_t masked_tokens = 0;       // all masked tokens counted
  int64_t distinct = 0;            // distinct masked ids
  int64_t covered = 0;             // masked tokens whose id is in the draft vocabulary
  int64_t filled = 0;              // ids added without a count
};

// Chooses `size` ids of a target vocabulary of `target_vocab_size` from `counts` (each id
// once, in any order). Throws a usage error unless 1 <= size <=
// target_vocab_size, a verify error for a counted id outside the target vocabulary.
DraftVocab choose_draft_vocab(const std::vector<io::TokenCount>& counts, int64_t size, int64_t target_vocab_size);

// EAGLE-3's d2t: the offset of each draft id's target id, d2t[i] = ids[i] - i, so that
// target = i + d2t[i].
std::vector<int64_t> d2t_offsets(const std::vector<int64_t>& ids);
// EAGLE-3's t2d: for each target id, whether it is in the draft vocabulary (0 or 1).
std::vector<uint8_t> t2d_mask(const std::vector<int64_t>& ids, int64_t target_vocab_size);

// The files of a format's draft vocabulary, DEST-relative: speculators "d2t.npy", "t2d.npy";
// SpecForge "vocab_mapping/vocab_mapping.pt"; ModelOpt "d2t.pth" (not *.pt: ModelOpt trains
// on every *.pt under DEST).
std::vector<std::string> draft_vocab_files(ExportFormat format);
// Writes them into `dest` (each under a temporary name, renamed when whole); the same bytes
// for the same vocabulary.
void write_draft_vocab(ExportFormat format, const std::filesystem::path& dest, const DraftVocab& vocab);
// The flags or config keys that make the trainer read the files written into `dest`.
std::string draft_vocab_usage(ExportFormat format, const std::filesystem::path& dest, int64_t size);

}  // namespace e3::jobs
