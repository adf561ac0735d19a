#include "jobs/export.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "io/file_io.h"
#include "io/manifest.h"
#include "io/safetensors_write.h"
#include "io/shard_reader.h"
#include "io/tensor_file.h"
#include "io/torch_save.h"
#include "io/verify.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/json_read.h"
#include "core/stage_timer.h"
#include "core/storage_codec.h"
#include "io/token_counts.h"
#include "jobs/draft_vocab.h"
#include "model/config.h"

namespace e3::jobs {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateDir = ".export";       // DEST/.export: the state of an export under way
constexpr const char* kStateFile = "state.json";   // what is being exported from what
constexpr const char* kDoneFile = "export.json";   // written last: what DEST holds
constexpr int64_t kSpecForgeGroup = 2000;          // SpecForge's rows_{g}-{g+2000} directories
constexpr const char* kLockFile = ".export.lock";  // held by the one export writing DEST

// An export's identity: a DEST made from another SRC (other data, other weights, another
// directory) or in another format is not resumed.
nlohmann::json export_identity(ExportFormat format, const io::Manifest& m, const fs::path& src) {
  nlohmann::json id{{"format", name_of(format)},
                    {"run_fingerprint", m.fingerprint.digest()},
                    {"data_fingerprint", m.data_fingerprint},
                    {"source", fs::weakly_canonical(src).string()}};
  if (!m.data_content_fingerprint.empty()) id["data_content_fingerprint"] = m.data_content_fingerprint;
  if (!m.weights_fingerprint.empty()) id["weights_fingerprint"] = m.weights_fingerprint;
  return id;
}

// What SRC holds, from its manifests (checked as verify checks them).
struct Source {
  std::vector<io::Manifest> manifests;
  std::vector<io::CommittedShard> shards;  // in shard index order
  std::vector<int64_t> stored;             // sample indices, ascending: speculators' row order
  io::ShardDescription description;        // of the first shard
  int64_t counts_vocab_size = 0;           // recorded with the first shard's token counts; 0: none
};

Source load_source(const fs::path& src) {
  E3_REQUIRE(fs::is_directory(src), ErrorKind::Usage, "export: {} is not a directory (give the --out directory of a run)",
             src.string());
  Source s;
  s.manifests = io::read_run_manifests(src);
  const io::Manifest& first = s.manifests.front();
  for (const io::Manifest& m : s.manifests) {
    io::check_manifest_structure(m, (src / io::manifest_name(m.part)).string(), ErrorKind::Verify);
    E3_REQUIRE(m.complete, ErrorKind::Verify,
               "{}: {} is not complete (finish the extraction, then `eagle3_extract verify {}`)", src.string(),
               io::manifest_name(m.part), src.string());
    for (const io::CommittedShard& c : m.shards) {
      s.shards.push_back(c);
      s.stored.insert(s.stored.end(), c.samples.begin(), c.samples.end());
    }
  }
  E3_REQUIRE(static_cast<int>(s.manifests.size()) == first.part.count, ErrorKind::Verify,
             "{}: {} of {} parts are present; export needs the whole run", src.string(), s.manifests.size(),
             first.part.count);
  std::sort(s.shards.begin(), s.shards.end(),
            [](const io::CommittedShard& a, const io::CommittedShard& b) { return a.shard_index < b.shard_index; });
  std::sort(s.stored.begin(), s.stored.end());
  E3_REQUIRE(!s.shards.empty() && !s.stored.empty(), ErrorKind::Verify, "{}: the run stored no sample", src.string());
  const io::ShardLayout first_shard = io::read_shard_layout(src / s.shards.front().file);
  s.description = first_shard.description;
  if (first_shard.token_counts) s.counts_vocab_size = first_shard.token_counts->vocab_size;
  return s;
}

// ---- the draft vocabulary

// The target's vocabulary size: as the token counts record it, or, for a SRC written before
// eagle3_extract counted tokens, from its model's config.json; 0 when neither can say (`why`).
int64_t target_vocab_size(const Source& s, std::string* why) {
  if (s.counts_vocab_size > 0) return s.counts_vocab_size;
  try {
    return model::load_model_config(s.description.model_path).vocab_size;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return 0;
  }
}

// The draft vocabulary size asked for, checked against the target's vocabulary.
int64_t draft_vocab_size(const ExportOptions& o, int64_t target_vocab) {
  if (!o.draft_vocab_size) return std::min(kDefaultDraftVocabSize, target_vocab);
  E3_REQUIRE(*o.draft_vocab_size <= target_vocab, ErrorKind::Usage,
             "export: --draft-vocab-size {} is larger than the target's vocabulary ({} tokens)", *o.draft_vocab_size,
             target_vocab);
  return *o.draft_vocab_size;
}

// Rank 0, before the export: an asked-for size the target cannot have is refused now, not after
// the states are written.
void check_draft_vocab_size(const ExportOptions& o, const Source& s) {
  std::string why;
  const int64_t target_vocab = target_vocab_size(s, &why);
  if (target_vocab > 0) {
    draft_vocab_size(o, target_vocab);
    return;
  }
  E3_REQUIRE(!o.draft_vocab_size, ErrorKind::Usage,
             "export: {} does not record the target's vocabulary size (written before eagle3_extract counted "
             "tokens) and its model's config.json cannot be read ({}): no draft vocabulary can be written; leave out "
             "--draft-vocab-size to export without one",
             o.src.string(), why);
}

// What the end of an export needs of every stored sample, from one read of each shard's layout:
// the masked tokens (for the draft vocabulary) and the lengths (what the trainer would cut).
struct SourceTally {
  io::TokenCounter masked;
  int64_t recounted = 0;         // shards without /token_counts, counted from their samples now
  std::vector<int64_t> lengths;  // tokens of each stored sample
};

// One shard's samples' lengths and masked tokens: its /token_counts, or for a shard written
// before eagle3_extract counted tokens, a count of its samples' input_ids where loss_mask is 1.
void tally_shard(const fs::path& path, SourceTally& tally) {
  const io::ShardLayout layout = io::read_shard_layout(path);
  for (const io::StoredSample& sample : layout.samples) tally.lengths.push_back(sample.tokens);
  if (layout.token_counts) {
    tally.masked.add(layout.token_counts->counts);
    return;
  }
  ++tally.recounted;
  io::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  E3_REQUIRE(fd.get() >= 0, ErrorKind::Verify, "{}: {}", path.string(), std::strerror(errno));
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  for (const io::StoredSample& sample : layout.samples) {
    const std::string sw = fmt::format("{} sample {:08d}", path.string(), sample.index);
    const io::StoredDataset* i = sample.find("input_ids");
    const io::StoredDataset* m = sample.find("loss_mask");
    E3_REQUIRE(i && m && i->element == DType::I32 && m->element == DType::U8 && i->dims.size() == 1 &&
                   i->dims == m->dims,
               ErrorKind::Verify, "{}: input_ids must be int32 [T] and loss_mask uint8 [T]", sw);
    ids.resize(i->dims[0]);
    mask.resize(m->dims[0]);
    io::read_stored_bytes(fd.get(), *i, ids.data(), sw);
    io::read_stored_bytes(fd.get(), *m, mask.data(), sw);
    for (const int32_t id : ids) E3_REQUIRE(id >= 0, ErrorKind::Verify, "{}: input_ids holds {}", sw, id);
    tally.masked.add(ids, mask);
  }
}

SourceTally tally_source(const fs::path& src, const Source& s) {
  SourceTally tally;
  for (const io::CommittedShard& c : s.shards) tally_shard(src / c.file, tally);
  return tally;
}

// Writes the format's draft vocabulary into DEST from the counts of every shard of SRC; returns
// what export.json records of it (null when SRC cannot say the target's vocabulary size).
nlohmann::json export_draft_vocab(const ExportOptions& o, const Source& s, const SourceTally& tally) {
  std::string why;
  const int64_t target_vocab = target_vocab_size(s, &why);
  if (target_vocab == 0) {
    spdlog::warn("export: no draft vocabulary written: {} does not record the target's vocabulary size (written "
                 "before eagle3_extract counted tokens) and its model's config.json cannot be read ({})",
                 o.src.string(), why);
    return nullptr;
  }
  const int64_t size = draft_vocab_size(o, target_vocab);
  if (tally.recounted > 0)
    spdlog::info("export: {} of {} shards have no token counts (written before eagle3_extract counted tokens): their "
                 "masked tokens were counted now",
                 tally.recounted, s.shards.size());
  const DraftVocab vocab = choose_draft_vocab(tally.masked.counts(), size, target_vocab);
  write_draft_vocab(o.format, o.dest, vocab);
  const std::vector<std::string> files = draft_vocab_files(o.format);
  std::vector<std::string> paths;
  for (const std::string& f : files) paths.push_back((o.dest / f).string());
  if (size == target_vocab)
    spdlog::info("export: draft vocabulary: the target's whole vocabulary ({} tokens), which the trainers use without "
                 "a mapping; the identity mapping is in {}",
                 size, fmt::join(paths, " and "));
  else
    spdlog::info("export: draft vocabulary: the {} most frequent of the target's {} tokens, {:.2f}% of the {} masked "
                 "tokens ({} distinct ids), in {}",
                 size, target_vocab,
                 vocab.masked_tokens > 0 ? 100.0 * static_cast<double>(vocab.covered) / vocab.masked_tokens : 0.0,
                 vocab.masked_tokens, vocab.distinct, fmt::join(paths, " and "));
  if (vocab.filled > 0 && size < target_vocab)
    spdlog::warn("export: only {} distinct token ids are masked in {}, fewer than the draft vocabulary's {}: the {} "
                 "lowest ids not masked were added, as speculators and SpecForge fill{}; a smaller --draft-vocab-size "
                 "fits the data",
                 vocab.distinct, o.src.string(), size, vocab.filled,
                 o.format == ExportFormat::ModelOpt ? " (ModelOpt's own calibration refuses so little data)" : "");
  spdlog::info("export: {}", draft_vocab_usage(o.format, o.dest, size));
  return {{"size", size},
          {"target_vocab_size", target_vocab},
          {"files", files},
          {"masked_tokens", vocab.masked_tokens},
          {"distinct_masked_ids", vocab.distinct},
          {"covered_masked_tokens", vocab.covered},
          {"filled_ids", vocab.filled}};
}

// The final state a format trains on, and the dataset that holds it in SRC (or none).
struct FinalNeed {
  const char* norm;  // "pre-norm" | "post-norm"
  std::string dataset;
};

FinalNeed final_needed(ExportFormat f, const std::string& final_mode) {
  FinalNeed need{f == ExportFormat::Speculators ? "pre-norm" : "post-norm", ""};
  for (const io::FinalDataset& d : io::final_datasets(final_mode))
    if (d.norm == need.norm) need.dataset = d.name;
  return need;
}

// The capture ids in the order a format's files hold them.
std::vector<int32_t> exported_layer_ids(ExportFormat f, const std::vector<int32_t>& ids) {
  std::vector<int32_t> written;
  for (const size_t k : exported_capture_order(f, ids)) written.push_back(ids[k]);
  return written;
}

// The flag or config key that tells a trainer which layers it was given: speculators counts as we
// do; SpecForge and ModelOpt count "output of layer i", one less (README, "Which layers").
std::string trainer_layers_setting(ExportFormat f, const std::vector<int32_t>& ids) {
  std::vector<int32_t> theirs = exported_layer_ids(f, ids);
  for (int32_t& id : theirs) id -= 1;
  if (f != ExportFormat::Speculators && *std::min_element(theirs.begin(), theirs.end()) < 0)
    return "none of its settings names capture id 0, the embedding output (docs/TRAINERS.md)";
  switch (f) {
    case ExportFormat::Speculators:
      return fmt::format("--target-layer-ids {}", fmt::join(ids, " "));
    case ExportFormat::SpecForge:
      // Its command line's overrides take no list for a key the config leaves unset: the YAML's.
      return fmt::format("model.aux_hidden_state_layer_ids: [{}] in the run config's YAML", fmt::join(theirs, ", "));
    case ExportFormat::ModelOpt:
      return fmt::format("eagle.eagle_architecture_config.eagle_aux_hidden_state_layer_ids=[{}]",
                         fmt::join(theirs, ","));
  }
  E3_THROW(ErrorKind::Internal, "unknown export format {}", static_cast<int>(f));
}

// Refuses a SRC the format cannot be made from, naming the extraction to rerun; warns about
// capture ids that are not the trainers' default.
void check_conventions(ExportFormat f, const Source& s, const fs::path& src) {
  const io::ShardDescription& d = s.description;
  const int64_t L = d.num_hidden_layers;
  const std::vector<int32_t> preset{2, static_cast<int32_t>(L / 2), static_cast<int32_t>(L - 3)};
  const FinalNeed need = final_needed(f, d.final_mode);
  E3_REQUIRE(!need.dataset.empty(), ErrorKind::Usage,
             "export --format {}: {} stores the final state {} (--final {}); {} trains on it {} the final norm: rerun "
             "the extraction with --final {} (or --final both, which serves every trainer) into a new --out",
             name_of(f), src.string(), d.final_mode == "none" ? "not at all" : d.final_mode, d.final_mode,
             name_of(f), std::string(need.norm) == "pre-norm" ? "before" : "after", need.norm);
  // The default [2, L/2, L-3] exists from 4 layers on; below, the advice names what is possible.
  const std::string rerun = L >= 4 ? fmt::format("--layers {} (the EAGLE-3 default for {} layers)", fmt::join(preset, ","), L)
                                   : fmt::format("three --layers below {} (the EAGLE-3 default, [2, L/2, L-3], needs 4 "
                                                 "layers or more)",
                                                 L);
  E3_REQUIRE(d.layer_ids.size() == 3, ErrorKind::Usage,
             "export --format {}: {} holds {} capture ids [{}]; EAGLE-3 trainers take exactly three: rerun the "
             "extraction with {}",
             name_of(f), src.string(), d.layer_ids.size(), fmt::join(d.layer_ids, ", "), rerun);
  if (f == ExportFormat::ModelOpt) {
    std::vector<int32_t> distinct = d.layer_ids;
    std::sort(distinct.begin(), distinct.end());
    E3_REQUIRE(std::adjacent_find(distinct.begin(), distinct.end()) == distinct.end(), ErrorKind::Usage,
               "export --format modelopt: {} captured ids [{}], a layer twice; ModelOpt takes each layer once (its "
               "layer ids are a set): rerun the extraction with three different --layers",
               src.string(), fmt::join(d.layer_ids, ", "));
  }
  const std::vector<int32_t> written = exported_layer_ids(f, d.layer_ids);
  if (written != d.layer_ids)
    spdlog::info("export: aux_hidden_states hold capture ids [{}] in ascending order, as ModelOpt orders its layers (it "
                 "sorts its layer ids), not in SRC's --layers order [{}]",
                 fmt::join(written, ", "), fmt::join(d.layer_ids, ", "));
  if (written != preset)
    spdlog::warn("export: {} captured ids [{}], not the EAGLE-3 default [{}] of a {}-layer model that {} assumes: "
                 "tell the trainer these layers: {}",
                 src.string(), fmt::join(d.layer_ids, ", "), fmt::join(preset, ", "), L, name_of(f),
                 trainer_layers_setting(f, d.layer_ids));
  E3_REQUIRE(storage_codec_named(d.dtype) != nullptr, ErrorKind::Verify, "{}: unknown dtype '{}'", src.string(),
             d.dtype);
}

void write_json_file(const fs::path& path, const nlohmann::json& j) {
  const std::string text = j.dump(2) + "\n";
  io::TempFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

fs::path done_marker(const fs::path& dest, int64_t shard_index) {
  return dest / kStateDir / fmt::format("done-{:06d}", shard_index);
}
fs::path rows_fragment(const fs::path& dest, int64_t shard_index) {
  return dest / kStateDir / fmt::format("rows-{:06d}.jsonl", shard_index);
}

// ---- one sample

// Memory reused from sample to sample, grown to the largest asked for and never zeroed (what is
// asked for is written whole before it is read), in huge pages (io/page_memory.h). For one
// dataset's stored bytes (the pass copies SRC into it out of the page cache, which ran at 0.7
// GB/s into fresh 4 KiB pages; issue 21).
struct ByteBuffer {
  io::PageMemory memory;
  size_t capacity() const { return memory.size(); }  // 0 when empty or moved from
  unsigned char* data() const { return memory.data(); }
  unsigned char* fit(size_t n) {
    if (n > capacity()) memory = io::PageMemory(n);
    return memory.data();
  }
};


// ExportStages as the threads add to it, in nanoseconds.
struct StageCounters {
  io::ShardReadStages src;  // reading SRC and verify's checks
  std::atomic<uint64_t> queued{0}, convert{0}, write{0}, sync{0};
};

// The stored bytes of a dataset of the sample being written, wherever they were read to.
using DatasetBytes = std::function<const void*(const io::StoredDataset&)>;

// A dataset's stored states read as bf16 rows of H values: the stored bits themselves (bf16) or
// decoded row by row by `codec` from `rows`.
struct StoredStates {
  const uint16_t* bf16 = nullptr;  // set when stored as bf16
  const StorageCodec* codec = nullptr;
  StoredRows rows;
  // Row r's H values as bf16 bits into dst.
  void row(size_t r, int64_t H, uint16_t* dst) const {
    if (bf16) {
      std::memcpy(dst, bf16 + r * static_cast<size_t>(H), static_cast<size_t>(H) * sizeof(uint16_t));
      return;
    }
    StoredRows one = rows;
    for (size_t p = 0; p < StoredRows::kMaxParts; ++p)
      if (one.part[p]) one.part[p] += r * one.stride[p];
    one.count = 1;
    codec->decode_bf16(one, H, dst);
  }
};

// Writes row r of an exported tensor's rows (H bf16 values) to dst.
using RowOf = std::function<void(size_t r, uint16_t* dst)>;

// Lays out what the format writes of one sample from its datasets' stored bytes. Its buffers
// grow to the largest sample seen and are reused: memory is bounded by one sample per thread.
class SampleExporter {
 public:
  SampleExporter(const ExportOptions& o, const io::ShardDescription& d, const std::vector<int64_t>& stored,
                 StageCounters& stages)
      : stages_(stages),
        o_(o),
        d_(d),
        stored_(stored),
        final_(final_needed(o.format, d.final_mode).dataset),
        order_(exported_capture_order(o.format, d.layer_ids)),
        reorder_(!std::is_sorted(order_.begin(), order_.end())) {}

  // The datasets of `s` that write() reads: its ids and mask, and each stored part of its
  // hidden states and of the final state the format trains on (those present).
  std::vector<const io::StoredDataset*> wanted(const io::StoredSample& s) const {
    std::vector<const io::StoredDataset*> out;
    for (const char* name : {"input_ids", "loss_mask"})
      if (const io::StoredDataset* d = s.find(name)) out.push_back(d);
    for (const std::string& state : {std::string("hidden_states"), final_}) {
      const io::StoredDataset* d = s.find(state);
      if (!d) continue;
      out.push_back(d);
      if (d->element == DType::I32 || d->element == DType::U8) continue;
      const std::vector<StoredPart>& parts = storage_codec(d->element).parts();
      for (size_t p = 1; p < parts.size(); ++p)
        if (const io::StoredDataset* part = s.find(state + parts[p].suffix)) out.push_back(part);
    }
    return out;
  }

  // Writes the sample's file into DEST under its temporary name, appended to `files` for the
  // caller to commit once the shard has passed; returns its bytes.
  //
  // States stored as bf16 and written in SRC's layout go from SRC's bytes to the file. Any other
  // (decoded from fp8, fp16 or fp32, or rows rearranged) are made row by row where the writer puts
  // them (io::TensorFill): no whole-tensor buffer that the writer then copies, which was two of an
  // fp8 export's three passes over memory (issue 21).
  uint64_t write(const io::StoredSample& s, const DatasetBytes& bytes, const std::string& where,
                 std::string* rows_jsonl, std::vector<io::TempFile>* files) {
    const std::string sw = fmt::format("{} sample {:08d}", where, s.index);
    const int64_t T = s.tokens, K = static_cast<int64_t>(d_.layer_ids.size()), H = d_.hidden_size;
    const io::StoredDataset& hs = need(s, "hidden_states", {uint64_t(T), uint64_t(K), uint64_t(H)}, sw);
    const io::StoredDataset& fin = need(s, final_, {uint64_t(T), uint64_t(H)}, sw);
    ScopeTimer convert_timer(&stages_.convert);
    read_ints(need(s, "input_ids", {uint64_t(T)}, sw), bytes, ids_, sw);
    read_ints(need(s, "loss_mask", {uint64_t(T)}, sw), bytes, mask_, sw);
    const StoredStates states = stored_states(s, hs, bytes, sw);
    const StoredStates final_rows = stored_states(s, fin, bytes, sw);
    std::atomic<uint64_t> filling{0};  // the writer's time inside the fills: conversion, not writing

    using io::TensorElement;
    const io::TensorRef input_ids{"input_ids", TensorElement::I64, {T}, ids_.data()};
    const io::TensorRef loss_mask{"loss_mask", TensorElement::I64, {T}, mask_.data()};
    // `rows` x H bf16 states: row r is row_of(r).
    const auto states_tensor = [&](const char* name, std::vector<int64_t> shape, RowOf row_of,
                                   const StoredStates* as_stored) {
      io::TensorRef t{name, TensorElement::BF16, std::move(shape), nullptr};
      if (as_stored && as_stored->bf16)
        t.data = as_stored->bf16;
      else
        t.fill = fill_rows(H, std::move(row_of), &filling);
      return t;
    };
    const RowOf hs_row = [&](size_t r, uint16_t* dst) { states.row(r, H, dst); };
    const RowOf final_row = [&](size_t r, uint16_t* dst) { final_rows.row(r, H, dst); };
    fs::path path;
    switch (o_.format) {
      case ExportFormat::Speculators: {
        // [T, K + 1, H]: each token's captures, then its pre-norm final state.
        const RowOf interleaved = [&](size_t r, uint16_t* dst) {
          const size_t t = r / static_cast<size_t>(K + 1), j = r % static_cast<size_t>(K + 1);
          if (j < static_cast<size_t>(K))
            states.row(t * static_cast<size_t>(K) + j, H, dst);
          else
            final_rows.row(t, H, dst);
        };
        const auto row = static_cast<int64_t>(std::lower_bound(stored_.begin(), stored_.end(), s.index) - stored_.begin());
        path = o_.dest / speculators_file(row);
        convert_timer.stop();
        {
          ScopeTimer t(&stages_.write);
          // The widest element first, so that both tensors start 8-byte aligned.
          io::write_safetensors(path,
                                {{"token_ids", TensorElement::I64, {T}, ids_.data()},
                                 states_tensor("hidden_states", {T, K + 1, H}, interleaved, nullptr)},
                                {{"format", "pt"}}, &direct_, files);
        }
        append_row(*rows_jsonl, T);
        break;
      }
      case ExportFormat::SpecForge: {
        path = o_.dest / specforge_file(s.index);
        convert_timer.stop();
        ScopeTimer t(&stages_.write);
        fs::create_directories(path.parent_path());
        io::write_torch_dict(path,
                             {{"input_ids", input_ids},
                              {"loss_mask", loss_mask},
                              {"aux_hidden_state", states_tensor("", {1, T, K * H}, hs_row, &states)},
                              {"hidden_state", states_tensor("", {1, T, H}, final_row, &final_rows)}},
                             &direct_, files);
        break;
      }
      case ExportFormat::ModelOpt: {
        // Each token's K captures in ModelOpt's (ascending) layer order.
        const RowOf reordered = [&](size_t r, uint16_t* dst) {
          const size_t t = r / static_cast<size_t>(K), j = r % static_cast<size_t>(K);
          states.row(t * static_cast<size_t>(K) + order_[j], H, dst);
        };
        const std::string stem = modelopt_file_stem(s.index, s.id ? &*s.id : nullptr);
        path = o_.dest / (stem + ".pt");
        convert_timer.stop();
        ScopeTimer t(&stages_.write);
        io::write_torch_dict(
            path,
            {{"input_ids", input_ids},
             {"hidden_states", states_tensor("", {T, H}, final_row, &final_rows)},
             {"aux_hidden_states", reorder_ ? states_tensor("", {T, K * H}, reordered, nullptr)
                                            : states_tensor("", {T, K * H}, hs_row, &states)},
             {"loss_mask", loss_mask},
             {"conversation_id", s.id ? *s.id : fmt::format("{:08d}", s.index)}},
            &direct_, files);
        break;
      }
    }
    // The fills ran inside the write's timer: their time moves to conversion.
    const uint64_t filled = filling.load(std::memory_order_relaxed);
    stages_.write.fetch_sub(filled, std::memory_order_relaxed);
    stages_.convert.fetch_add(filled, std::memory_order_relaxed);
    return files->empty() ? 0 : files->back().size();
  }

 private:
  static const io::StoredDataset& need(const io::StoredSample& s, const std::string& name,
                                       const std::vector<uint64_t>& dims, const std::string& sw) {
    const io::StoredDataset* d = s.find(name);
    E3_REQUIRE(d != nullptr, ErrorKind::Verify, "{}: no {}", sw, name);
    E3_REQUIRE(d->dims == dims, ErrorKind::Verify, "{}: {} has shape [{}], expected [{}]", sw, name,
               fmt::join(d->dims, ", "), fmt::join(dims, ", "));
    return *d;
  }

  static const unsigned char* bytes_of(const DatasetBytes& bytes, const io::StoredDataset& d, const std::string& sw) {
    const void* p = bytes(d);
    E3_REQUIRE(p != nullptr || d.bytes == 0, ErrorKind::Internal, "{}: {} was not read", sw, d.name);
    return static_cast<const unsigned char*>(p);
  }

  void read_ints(const io::StoredDataset& d, const DatasetBytes& bytes, std::vector<int64_t>& out,
                 const std::string& sw) {
    out.resize(d.dims[0]);
    if (d.element == DType::I32) {
      const unsigned char* raw = bytes_of(bytes, d, sw);
      for (size_t i = 0; i < out.size(); ++i) {
        int32_t v;
        std::memcpy(&v, raw + 4 * i, 4);
        out[i] = v;
      }
    } else {
      E3_REQUIRE(d.element == DType::U8, ErrorKind::Verify, "{}: {} is not int32 or uint8", sw, d.name);
      const unsigned char* raw = bytes_of(bytes, d, sw);
      for (size_t i = 0; i < out.size(); ++i) out[i] = raw[i];
    }
  }

  // The stored rows of `d` (as many as its dimensions but the last, of H values each) and how
  // to read them as bf16 bits: bf16 as stored (no copy), else decoded by the codec of the type
  // `d` is stored in, rounded to nearest even from fp16/fp32/fp8 (fp8: the code's value times
  // its row's scale, in float32, as the README defines it).
  StoredStates stored_states(const io::StoredSample& s, const io::StoredDataset& d, const DatasetBytes& bytes,
                             const std::string& sw) {
    const StorageCodec* codec = d.element == DType::I32 || d.element == DType::U8 ? nullptr : &storage_codec(d.element);
    E3_REQUIRE(codec != nullptr, ErrorKind::Verify, "{}: {} is not stored as states", sw, d.name);
    const std::vector<StoredPart>& parts = codec->parts();
    const std::vector<uint64_t> rows(d.dims.begin(), d.dims.end() - 1);
    const int64_t H = static_cast<int64_t>(d.dims.back());
    size_t count = 1;
    for (uint64_t r : rows) count *= r;
    StoredStates out;
    if (parts.size() == 1 && parts.front().element == DType::BF16) {
      out.bf16 = reinterpret_cast<const uint16_t*>(bytes_of(bytes, d, sw));  // the stored bits are the answer
      return out;
    }
    std::vector<const void*> part_data;
    for (size_t p = 0; p < parts.size(); ++p) {
      const io::StoredDataset& part = p == 0 ? d : need(s, d.name + parts[p].suffix, parts[p].dims(rows, H), sw);
      E3_REQUIRE(part.element == parts[p].element, ErrorKind::Verify, "{}: {} is not stored as states", sw, part.name);
      part_data.push_back(bytes_of(bytes, part, sw));
    }
    out.codec = codec;
    out.rows = codec->split(part_data, count, H);
    return out;
  }

  // A TensorFill of `row_of`'s rows of H bf16 values, laid end to end. A piece that begins or
  // ends inside a row gets that row through row_scratch_.
  io::TensorFill fill_rows(int64_t H, RowOf row_of, std::atomic<uint64_t>* filling) {
    return [this, H, row_of = std::move(row_of), filling](uint64_t offset, unsigned char* dst, size_t n) {
      ScopeTimer timer(filling);
      const size_t row_bytes = static_cast<size_t>(H) * sizeof(uint16_t);
      if (row_scratch_.size() < static_cast<size_t>(H)) row_scratch_.resize(static_cast<size_t>(H));
      uint16_t* scratch = row_scratch_.data();
      while (n > 0) {
        const size_t r = static_cast<size_t>(offset / row_bytes), in = static_cast<size_t>(offset % row_bytes);
        const size_t take = std::min(n, row_bytes - in);
        if (take == row_bytes && reinterpret_cast<uintptr_t>(dst) % alignof(uint16_t) == 0) {
          row_of(r, reinterpret_cast<uint16_t*>(dst));
        } else {
          row_of(r, scratch);
          std::memcpy(dst, reinterpret_cast<const unsigned char*>(scratch) + in, take);
        }
        offset += take;
        dst += take;
        n -= take;
      }
    };
  }

  void append_row(std::string& out, int64_t T) const {
    out += "{\"input_ids\":[";
    for (size_t i = 0; i < ids_.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? "," : "", ids_[i]);
    out += "],\"loss_mask\":[";
    for (size_t i = 0; i < mask_.size(); ++i) out += i ? (mask_[i] ? ",1" : ",0") : (mask_[i] ? "1" : "0");
    fmt::format_to(std::back_inserter(out), "],\"seq_len\":{}}}\n", T);
  }

  StageCounters& stages_;
  const ExportOptions& o_;
  const io::ShardDescription& d_;
  const std::vector<int64_t>& stored_;
  const std::string final_;  // the dataset of the final state this format trains on
  const std::vector<size_t> order_;  // exported_capture_order: the captures in the order written
  const bool reorder_;               // not SRC's order: written through a row map
  std::vector<int64_t> ids_, mask_;
  std::vector<uint16_t> row_scratch_;  // one row of a fill, for a piece that splits it
  io::DirectBuffer direct_;  // the files go to DEST past the page cache, through this
};

void make_directory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  E3_REQUIRE(!ec, ErrorKind::Output, "export: cannot create {}: {}", dir.string(), ec.message());
}

// One export at a time writes DEST: a second one would take the first's files for an interrupted
// run's, resume it and remove its temporaries.
DirLock lock_export_dest(const fs::path& dest) {
  LockOptions options;
  options.what = "export DEST";
  options.rule = "one export at a time writes a DEST";
  options.instead = "give another DEST";
  return DirLock::acquire(dest, kLockFile, options);
}

// What the shards not yet exported will write: every token's K captures and final state in
// bf16 and its ids and mask as int64, a file header per sample, and speculators' data.jsonl row.
void check_export_space(const ExportOptions& o, const Source& s) {
  const auto K = static_cast<uint64_t>(s.description.layer_ids.size());
  const auto H = static_cast<uint64_t>(s.description.hidden_size);
  uint64_t need = 0;
  for (const io::CommittedShard& c : s.shards) {
    if (fs::exists(done_marker(o.dest, c.shard_index))) continue;
    need += static_cast<uint64_t>(c.num_tokens) * ((K + 1) * H * 2 + 24) + c.samples.size() * 4096;
  }
  struct statvfs st {};
  E3_REQUIRE(::statvfs(o.dest.c_str(), &st) == 0, ErrorKind::Output, "export: cannot query the free space of {}: {}",
             o.dest.string(), std::strerror(errno));
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  E3_REQUIRE(free_bytes >= need, ErrorKind::Output,
             "export: DEST {} has {:.2f} GB free, but this export will write about {:.2f} GB: free space or give "
             "another DEST (--no-space-check skips this check, e.g. where a quota is not what statvfs reports)",
             o.dest.string(), free_bytes / 1e9, need / 1e9);
}

// Makes what was written so far durable before a shard is marked done, so that a resume after
// a crash never trusts files the page cache had not yet written.
void sync_file_system(const fs::path& dir) {
  io::Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  E3_REQUIRE(fd.get() >= 0 && ::syncfs(fd.get()) == 0, ErrorKind::Output, "syncing {}: {}", dir.string(),
             std::strerror(errno));
}

// ---- one shard

// The buffer of `free` to hold `need` bytes: the smallest that does, else the largest (to be
// grown); free.size() when there is none.
size_t best_fit(const std::vector<ByteBuffer>& free, size_t need) {
  size_t pick = free.size();
  for (size_t k = 0; k < free.size(); ++k) {
    if (pick == free.size()) {
      pick = k;
      continue;
    }
    const size_t c = free[k].capacity(), best = free[pick].capacity();
    if (best >= need ? c >= need && c < best : c > best) pick = k;
  }
  return pick;
}

// What one exporting thread reuses from shard to shard: the sample layout's buffers and the
// datasets' bytes.
struct ExportContext {
  ExportContext(const ExportOptions& o, const Source& s, StageCounters& stages)
      : exporter(o, s.description, s.stored, stages) {}
  SampleExporter exporter;
  std::vector<ByteBuffer> free;  // buffers of samples written
};

// The contexts of the threads, each taken by the shard being exported and given back after.
class ContextPool {
 public:
  ContextPool(const ExportOptions& o, const Source& s, StageCounters& stages) : o_(o), s_(s), stages_(stages) {}
  std::unique_ptr<ExportContext> take() {
    std::lock_guard<std::mutex> lock(m_);
    if (free_.empty()) return std::make_unique<ExportContext>(o_, s_, stages_);
    std::unique_ptr<ExportContext> c = std::move(free_.back());
    free_.pop_back();
    return c;
  }
  void give_back(std::unique_ptr<ExportContext> c) {
    std::lock_guard<std::mutex> lock(m_);
    free_.push_back(std::move(c));
  }

 private:
  const ExportOptions& o_;
  const Source& s_;
  StageCounters& stages_;
  std::mutex m_;
  std::vector<std::unique_ptr<ExportContext>> free_;
};

// What every shard's export adds to, shared by the threads.
struct ExportTotals {
  std::atomic<int64_t> shards_done{0}, samples{0};
  std::atomic<uint64_t> written{0}, read{0};
};

// Exports one shard from the bytes verify's one read places (io::ShardConsumer): each sample's
// file is written as soon as its datasets are in, under its temporary name, and published
// (renamed, synced, the shard marked done) only once the whole shard has passed verify.
//
// The writes go to write-behind threads of the shard's own, so that the reading thread reads,
// hashes and checks the next samples while samples' files go out: one after the other, the two
// took about as long each, and an export ran at half the disk's speed (issue 21). With one
// writer a shard kept one write in the disk's queue; several keep it full where there are fewer
// shards than cores. Each writer has its own context (exporter, files); once a sample is handed
// over, only the writer that took it touches its placed_, rows_ and written_ entries until
// passed() or the destructor has joined the writers; the queue and the free list are under m_.
class ShardExport final : public io::ShardConsumer {
 public:
  ShardExport(const ExportOptions& o, const Source& s, const io::CommittedShard& c, ContextPool& pool,
              StageCounters& stages, ExportTotals& totals, size_t writers)
      : o_(o), s_(s), c_(c), pool_(pool), stages_(stages), totals_(totals), files_(std::max<size_t>(1, writers)) {
    for (size_t w = 0; w < files_.size(); ++w) contexts_.push_back(pool.take());
    for (size_t w = 1; w < contexts_.size(); ++w) {  // every buffer kept on the one free list
      std::vector<ByteBuffer>& kept = contexts_[w]->free;
      std::move(kept.begin(), kept.end(), std::back_inserter(free_list()));
      kept.clear();
    }
  }
  // Without passed(): the samples still queued are dropped (their files would be removed
  // anyway), a writer's error with them; files_ not committed are removed.
  ~ShardExport() override {
    stop_writers(true);
    for (std::unique_ptr<ExportContext>& c : contexts_) pool_.give_back(std::move(c));
  }

  std::vector<Want> plan(const fs::path& path) override {
    where_ = path.string();
    layout_ = io::read_shard_layout(path);
    E3_REQUIRE(layout_.description.run_fingerprint == s_.description.run_fingerprint, ErrorKind::Verify,
               "{}: from another run than the first shard", where_);
    std::vector<Want> wants;
    for (size_t g = 0; g < layout_.samples.size(); ++g) {
      first_want_.push_back(wants.size());
      for (const io::StoredDataset* d : contexts_.front()->exporter.wanted(layout_.samples[g])) {
        wants.push_back({d->offset, d->bytes, g});
        datasets_.push_back(d);
      }
    }
    first_want_.push_back(wants.size());
    placed_.resize(wants.size());
    lent_.assign(wants.size(), nullptr);
    written_.assign(layout_.samples.size(), 0);
    rows_.assign(layout_.samples.size(), {});
    return wants;
  }

  // The smallest free buffer that holds the dataset, else the largest (grown). Taking any
  // buffer, as before, gave a sample's states the buffer of some token ids and allocated anew
  // almost every time: fresh pages, faulted in by the read, which ran at 0.7 GB/s from the
  // page cache (issue 21).
  void* place(size_t i) override {
    const size_t need = std::max<uint64_t>(datasets_[i]->bytes, 1);
    ByteBuffer b;
    {
      std::lock_guard<std::mutex> lock(m_);
      std::vector<ByteBuffer>& free = free_list();
      const size_t pick = best_fit(free, need);
      if (pick < free.size()) {
        std::swap(free[pick], free.back());
        b = std::move(free.back());
        free.pop_back();
      }
    }
    b.fit(need);
    placed_[i] = std::move(b);
    return placed_[i].data();
  }

  // A mapped shard's bytes are converted where they lie: no copy out of the page cache, which
  // was the largest share of the reading thread's time, the one that set the pace (issue 21).
  bool lend(size_t i, const void* bytes) override {
    lent_[i] = static_cast<const unsigned char*>(bytes);
    return true;
  }

  // Hands the sample to the writers, waiting while one more than there are writers are queued
  // or being written (what bounds the memory: their buffers come back to the free list once
  // written). A write that failed is rethrown here, so that verify stops giving this shard
  // samples.
  void ready(size_t group) override {
    std::unique_lock<std::mutex> lock(m_);
    if (writers_.empty())
      for (size_t w = 0; w < files_.size(); ++w) writers_.emplace_back([this, w] { work(w); });
    {
      ScopeTimer t(&stages_.queued);
      cv_.wait(lock, [&] { return in_flight_ < files_.size() + 1 || error_; });
    }
    if (error_) std::rethrow_exception(error_);
    queue_.push_back(group);
    ++in_flight_;
    cv_.notify_all();
  }

  void passed() override {
    stop_writers(false);
    if (error_) std::rethrow_exception(error_);
    // A sample none of whose datasets was wanted is written now: its missing datasets are the error.
    for (size_t g = 0; g < layout_.samples.size(); ++g)
      if (!written_[g])
        write(layout_.samples[g], [](const io::StoredDataset&) -> const void* { return nullptr; }, 0);
    {
      ScopeTimer t(&stages_.write);
      for (std::vector<io::TempFile>& files : files_)
        for (io::TempFile& f : files) f.commit();
      if (o_.format == ExportFormat::Speculators) {
        // In sample order, whatever order the file holds them in (the shard's rows are consecutive).
        io::TempFile fragment(rows_fragment(o_.dest, c_.shard_index));
        for (const std::string& row : rows_) fragment.write(row.data(), row.size());
        fragment.commit();
      }
    }
    ScopeTimer t(&stages_.sync);
    sync_file_system(o_.dest);
    io::TempFile(done_marker(o_.dest, c_.shard_index)).commit();
    ++totals_.shards_done;
  }

 private:
  // The buffers of samples written, shared by the writers (under m_); kept in the first
  // context so that the next shard exported with it starts with them.
  std::vector<ByteBuffer>& free_list() { return contexts_.front()->free; }

  // The buffers of sample `group`'s copied datasets back to the free list (under m_).
  void give_back(size_t group) {
    for (size_t i = first_want_[group]; i < first_want_[group + 1]; ++i)
      if (placed_[i].capacity() > 0) free_list().push_back(std::move(placed_[i]));
  }

  // Writer w: the queued samples in the order they were handed over, until told to stop; after
  // a failed write no writer writes anything more.
  void work(size_t w) {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      const size_t group = queue_.front();
      queue_.pop_front();
      const bool write_it = !error_;
      lock.unlock();
      std::exception_ptr error;
      if (write_it) try {
          write_placed(group, w);
        } catch (...) {
          error = std::current_exception();
        }
      lock.lock();
      give_back(group);
      if (error && !error_) error_ = error;
      --in_flight_;
      cv_.notify_all();
    }
  }

  // Waits for the queued samples to be written (`drop`: only for those being written), then
  // joins the writers. A writer's error stays in error_.
  void stop_writers(bool drop) noexcept {
    {
      std::unique_lock<std::mutex> lock(m_);
      if (writers_.empty()) return;
      if (drop) {
        for (const size_t group : queue_) give_back(group);
        in_flight_ -= queue_.size();
        queue_.clear();
      }
      stop_ = true;
      cv_.notify_all();
    }
    for (std::thread& t : writers_) t.join();
    writers_.clear();
  }

  // On writer w: the sample's file from its placed buffers.
  void write_placed(size_t group, size_t w) {
    const size_t first = first_want_[group], end = first_want_[group + 1];
    const auto bytes = [&](const io::StoredDataset& d) -> const void* {
      for (size_t i = first; i < end; ++i)
        if (datasets_[i] == &d) return lent_[i] ? lent_[i] : placed_[i].data();
      return nullptr;
    };
    write(layout_.samples[group], bytes, w);
  }

  void write(const io::StoredSample& sample, const DatasetBytes& bytes, size_t w) {
    const auto g = static_cast<size_t>(&sample - layout_.samples.data());
    totals_.written += contexts_[w]->exporter.write(sample, bytes, where_, &rows_[g], &files_[w]);
    ++totals_.samples;
    written_[g] = 1;
  }

  const ExportOptions& o_;
  const Source& s_;
  const io::CommittedShard& c_;
  ContextPool& pool_;
  StageCounters& stages_;
  ExportTotals& totals_;
  std::vector<std::unique_ptr<ExportContext>> contexts_;  // one per writer
  std::string where_;
  io::ShardLayout layout_;
  std::vector<const io::StoredDataset*> datasets_;  // of each want, in plan's order
  std::vector<size_t> first_want_;                  // sample g's wants: [first_want_[g], first_want_[g + 1])
  std::vector<ByteBuffer> placed_;                  // each want's bytes, when copied
  std::vector<const unsigned char*> lent_;          // each want's bytes in SRC's mapping, when lent
  std::vector<char> written_;                       // each sample's file is in files_ (a byte each: writers
                                                    // set different samples' at once)
  std::vector<std::vector<io::TempFile>> files_;    // each writer's samples' files, closed, not yet renamed
  std::vector<std::string> rows_;                   // speculators' data.jsonl row of each sample

  // The writers and what they share with the reading thread (under m_).
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;  // samples handed over, not yet taken by a writer
  size_t in_flight_ = 0;      // samples handed over whose buffers are not yet back
  bool stop_ = false;         // no more samples come: the writers return once queue_ is empty
  std::exception_ptr error_;  // the first write that failed
  std::vector<std::thread> writers_;  // started by the first ready(); joined before anything they use goes
};

// --skip-verify: the same export without verify's checks, each wanted dataset read by pread
// in file order.
void export_unchecked(const fs::path& path, ShardExport& e, std::mutex& hdf5, StageCounters& stages,
                      ExportTotals& totals) {
  std::vector<io::ShardConsumer::Want> wants;
  {
    ScopeTimer t(&stages.src.metadata);
    std::lock_guard<std::mutex> lock(hdf5);
    wants = e.plan(path);
  }
  io::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  E3_REQUIRE(fd.get() >= 0, ErrorKind::Verify, "{}: {}", path.string(), std::strerror(errno));
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<size_t> order(wants.size()), left;
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return wants[a].offset < wants[b].offset; });
  for (const auto& w : wants) {
    if (left.size() <= w.group) left.resize(w.group + 1, 0);
    ++left[w.group];
  }
  for (const size_t i : order) {
    void* p = e.place(i);
    {
      ScopeTimer t(&stages.src.read);
      io::pread_exact(fd.get(), p, wants[i].bytes, wants[i].offset, ErrorKind::Output, path.string());
    }
    totals.read += wants[i].bytes;
    if (--left[wants[i].group] == 0) e.ready(wants[i].group);
  }
  e.passed();
}

}  // namespace

std::string modelopt_file_stem(int64_t index, const std::string* id) {
  if (!id || id->empty()) return fmt::format("{:08d}", index);
  std::string out;
  for (unsigned char c : *id) {
    // A leading '.' would hide the file; '/' and control bytes never pass.
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '-' || (c == '.' && !out.empty());
    if (keep) out += static_cast<char>(c);
    else fmt::format_to(std::back_inserter(out), "%{:02X}", c);
  }
  // "%3" never comes out of the loop above (digits are kept), so this name is no other id's.
  if (out.size() == 8 && std::all_of(out.begin(), out.end(), [](char c) { return c >= '0' && c <= '9'; }))
    out = fmt::format("%{:02X}{}", static_cast<unsigned char>(out[0]), out.substr(1));
  constexpr size_t kMaxStem = 200;  // file systems allow 255 bytes, with ".pt" and a temporary suffix
  if (out.size() > kMaxStem) {
    size_t cut = 180;  // not inside a %HH
    if (out[cut - 1] == '%') cut -= 1;
    else if (out[cut - 2] == '%') cut -= 2;
    ContentHash h;
    h.update(id->data(), id->size());
    out = out.substr(0, cut) + "~" + h.hex().substr(0, 16);  // '~' is escaped above: no short name has it
  }
  return out;
}

std::string speculators_file(int64_t row) { return fmt::format("hidden_states/hs_{}.safetensors", row); }

std::string specforge_file(int64_t index) {
  const int64_t g = index / kSpecForgeGroup * kSpecForgeGroup;
  return fmt::format("rows_{}-{}/data_{}.ckpt", g, g + kSpecForgeGroup, index);
}

std::vector<size_t> exported_capture_order(ExportFormat format, const std::vector<int32_t>& layer_ids) {
  std::vector<size_t> order(layer_ids.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  if (format == ExportFormat::ModelOpt)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return layer_ids[a] < layer_ids[b]; });
  return order;
}

TrainerSeqLimit trainer_seq_limit(ExportFormat format) {
  switch (format) {  // the defaults, read in each trainer's code (docs/TRAINERS.md, "Long samples")
    case ExportFormat::Speculators:
      return {"speculators'", "--total-seq-len", " ", 8192};
    case ExportFormat::SpecForge:
      return {"SpecForge's", "data.max_length", "=", 2048};
    case ExportFormat::ModelOpt:
      return {"ModelOpt's", "training.training_seq_len", "=", 2048};
  }
  E3_THROW(ErrorKind::Internal, "unknown export format {}", static_cast<int>(format));
}

LengthReport length_report(ExportFormat format, const std::vector<int64_t>& lengths) {
  LengthReport r;
  r.limit = trainer_seq_limit(format);
  r.samples = static_cast<int64_t>(lengths.size());
  for (const int64_t n : lengths) {
    r.longer += n > r.limit.tokens ? 1 : 0;
    r.longest = std::max(r.longest, n);
  }
  return r;
}

std::string length_message(const LengthReport& r) {
  const TrainerSeqLimit& l = r.limit;
  if (r.longer == 0)
    return fmt::format("the longest of the {} samples has {} tokens, within {} default {} = {}: none is cut", r.samples,
                       r.longest, l.trainer, l.key, l.tokens);
  return fmt::format("{} of {} samples are longer than {} default {} = {}, which cuts them to {} tokens: pass "
                     "{}{}{} (the longest sample) or more to train on them whole",
                     r.longer, r.samples, l.trainer, l.key, l.tokens, l.tokens, l.key, l.assign, r.longest);
}

ExportStart prepare_export(const ExportOptions& o, std::optional<DirLock>* lock) {
  const Source s = load_source(o.src);
  check_conventions(o.format, s, o.src);
  check_draft_vocab_size(o, s);
  const nlohmann::json identity = export_identity(o.format, s.manifests.front(), o.src);
  std::error_code ec;
  const fs::path src = fs::weakly_canonical(o.src, ec), dest = fs::weakly_canonical(o.dest, ec);
  const auto [a, b] = std::mismatch(src.begin(), src.end(), dest.begin(), dest.end());
  E3_REQUIRE(a != src.end(), ErrorKind::Usage, "export: DEST {} is inside SRC {}: give a directory outside it",
             o.dest.string(), o.src.string());
  fs::create_directories(o.dest, ec);
  E3_REQUIRE(!ec && fs::is_directory(o.dest), ErrorKind::Output, "export: cannot create {}: {}", o.dest.string(),
             ec.message());
  // Taken before anything is read of DEST's state that the export would change; a finished DEST
  // with nothing to do is not written (it may be read-only), so it needs none.
  const auto take_lock = [&] {
    if (lock) lock->emplace(lock_export_dest(o.dest));
  };
  if (fs::exists(o.dest / kDoneFile)) {
    nlohmann::json done = read_json_file(o.dest / kDoneFile, ErrorKind::Output, "export: ");
    for (const auto& [key, value] : identity.items())
      E3_REQUIRE(done.contains(key) && done[key] == value, ErrorKind::Output,
                 "export: {} already holds an export of other data or in another format ({} differs): give a new DEST",
                 o.dest.string(), key);
    // The states are there; a draft vocabulary of another size costs only its files.
    const int64_t target_vocab = target_vocab_size(s, nullptr);
    const nlohmann::json& had = done.contains("draft_vocab") ? done["draft_vocab"] : nlohmann::json();
    const bool same = target_vocab == 0 ? had.is_null()
                                        : had.is_object() && had.value("size", int64_t{0}) == draft_vocab_size(o, target_vocab);
    if (same) return ExportStart::NothingToDo;
    take_lock();
    done["draft_vocab"] = export_draft_vocab(o, s, tally_source(o.src, s));
    write_json_file(o.dest / kDoneFile, done);
    return ExportStart::VocabRewritten;
  }
  take_lock();
  const fs::path state = o.dest / kStateDir / kStateFile;
  if (fs::exists(state)) {
    nlohmann::json was = read_json_file(state, ErrorKind::Output, "export: ");
    E3_REQUIRE(was == identity, ErrorKind::Output,
               "export: {} holds an unfinished export of other data or in another format: give a new DEST, or "
               "remove it",
               o.dest.string());
    // The temporary files of the interrupted run: no trainer reads them, but they are not ours
    // to leave behind. DEST is locked, so none is being written now.
    for (auto it = fs::recursive_directory_iterator(o.dest); it != fs::recursive_directory_iterator(); ++it)
      if (it->is_regular_file() && io::is_temporary_name(it->path().filename().string())) fs::remove(it->path(), ec);
    if (o.space_check) check_export_space(o, s);
    spdlog::info("export: resuming the export into {}", o.dest.string());
  } else {
    const auto other = std::find_if(fs::directory_iterator(o.dest), fs::directory_iterator(),
                                    [](const fs::directory_entry& e) { return e.path().filename() != kLockFile; });
    E3_REQUIRE(other == fs::directory_iterator(), ErrorKind::Output,
               "export: {} is not empty: give a new or empty directory (a trainer would read what else lies there)",
               o.dest.string());
    if (o.space_check) check_export_space(o, s);  // before anything is written into DEST
    make_directory(o.dest / kStateDir);
    write_json_file(state, identity);
  }
  if (o.format == ExportFormat::Speculators) make_directory(o.dest / "hidden_states");
  return ExportStart::Export;
}

ExportReport export_shards(const ExportOptions& o, const std::function<void(const ExportProgress&)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const Source s = load_source(o.src);
  ExportReport report;
  std::vector<const io::CommittedShard*> todo;
  for (const io::CommittedShard& c : s.shards) {
    if (c.shard_index % o.ranks != o.rank) continue;
    ++report.shards;
    if (fs::exists(done_marker(o.dest, c.shard_index))) ++report.shards_resumed;
    else todo.push_back(&c);
  }
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t pool_threads =
      std::max<size_t>(1, std::min(o.threads > 0 ? static_cast<size_t>(o.threads) : cores, todo.size()));
  // Writers per shard: the threads the shards exported at once leave, each shard's reader
  // counted, 2 to 4. Two at least, because a writer alternates between filling its O_DIRECT
  // buffer and waiting for the disk: alone, it left the disk idle while it copied (0.76 GB/s
  // against dd's 1.15 on this project's 2-core machine). They wait more than they compute, so
  // they may outnumber the cores.
  const size_t budget = o.threads > 0 ? static_cast<size_t>(o.threads) : cores;
  const size_t writers_per_shard =
      o.writers_per_shard > 0 ? static_cast<size_t>(o.writers_per_shard)
                              : std::clamp<size_t>(budget / pool_threads, 3, 5) - 1;
  std::mutex hdf5;  // HDF5 is built without thread safety
  StageCounters stages;
  ExportTotals totals;
  ContextPool contexts(o, s, stages);
  const auto export_shard = [&](const io::CommittedShard& c) -> std::unique_ptr<ShardExport> {
    if (fs::exists(done_marker(o.dest, c.shard_index))) return nullptr;  // done by an earlier run
    return std::make_unique<ShardExport>(o, s, c, contexts, stages, totals, writers_per_shard);
  };
  auto& shards_done = totals.shards_done;
  auto& samples = totals.samples;
  auto& written = totals.written;

  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  std::thread reporter;
  if (progress)
    reporter = std::thread([&] {
      std::unique_lock<std::mutex> lock(m);
      while (!cv.wait_for(lock, std::chrono::duration<double>(o.progress_interval_s), [&] { return finished; }))
        progress({shards_done, static_cast<int64_t>(todo.size()), samples, written, elapsed()});
    });
  const auto stop_reporter = [&] {
    if (!reporter.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(m);
      finished = true;
    }
    cv.notify_all();
    reporter.join();
  };
  try {
    if (!o.skip_verify) {
      io::VerifyOptions v;
      v.threads = o.threads;
      v.rank = o.rank;
      v.ranks = o.ranks;
      v.hdf5_lock = &hdf5;
      v.stages = &stages.src;
      // Verify's pool reads each shard of this process's share (the same share) once: each
      // sample is converted from the bytes it checks, and published once its shard has passed.
      v.consumer = [&](const io::CommittedShard& c, const fs::path&) -> std::unique_ptr<io::ShardConsumer> {
        return export_shard(c);
      };
      const io::VerifyReport r = io::verify_output(o.src, v);
      io::require_complete(r, o.src);
      report.bytes_read += r.bytes_read;
    } else {
      const size_t threads = pool_threads;
      std::atomic<size_t> next{0};
      std::atomic<bool> failed{false};
      std::vector<std::exception_ptr> errors(threads);
      auto work = [&](size_t t) {
        try {
          for (size_t i; !failed && (i = next++) < todo.size();)
            if (const std::unique_ptr<ShardExport> e = export_shard(*todo[i]))
              export_unchecked(o.src / todo[i]->file, *e, hdf5, stages, totals);
        } catch (...) {
          errors[t] = std::current_exception();
          failed = true;
        }
      };
      std::vector<std::thread> pool;
      for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
      work(0);
      for (std::thread& th : pool) th.join();
      for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
    }
  } catch (...) {
    stop_reporter();
    throw;
  }
  stop_reporter();
  report.samples = samples;
  report.bytes_written = written;
  report.bytes_read += totals.read;
  report.seconds = elapsed();
  report.threads = static_cast<int>(pool_threads);
  report.writers = static_cast<int>(pool_threads * writers_per_shard);
  report.stages = {stage_seconds(stages.src.read),     stage_seconds(stages.src.checksum),
                   stage_seconds(stages.src.metadata), stage_seconds(stages.src.values),
                   stage_seconds(stages.queued),       stage_seconds(stages.convert),
                   stage_seconds(stages.write),        stage_seconds(stages.sync)};
  return report;
}

std::string stages_text(const ExportStages& s, int readers, int writers) {
  return fmt::format("read {:.1f} s, checksum {:.1f} s, metadata {:.1f} s, values {:.1f} s, waiting for writers "
                     "{:.1f} s, convert {:.1f} s, write {:.1f} s, sync {:.1f} s (summed over {} reading thread{} and "
                     "{} writing thread{})",
                     s.read, s.checksum, s.metadata, s.values, s.queued, s.convert, s.write, s.sync, readers,
                     readers == 1 ? "" : "s", writers, writers == 1 ? "" : "s");
}

void finish_export(const ExportOptions& o) {
  const Source s = load_source(o.src);
  for (const io::CommittedShard& c : s.shards)
    E3_REQUIRE(fs::exists(done_marker(o.dest, c.shard_index)), ErrorKind::Output,
               "export: {} of {} is not exported (a rank failed?): rerun the same command to finish", c.file,
               o.src.string());
  if (o.format == ExportFormat::Speculators) {
    // The rows in sample order: shards hold consecutive samples, so shard order is row order.
    io::TempFile rows(o.dest / "data.jsonl");
    std::vector<char> buf;
    for (const io::CommittedShard& c : s.shards) {
      const fs::path part = rows_fragment(o.dest, c.shard_index);
      std::ifstream in(part, std::ios::binary);
      E3_REQUIRE(in.good(), ErrorKind::Output, "export: cannot read {}", part.string());
      buf.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      rows.write(buf.data(), buf.size());
    }
    rows.commit();
  }
  const SourceTally tally = tally_source(o.src, s);
  const nlohmann::json draft_vocab = export_draft_vocab(o, s, tally);
  // Last, so that it is seen: a trainer's default length cuts long samples without an error.
  const LengthReport lengths = length_report(o.format, tally.lengths);
  if (lengths.longer > 0) spdlog::warn("export: {}", length_message(lengths));
  else spdlog::info("export: {}", length_message(lengths));
  nlohmann::json done = export_identity(o.format, s.manifests.front(), o.src);
  const FinalNeed need = final_needed(o.format, s.description.final_mode);
  done["samples"] = s.stored.size();
  // The captures in the order the files hold them; SRC's order too where that differs.
  const std::vector<int32_t> written = exported_layer_ids(o.format, s.description.layer_ids);
  done["layer_ids"] = written;
  if (written != s.description.layer_ids) done["source_layer_ids"] = s.description.layer_ids;
  done["final"] = need.norm;
  done["final_dataset"] = need.dataset;
  done["model"] = s.description.model_path;
  done["model_type"] = s.description.model_type;
  done["num_hidden_layers"] = s.description.num_hidden_layers;
  done["hidden_size"] = s.description.hidden_size;
  done["source_dtype"] = s.description.dtype;
  done["dtype"] = "bf16";
  done["draft_vocab"] = draft_vocab;
  done["long_samples"] = {{"trainer_key", lengths.limit.key},
                          {"trainer_default", lengths.limit.tokens},
                          {"longer", lengths.longer},
                          {"longest", lengths.longest}};
  write_json_file(o.dest / kDoneFile, done);
  std::error_code ec;
  fs::remove_all(o.dest / kStateDir, ec);
}

}  // namespace e3::jobs
