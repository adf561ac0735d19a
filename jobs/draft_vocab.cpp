#include "jobs/draft_vocab.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "io/npy_write.h"
#include "io/tensor_file.h"
#include "io/torch_save.h"

namespace e3::jobs {

namespace fs = std::filesystem;

DraftVocab choose_draft_vocab(const std::vector<io::TokenCount>& counts, int64_t size, int64_t target_vocab_size) {
  E3_REQUIRE(size >= 1 && size <= target_vocab_size, ErrorKind::Usage,
             "--draft-vocab-size {} must be between 1 and the target's vocabulary size, {} tokens", size,
             target_vocab_size);
  DraftVocab v;
  v.target_vocab_size = target_vocab_size;
  std::vector<io::TokenCount> ranked = counts;
  for (const io::TokenCount& c : ranked) {
    E3_REQUIRE(c.id >= 0 && c.id < target_vocab_size, ErrorKind::Verify,
               "token id {} is counted {} times, but the target's vocabulary has {} tokens", c.id, c.count,
               target_vocab_size);
    v.masked_tokens += c.count;
  }
  v.distinct = static_cast<int64_t>(ranked.size());
  // Most frequent first; a tie goes to the lower id, so that the choice is the same on every
  // run (speculators sorts by (-count, id)).
  std::sort(ranked.begin(), ranked.end(), [](const io::TokenCount& a, const io::TokenCount& b) {
    return a.count != b.count ? a.count > b.count : a.id < b.id;
  });
  const size_t taken = std::min(ranked.size(), static_cast<size_t>(size));
  for (size_t i = 0; i < taken; ++i) {
    v.by_frequency.push_back(ranked[i].id);
    v.covered += ranked[i].count;
  }
  // Too few distinct ids: the lowest ids not counted, as speculators fills (they all lie below
  // `size`, as SpecForge's fill from range(size) does).
  if (v.by_frequency.size() < static_cast<size_t>(size)) {
    std::vector<bool> counted(static_cast<size_t>(size), false);
    for (const io::TokenCount& c : counts)
      if (c.id < size) counted[static_cast<size_t>(c.id)] = true;
    for (int64_t id = 0; static_cast<int64_t>(v.by_frequency.size()) < size; ++id)
      if (!counted[static_cast<size_t>(id)]) {
        v.by_frequency.push_back(id);
        ++v.filled;
      }
  }
  v.ascending = v.by_frequency;
  std::sort(v.ascending.begin(), v.ascending.end());
  return v;
}

std::vector<int64_t> d2t_offsets(const std::vector<int64_t>& ids) {
  std::vector<int64_t> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) out[i] = ids[i] - static_cast<int64_t>(i);
  return out;
}

std::vector<uint8_t> t2d_mask(const std::vector<int64_t>& ids, int64_t target_vocab_size) {
  std::vector<uint8_t> out(static_cast<size_t>(target_vocab_size), 0);
  for (const int64_t id : ids) out[static_cast<size_t>(id)] = 1;
  return out;
}

std::vector<std::string> draft_vocab_files(ExportFormat format) {
  switch (format) {
    case ExportFormat::Speculators: return {"d2t.npy", "t2d.npy"};
    case ExportFormat::SpecForge: return {"vocab_mapping/vocab_mapping.pt"};
    case ExportFormat::ModelOpt: return {"d2t.pth"};
  }
  E3_THROW(ErrorKind::Internal, "unknown export format {}", static_cast<int>(format));
}

void write_draft_vocab(ExportFormat format, const fs::path& dest, const DraftVocab& vocab) {
  using io::TensorElement;
  const std::vector<std::string> files = draft_vocab_files(format);
  const auto N = static_cast<int64_t>(vocab.ascending.size()), V = vocab.target_vocab_size;
  // speculators and SpecForge sort the chosen ids; ModelOpt keeps them in frequency order.
  const std::vector<int64_t> d2t = d2t_offsets(format == ExportFormat::ModelOpt ? vocab.by_frequency : vocab.ascending);
  const std::vector<uint8_t> t2d = t2d_mask(vocab.ascending, V);
  const io::TensorRef d2t_tensor{"d2t", TensorElement::I64, {N}, d2t.data()};
  const io::TensorRef t2d_tensor{"t2d", TensorElement::Bool, {V}, t2d.data()};
  switch (format) {
    case ExportFormat::Speculators:
      io::write_npy(dest / files[0], d2t_tensor);
      io::write_npy(dest / files[1], t2d_tensor);
      break;
    case ExportFormat::SpecForge:
      fs::create_directories((dest / files[0]).parent_path());
      io::write_torch_dict(dest / files[0], {{"d2t", d2t_tensor}, {"t2d", t2d_tensor}});
      break;
    case ExportFormat::ModelOpt:
      io::write_torch_tensor(dest / files[0], d2t_tensor);
      break;
  }
}

std::string draft_vocab_usage(ExportFormat format, const fs::path& dest, int64_t size) {
  switch (format) {
    case ExportFormat::Speculators:
      return fmt::format("scripts/train.py reads them from --data-path {} (or give --d2t-path and --t2d-path); pass "
                         "--draft-vocab-size {}",
                         dest.string(), size);
    case ExportFormat::SpecForge:
      return fmt::format("pass model.vocab_mapping_path={}, with a draft model config whose draft_vocab_size is {}",
                         (dest / draft_vocab_files(format)[0]).string(), size);
    case ExportFormat::ModelOpt:
      return fmt::format("pass data.draft_vocab_cache={} eagle.eagle_architecture_config.draft_vocab_size={}",
                         (dest / draft_vocab_files(format)[0]).string(), size);
  }
  E3_THROW(ErrorKind::Internal, "unknown export format {}", static_cast<int>(format));
}

}  // namespace e3::jobs
