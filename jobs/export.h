// `eagle3_extract export --format speculators|specforge|modelopt SRC DEST`: an output directory
// rewritten as the per-sample files a trainer reads (docs/TRAINERS.md), streaming one sample at a
// time, shards in parallel, after the same checks as `verify`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/named_enum.h"
#include "jobs/dir_lock.h"

namespace e3::jobs {

enum class ExportFormat { Speculators, SpecForge, ModelOpt };
inline constexpr NamedValue<ExportFormat> kExportFormatNames[] = {{ExportFormat::Speculators, "speculators"},
                                                                  {ExportFormat::SpecForge, "specforge"},
                                                                  {ExportFormat::ModelOpt, "modelopt"}};
constexpr const auto& name_table(ExportFormat) { return kExportFormatNames; }

struct ExportOptions {
  ExportFormat format = ExportFormat::Speculators;
  std::filesystem::path src, dest;
  int threads = 0;           // shards exported at once; 0: the cores of this machine
  // Threads writing each shard's files; 0: what the threads left by the shards' readers allow, 2 to 4.
  int writers_per_shard = 0;
  bool skip_verify = false;  // --skip-verify: SRC was just verified, do not read it twice
  bool space_check = true;   // refuse to start when DEST lacks room for what is left to write
  // --draft-vocab-size: the tokens of the draft vocabulary whose mapping files are written
  // (jobs/draft_vocab.h). Unset: 32000, or the target's whole vocabulary when smaller.
  std::optional<int64_t> draft_vocab_size;
  // Under MPI each process exports the shards whose index % ranks == rank; rank 0 prepares
  // DEST before the others start (prepare_export) and finishes it after all are done.
  int rank = 0, ranks = 1;
  double progress_interval_s = 5;
};

struct ExportProgress {
  int64_t shards_done = 0, shards_total = 0;  // of this process's share
  int64_t samples_done = 0;
  uint64_t bytes_written = 0;
  double seconds = 0;
};

// Where an export's time went, in seconds summed over its threads (they overlap: the sum
// exceeds the wall time when several threads work at once).
struct ExportStages {
  double read = 0;      // SRC's bytes, by pread
  double checksum = 0;  // verify's checksum of them
  double metadata = 0;  // HDF5's calls (verify's checks, the layout), waiting for its lock included
  double values = 0;    // verify's NaN/Inf and scale checks
  double queued = 0;    // a reader waiting for a writer to take its sample: the writers set the pace
  double convert = 0;   // to bf16, and the layouts the formats write (interleaving, reordering)
  double write = 0;     // DEST's files (the torch zip's CRC-32 included), renames included
  double sync = 0;      // syncfs before each shard is marked done, and the mark
};

struct ExportReport {
  int64_t shards = 0, shards_resumed = 0;  // this process's share; resumed: done by an earlier run
  int64_t samples = 0;  // each its own file
  uint64_t bytes_written = 0, bytes_read = 0;
  double seconds = 0;
  int threads = 0;  // that exported shards at once (each reading its shard)
  int writers = 0;  // that wrote their files, summed over those shards
  ExportStages stages;
  bool nothing_to_do = false;  // DEST already holds the whole export
};

// The name of the ModelOpt file of a sample: its id made safe, or its index as 8 digits when it
// has none. Bytes other than [A-Za-z0-9._-] (and a leading '.') become %HH, so a name never
// leaves DEST (no `/`, no control byte, never `.` or `..`) and two ids never share one; an id of
// 8 digits gets its first digit escaped, so that it cannot take the name of the sample with
// that index and no id. Names past 200 bytes are cut and end in "~" and a hash of the whole id.
std::string modelopt_file_stem(int64_t index, const std::string* id);
// DEST-relative paths: "hidden_states/hs_{row}.safetensors", "rows_{g}-{g+2000}/data_{i}.ckpt".
std::string speculators_file(int64_t row);
std::string specforge_file(int64_t index);

// ModelOpt concatenates its aux states in ascending layer order (it sorts its layer ids, and its
// online training hooks the layers in model order): the position in SRC's `layer_ids` of each
// capture a format's files hold, in their order. ModelOpt: ascending ids; the others: as stored.
std::vector<size_t> exported_capture_order(ExportFormat format, const std::vector<int32_t>& layer_ids);

// The longest sample a trainer's default settings train on whole: a longer one is cut to that
// many tokens (docs/TRAINERS.md, "Long samples").
struct TrainerSeqLimit {
  const char* trainer;  // possessive, as messages name it: "SpecForge's"
  const char* key;      // the flag or config key that raises it
  const char* assign;   // between the key and a value on the trainer's command line: " " or "="
  int64_t tokens;
};
TrainerSeqLimit trainer_seq_limit(ExportFormat format);
// How many samples, of their lengths in tokens, the format's trainer would cut by default.
struct LengthReport {
  TrainerSeqLimit limit{};
  int64_t samples = 0, longer = 0, longest = 0;
};
LengthReport length_report(ExportFormat format, const std::vector<int64_t>& lengths);
// The line that says it: how many would be cut and the setting that keeps them whole.
std::string length_message(const LengthReport& r);

enum class ExportStart {
  Export,          // there are shards to export
  NothingToDo,     // DEST already holds the whole export
  VocabRewritten,  // DEST held the whole export with another draft vocabulary size: only that was rewritten
};
// Rank 0, before any rank exports: checks SRC against what the format needs (refusing, with
// the rerun to make, what no trainer can use) and --draft-vocab-size against the target's
// vocabulary, checks or creates DEST's export state (a DEST of another export, or not empty, is
// refused), checks DEST's free space, and says whether the export is already complete. With
// `lock`, takes DEST's lock into it once DEST exists (one export per DEST; held until the export
// is finished). Throws usage errors for what the user asked wrong, output errors for DEST.
ExportStart prepare_export(const ExportOptions& o, std::optional<DirLock>* lock = nullptr);
// Every rank: exports its share of the shards not done by an earlier run.
ExportReport export_shards(const ExportOptions& o, const std::function<void(const ExportProgress&)>& progress = {});
// The per-stage account of an export: "read 4.1 s, checksum 0.5 s, ... (summed over 3 reading
// threads and 12 writing threads)".
std::string stages_text(const ExportStages& s, int readers, int writers);
// Rank 0, after every rank's share is done: speculators' data.jsonl (the rows in order), the
// draft vocabulary's files (from the token counts of every shard), export.json (what was
// exported from what), and the export state removed.
void finish_export(const ExportOptions& o);

}  // namespace e3::jobs
