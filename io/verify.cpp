#include "io/verify.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/file_io.h"
#include "io/hdf5.h"
#include "io/manifest.h"
#include "io/read_ahead.h"
#include "io/shard_writer.h"
#include "io/token_counts.h"
#include "core/hash.h"
#include "core/stage_timer.h"

namespace e3::io {
namespace {

#define E3_VERIFY(cond, ...) E3_REQUIRE(cond, ::e3::ErrorKind::Verify, __VA_ARGS__)

struct DatasetShape {
  std::vector<hsize_t> dims;
  H5Id type;
};

DatasetShape shape_of(hid_t ds) {
  DatasetShape s;
  H5Id space(E3_H5(H5Dget_space(ds), "H5Dget_space"), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  s.dims.resize(static_cast<size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space.get(), s.dims.data(), nullptr);
  s.type = H5Id(E3_H5(H5Dget_type(ds), "H5Dget_type"), H5Tclose);
  return s;
}

H5Id open_dataset(hid_t group, const char* name, const std::string& where) {
  E3_VERIFY(H5Lexists(group, name, H5P_DEFAULT) > 0, "{}: dataset '{}' is missing", where, name);
  return H5Id(E3_H5(H5Dopen2(group, name, H5P_DEFAULT), "{}: opening {}", where, name), H5Dclose);
}

// One dataset whose values are checked once the file's metadata is read.
struct ValueRegion {
  std::string where;  // "<file> sample <key>"
  std::string name;   // the dataset
  const StoredPart* part = nullptr;  // what it stores, of the run's codec
  uint64_t count = 0;
  uint64_t offset = 0;  // of its bytes in the file (contiguous storage)
};

// The values are checked on their stored bits: a float8 value is only finite or NaN, and its
// row's float32 scale must be finite and not negative.
void check_values(const void* data, size_t n, uint64_t first_index, const ValueRegion& r) {
  const size_t bad = r.part->first_invalid(data, n);
  if (bad == n) return;
  if (r.part->kind == PartKind::RowScale)
    E3_THROW(ErrorKind::Verify, "{}: {} has a negative or non-finite scale ({}) at flat index {}", r.where, r.name,
             r.part->value(data, bad), first_index + bad);
  E3_THROW(ErrorKind::Verify, "{}: {} has a non-finite value ({}) at flat index {}", r.where, r.name,
           r.part->value(data, bad), first_index + bad);
}



struct ShardJob {
  std::filesystem::path path;
  CommittedShard record;
};

// Per-thread buffers, reused from shard to shard.
struct ReadBuffers {
  std::vector<unsigned char> io;
  std::vector<int32_t> ids;    // one sample's input_ids, for recounting its masked tokens
  std::vector<uint8_t> mask;
};

constexpr size_t kReadChunk = 1 << 20;
constexpr uint64_t kReadAhead = 64 << 20;

// Checks shard files against their manifest records; shared by the threads of the pool.
// The HDF5 library is built without thread safety, so its calls (the metadata: attributes,
// groups, shapes, where each dataset's bytes lie) are made one thread at a time; the bulk of
// the work, reading the bytes, hashing them and checking the values, runs in parallel.
class ShardChecker {
 public:
  ShardChecker(const RunFingerprint& fp, const StorageCodec& codec, std::mutex& hdf5, ShardReadStages* stages,
               bool map_cached = true)
      : fp_(fp), codec_(codec), finals_(final_datasets(fp.final_mode)), K_(fp.layer_ids.size()), hdf5_(hdf5),
        stages_(stages), map_cached_(map_cached) {}

  // One shard: its metadata (under the HDF5 lock), then one pass over its bytes in file order
  // that hashes them, checks the stored values and fills what `make_consumer`'s consumer wants.
  // The problems are reported in the order of checks verify has always made: the checksum, then
  // the metadata, then the first region (in the metadata's order) holding a bad value, then the
  // consumer's.
  void check(const ShardJob& job, ReadBuffers& buf, std::atomic<uint64_t>& bytes_done,
             const std::function<std::unique_ptr<ShardConsumer>(const CommittedShard&,
                                                                const std::filesystem::path&)>& make_consumer = {}) {
    const std::string where = job.path.string();
    const CommittedShard& s = job.record;
    struct stat st {};
    if (::lstat(job.path.c_str(), &st) != 0) {
      E3_VERIFY(errno != ENOENT, "{}: listed in the manifest but missing", where);
      E3_THROW(ErrorKind::Verify, "{}: {}", where, std::strerror(errno));
    }
    require_regular_file(job.path, ErrorKind::Verify);
    // O_NONBLOCK: should the name be swapped for a FIFO after the lstat, open must not wait.
    Fd fd(::open(job.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    E3_VERIFY(fd.get() >= 0, "{}: cannot open: {}", where, std::strerror(errno));
    E3_VERIFY(::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), "{}: not a regular file", where);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    E3_VERIFY(size == s.bytes, "{}: {} bytes, the manifest says {} (truncated or rewritten)", where, size, s.bytes);
    buf.io.resize(kReadChunk);
    const bool hashing = !s.checksum.empty();
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);

    std::vector<ValueRegion> regions;
    std::optional<Error> metadata_error, consumer_error;
    MappedFile mapping;  // declared before the consumer, which may hold on to its bytes until it is gone
    std::unique_ptr<ShardConsumer> consumer;
    std::vector<ShardConsumer::Want> wants;
    {
      ScopeTimer t(stage(&ShardReadStages::metadata));
      std::lock_guard<std::mutex> lock(hdf5_);
      try {
        metadata(job, regions, buf);
      } catch (const Error& e) {
        // HDF5 failing on the file's structure (E3_H5's output errors) is what verify looks
        // for: a damaged shard, whether or not a checksum says so too (it is read first).
        metadata_error = e.kind() == ErrorKind::Output ? Error(ErrorKind::Verify, e.what(), e.file(), e.line()) : e;
      }
      if (!metadata_error && make_consumer) {
        consumer = make_consumer(s, job.path);
        if (consumer) try {
            wants = consumer->plan(job.path);
          } catch (const Error& e) {
            consumer_error = e;
            consumer.reset();
            wants.clear();
          }
      }
    }
    if (metadata_error && !hashing) throw *metadata_error;  // nothing to read that could come first

    // The pass: regions (values to check) and wants (bytes to place), by offset; a region that
    // is a want is read once into the want's place and checked there.
    struct Item {
      uint64_t offset, bytes;
      long region = -1, want = -1;
    };
    std::vector<Item> items;
    std::optional<std::pair<size_t, Error>> value_error;  // the first failing region, by index
    const auto region_failed = [&](size_t r, const Error& e) {
      if (!value_error || r < value_error->first) value_error.emplace(r, e);
    };
    for (size_t r = 0; r < regions.size(); ++r) {
      const uint64_t bytes = regions[r].count * dtype_size(regions[r].part->element);
      if (regions[r].offset + bytes > size) {
        region_failed(r, Error(ErrorKind::Verify,
                               fmt::format("{}: {} lies past the end of the file", regions[r].where, regions[r].name),
                               __FILE__, __LINE__));
        continue;
      }
      items.push_back({regions[r].offset, bytes, static_cast<long>(r), -1});
    }
    std::map<std::pair<uint64_t, uint64_t>, size_t> region_at;  // (offset, bytes) -> its item
    for (size_t i = 0; i < items.size(); ++i) region_at.emplace(std::make_pair(items[i].offset, items[i].bytes), i);
    std::vector<size_t> group_left;
    for (size_t w = 0; w < wants.size(); ++w) {
      const ShardConsumer::Want& want = wants[w];
      if (group_left.size() <= want.group) group_left.resize(want.group + 1, 0);
      ++group_left[want.group];
      if (want.offset + want.bytes > size) {
        if (!consumer_error)
          consumer_error = Error(ErrorKind::Output, fmt::format("{}: bytes {} to {} lie past the end of the file", where,
                                                                want.offset, want.offset + want.bytes),
                                 __FILE__, __LINE__);
        continue;
      }
      const auto same = region_at.find({want.offset, want.bytes});
      if (same != region_at.end() && items[same->second].want < 0) items[same->second].want = static_cast<long>(w);
      else items.push_back({want.offset, want.bytes, -1, static_cast<long>(w)});
    }
    if (consumer_error) consumer.reset();
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.offset < b.offset; });

    ContentHash hash;
    // A file read whole (hashed) and not in the page cache is read past it, a few chunks ahead
    // of the pass (ReadAhead). One in the cache is mapped: the pass hashes and checks its bytes
    // where they lie, and a consumer that borrows them (ShardConsumer::lend) uses them from there,
    // so that nothing is copied out of the page cache. That copy (pread into the export's sample
    // buffers) was 46% of the time of the thread that set an export's pace (issue 21).
    std::unique_ptr<ReadAhead> ahead;
    const double resident = resident_share(fd.get(), size);
    if (hashing && resident < 0.5) ahead = ReadAhead::open(fd.get(), size, where, ErrorKind::Verify);
    // Mapped only when wholly in the page cache: a page read from the disk through the mapping that
    // fails would raise SIGBUS, where pread reports the error.
    if (!ahead && resident >= 1.0 && map_cached_) mapping = MappedFile::map(fd.get(), size);
    const unsigned char* const mapped = mapping.data();
    uint64_t asked = 0;  // the bytes before it are asked for
    const auto read = [&](void* to, size_t n, uint64_t at) {
      ScopeTimer t(stage(&ShardReadStages::read));
      if (ahead) return ahead->read(to, n, at);
      if (mapped) return static_cast<void>(std::memcpy(to, mapped + at, n));
      if (at + n + kReadAhead / 2 > asked && asked < size) {
        const uint64_t from = std::max(asked, at + n);
        asked = std::min<uint64_t>(size, at + n + kReadAhead);
        if (asked > from)
          ::posix_fadvise(fd.get(), static_cast<off_t>(from), static_cast<off_t>(asked - from), POSIX_FADV_WILLNEED);
      }
      pread_exact(fd.get(), to, n, at, ErrorKind::Verify, where);
    };
    const auto hashed = [&](const void* p, size_t n) {
      ScopeTimer t(stage(&ShardReadStages::checksum));
      hash.update(p, n);
      bytes_done += n;
    };
    const auto good = [&] { return !metadata_error && !value_error && consumer; };
    const auto consumer_failed = [&](const Error& e) {
      consumer_error = e;
      consumer.reset();
    };

    // The pass as a list of pieces in file order: each item in pieces of whole elements of at most
    // kReadChunk bytes (an empty item is one empty piece), and when hashing, the gaps between
    // items in pieces of kReadChunk.
    struct Piece {
      uint64_t at;
      size_t n;
      long item;      // -1: a gap, only hashed
      uint64_t done;  // the item's bytes before this piece
      bool last;      // the item's last piece
    };
    std::vector<Piece> pieces;
    std::vector<const Item*> overlapping;  // read again after the pass: not how the writer lays a file out
    {
      uint64_t pos = 0;  // the bytes before it are in the list
      const auto gap = [&](uint64_t to) {
        for (; hashing && pos < to;) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadChunk, to - pos));
          pieces.push_back({pos, n, -1, 0, true});
          pos += n;
        }
        pos = std::max(pos, to);
      };
      for (const Item& item : items) {
        if (item.offset < pos) {
          overlapping.push_back(&item);
          continue;
        }
        gap(item.offset);
        const size_t esize = item.region >= 0 ? dtype_size(regions[static_cast<size_t>(item.region)].part->element) : 1;
        const long index = static_cast<long>(&item - items.data());
        uint64_t done = 0;
        do {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadChunk / esize * esize, item.bytes - done));
          pieces.push_back({item.offset + done, n, index, done, done + n == item.bytes});
          done += n;
        } while (done < item.bytes);
        pos = item.offset + item.bytes;
      }
      gap(size);
    }

    // Each piece in turn: at its item's first piece the consumer borrows the item's mapped bytes
    // or gives the place to copy them to; the pass hashes and checks the bytes where they are.
    std::vector<unsigned char*> item_place(items.size(), nullptr);
    std::vector<char> values_ok(items.size(), 1);
    buf.io.resize(std::max(buf.io.size(), kReadChunk));
    for (const Piece& piece : pieces) {
      const Item* item = piece.item >= 0 ? &items[static_cast<size_t>(piece.item)] : nullptr;
      unsigned char* place = nullptr;
      if (item) {
        unsigned char*& placed = item_place[static_cast<size_t>(piece.item)];
        if (piece.done == 0 && item->want >= 0 && good()) try {
            const auto want = static_cast<size_t>(item->want);
            if (!(mapped && consumer->lend(want, mapped + item->offset)))
              placed = static_cast<unsigned char*>(consumer->place(want));
          } catch (const Error& e) {
            consumer_failed(e);
          }
        place = placed;
      }
      const unsigned char* p;
      if (place) {
        read(place + piece.done, piece.n, piece.at);
        p = place + piece.done;
      } else if (mapped) {
        p = mapped + piece.at;
      } else {
        read(buf.io.data(), piece.n, piece.at);
        p = buf.io.data();
      }
      if (!item) {
        hashed(p, piece.n);
        continue;
      }
      const ValueRegion* r = item->region >= 0 ? &regions[static_cast<size_t>(item->region)] : nullptr;
      if (hashing) hashed(p, piece.n);
      if (r && values_ok[static_cast<size_t>(piece.item)]) {
        ScopeTimer t(stage(&ShardReadStages::values));
        const size_t esize = dtype_size(r->part->element);
        try {
          check_values(p, piece.n / esize, piece.done / esize, *r);
        } catch (const Error& e) {
          region_failed(static_cast<size_t>(item->region), e);
          values_ok[static_cast<size_t>(piece.item)] = 0;
        }
      }
      if (r && !hashing) bytes_done += piece.n;
      if (!piece.last || item->want < 0) continue;
      const size_t g = wants[static_cast<size_t>(item->want)].group;
      if (--group_left[g] == 0 && good()) try {
          consumer->ready(g);
        } catch (const Error& e) {
          consumer_failed(e);
        }
    }
    const auto take = [&](const Item& item) {  // an overlapping item, read again on its own
      const ValueRegion* r = item.region >= 0 ? &regions[static_cast<size_t>(item.region)] : nullptr;
      const size_t esize = r ? dtype_size(r->part->element) : 1;
      unsigned char* dest = nullptr;
      if (item.want >= 0 && good()) try {
          dest = static_cast<unsigned char*>(consumer->place(static_cast<size_t>(item.want)));
        } catch (const Error& e) {
          consumer_failed(e);
        }
      bool ok = true;
      buf.io.resize(std::max(buf.io.size(), kReadChunk));
      for (uint64_t done = 0; done < item.bytes;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadChunk / esize * esize, item.bytes - done));
        unsigned char* p = dest ? dest + done : buf.io.data();
        read(p, n, item.offset + done);
        if (r && ok) {
          ScopeTimer t(stage(&ShardReadStages::values));
          try {
            check_values(p, n / esize, done / esize, *r);
          } catch (const Error& e) {
            region_failed(static_cast<size_t>(item.region), e);
            ok = false;
          }
        }
        if (r && !hashing) bytes_done += n;
        done += n;
      }
      if (item.want < 0) return;
      const size_t g = wants[static_cast<size_t>(item.want)].group;
      if (--group_left[g] == 0 && good()) try {
          consumer->ready(g);
        } catch (const Error& e) {
          consumer_failed(e);
        }
    };
    for (const Item* item : overlapping) take(*item);

    if (hashing) {
      const std::string sum = hash.hex();
      E3_VERIFY(sum == s.checksum, "{}: checksum {} differs from the manifest's {} (changed after it was written)",
                where, sum, s.checksum);
    }
    if (metadata_error) throw *metadata_error;
    if (value_error) throw value_error->second;
    if (consumer_error) throw *consumer_error;
    if (consumer) consumer->passed();
  }

 private:
  // Everything that asks HDF5 (under hdf5_). Values of a dataset not stored contiguously are
  // read and checked here; the others are left in `regions`.
  void metadata(const ShardJob& job, std::vector<ValueRegion>& regions, ReadBuffers& buf) {
    const CommittedShard& s = job.record;
    const std::string where = job.path.string();
    const H5Id fapl = file_access_list();  // kept open: closing it would clear the error stack
    H5Id file(H5Fopen(job.path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    E3_VERIFY(static_cast<bool>(file), "{}: not a readable HDF5 file: {}", where, hdf5_error_text());
    const hid_t f = file.get();
    E3_VERIFY(read_attr_string(f, "format") == std::string(kFormatName), "{}: attribute format is not '{}'", where,
              kFormatName);
    E3_VERIFY(read_attr_int(f, "format_version") == kFormatVersion, "{}: unexpected format_version", where);
    const auto layer_ids = read_attr_ints(f, "layer_ids");
    E3_VERIFY(layer_ids == fp_.layer_ids, "{}: layer_ids [{}] differ from the manifest's [{}]", where,
              fmt::join(layer_ids.value_or(std::vector<int32_t>{}), ","), fmt::join(fp_.layer_ids, ","));
    E3_VERIFY(read_attr_string(f, "final") == fp_.final_mode, "{}: attribute final differs from the manifest", where);
    E3_VERIFY(read_attr_string(f, "dtype") == fp_.dtype, "{}: attribute dtype differs from the manifest", where);
    E3_VERIFY(read_attr_int(f, "shard_index") == s.shard_index, "{}: shard_index differs from the manifest", where);
    const auto hidden = read_attr_int(f, "hidden_size");
    E3_VERIFY(hidden && *hidden > 0, "{}: missing hidden_size", where);
    slot_attributes(f, where);

    E3_VERIFY(H5Lexists(f, "samples", H5P_DEFAULT) > 0, "{}: no /samples group", where);
    H5Id samples(E3_H5(H5Gopen2(f, "samples", H5P_DEFAULT), "{}: opening /samples", where), H5Gclose);
    std::vector<std::string> names = list_links(samples.get(), where);
    std::set<std::string> expected;
    for (int64_t idx : s.samples) expected.insert(fmt::format("{:08d}", idx));
    for (const std::string& n : names)
      E3_VERIFY(expected.count(n), "{}: sample {} is in the file but not in the manifest", where, n);
    // Shards written before eagle3_extract counted tokens have no /token_counts: nothing to
    // compare (export counts their samples itself).
    const std::optional<StoredTokenCounts> stored_counts = read_token_counts(f, where, ErrorKind::Verify);
    TokenCounter recount;
    int64_t tokens = 0;
    for (int64_t idx : s.samples) {
      const std::string key = fmt::format("{:08d}", idx);
      E3_VERIFY(std::find(names.begin(), names.end(), key) != names.end(), "{} sample {}: missing", where, key);
      H5Id g(E3_H5(H5Gopen2(samples.get(), key.c_str(), H5P_DEFAULT), "{}: opening sample {}", where, key), H5Gclose);
      tokens += sample(g.get(), fmt::format("{} sample {}", where, key), static_cast<hsize_t>(*hidden), regions, buf,
                       stored_counts ? &recount : nullptr);
    }
    E3_VERIFY(tokens == s.num_tokens, "{}: {} tokens, the manifest says {}", where, tokens, s.num_tokens);
    if (stored_counts) compare_counts(stored_counts->counts, recount.counts(), where);
    // Samples left out for non-finite states: the shard and the manifest must agree.
    std::vector<std::string> in_file;
    if (H5Lexists(f, "skipped", H5P_DEFAULT) > 0) {
      H5Id skipped(E3_H5(H5Gopen2(f, "skipped", H5P_DEFAULT), "{}: opening /skipped", where), H5Gclose);
      in_file = list_links(skipped.get(), where);
    }
    std::vector<std::string> in_manifest;
    for (const SkippedSample& sk : s.skipped) in_manifest.push_back(fmt::format("{:08d}", sk.index));
    std::sort(in_manifest.begin(), in_manifest.end());
    E3_VERIFY(in_file == in_manifest, "{}: /skipped holds [{}], the manifest lists [{}]", where,
              fmt::join(in_file, ","), fmt::join(in_manifest, ","));
  }

  // The shard's /token_counts against a recount of its samples' masked tokens: names the first
  // token id whose counts differ.
  static void compare_counts(const std::vector<TokenCount>& stored, const std::vector<TokenCount>& recounted,
                             const std::string& where) {
    size_t i = 0, j = 0;
    while (i < stored.size() || j < recounted.size()) {
      const int64_t id = std::min(i < stored.size() ? stored[i].id : std::numeric_limits<int64_t>::max(),
                                  j < recounted.size() ? recounted[j].id : std::numeric_limits<int64_t>::max());
      const int64_t a = i < stored.size() && stored[i].id == id ? stored[i++].count : 0;
      const int64_t b = j < recounted.size() && recounted[j].id == id ? recounted[j++].count : 0;
      E3_VERIFY(a == b,
                "{}: /{} counts token id {} {} times, but the samples' masked tokens (loss_mask 1) hold it {} times",
                where, kTokenCountsDataset, id, a, b);
    }
  }

  // The per-slot layer attributes must say what the manifest's settings mean. Shards of
  // versions before them lack the attributes; then layer_ids and final say it alone.
  void slot_attributes(hid_t f, const std::string& where) {
    if (const auto hf = read_attr_ints(f, "hidden_states_hf_index"))
      E3_VERIFY(*hf == fp_.layer_ids, "{}: hidden_states_hf_index [{}] differs from layer_ids [{}]", where,
                fmt::join(*hf, ","), fmt::join(fp_.layer_ids, ","));
    const auto norm = read_attr_string(f, "last_hidden_state_norm");
    if (norm || H5Aexists(f, "slots") > 0) {
      const std::string want = finals_.empty() ? std::string() : finals_.front().norm;
      E3_VERIFY(norm.value_or("") == want, "{}: last_hidden_state_norm is '{}', --final {} means '{}'", where,
                norm.value_or(""), fp_.final_mode, want);
    }
    if (const auto slots = read_attr_strings(f, "slots")) {
      const auto layers = read_attr_int(f, "num_hidden_layers");
      E3_VERIFY(layers && *slots == describe_slots(fp_.layer_ids, fp_.final_mode, *layers),
                "{}: the slots attribute does not describe layer_ids [{}] with --final {}", where,
                fmt::join(fp_.layer_ids, ","), fp_.final_mode);
    }
  }

  // The datasets of a state (the codec's parts): their shapes and stored types, and where their
  // values are. `rows` is [T, K] for hidden_states, [T] for a final state.
  void states(hid_t g, const char* state, const std::vector<uint64_t>& rows, hsize_t H, const std::string& sw,
              std::vector<ValueRegion>& regions, ReadBuffers& buf) {
    for (const StoredPart& part : codec_.parts()) {
      const std::string name = state + std::string(part.suffix);
      H5Id ds = open_dataset(g, name.c_str(), sw);
      DatasetShape shape = shape_of(ds.get());
      const std::vector<uint64_t> part_dims = part.dims(rows, static_cast<int64_t>(H));
      const std::vector<hsize_t> dims(part_dims.begin(), part_dims.end());
      if (part.kind == PartKind::RowScale) {
        // Each row of float8 values carries its float32 scale: [T, K] for [T, K, H].
        E3_VERIFY(shape.dims == dims && stored_as(ds.get(), shape.type.get(), part),
                  "{}: {} must be float32 of shape [{}], it is [{}]", sw, name, fmt::join(dims, ", "),
                  fmt::join(shape.dims, ", "));
      } else {
        E3_VERIFY(shape.dims == dims, "{}: {} has shape [{}], expected [{}]", sw, name, fmt::join(shape.dims, ", "),
                  fmt::join(dims, ", "));
        E3_VERIFY(stored_as(ds.get(), shape.type.get(), part), "{}: {} is not stored as {}{}", sw, name, fp_.dtype,
                  part.encoding ? fmt::format(" (uint8 with attribute encoding = \"{}\")", part.encoding) : "");
      }
      region(ds.get(), sw, name, part, dims, regions, buf);
    }
  }

  void region(hid_t ds, const std::string& sw, const std::string& name, const StoredPart& part,
              const std::vector<hsize_t>& dims, std::vector<ValueRegion>& regions, ReadBuffers& buf) {
    uint64_t count = 1;
    for (hsize_t d : dims) count *= d;
    ValueRegion r{sw, name, &part, count, 0};
    if (const auto offset = contiguous_offset(ds)) {
      r.offset = *offset;
      regions.push_back(std::move(r));
      return;
    }
    // Not laid out in one piece (not how the writer stores it): HDF5 reads the stored bits.
    std::vector<unsigned char> data(count * dtype_size(part.element));
    read_stored(ds, data.data(), sw + " " + name);
    check_values(data.data(), count, 0, r);
    (void)buf;
  }

  // Checks one /samples/<index> group; returns its token count. With `recount`, its masked
  // tokens are counted into it.
  int64_t sample(hid_t g, const std::string& sw, hsize_t H, std::vector<ValueRegion>& regions, ReadBuffers& buf,
                 TokenCounter* recount) {
    const hsize_t K = K_;
    H5Id ids = open_dataset(g, "input_ids", sw);
    DatasetShape ids_shape = shape_of(ids.get());
    E3_VERIFY(ids_shape.dims.size() == 1 && ids_shape.dims[0] > 0 && H5Tget_class(ids_shape.type.get()) == H5T_INTEGER,
              "{}: input_ids must be a non-empty 1-D integer dataset", sw);
    const hsize_t T = ids_shape.dims[0];
    E3_VERIFY(read_attr_int(g, "num_tokens") == static_cast<int64_t>(T), "{}: num_tokens attribute is not {}",
              sw, T);
    H5Id mask = open_dataset(g, "loss_mask", sw);
    DatasetShape mask_shape = shape_of(mask.get());
    E3_VERIFY(mask_shape.dims == std::vector<hsize_t>{T} && H5Tget_class(mask_shape.type.get()) == H5T_INTEGER,
              "{}: loss_mask must be [{}] integers", sw, T);
    if (recount) {
      // 5 bytes a token beside the states' kilobytes: read through HDF5, under its lock.
      buf.ids.resize(T);
      buf.mask.resize(T);
      E3_H5(H5Dread(ids.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.ids.data()), "{}: reading input_ids",
            sw);
      E3_H5(H5Dread(mask.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.mask.data()),
            "{}: reading loss_mask", sw);
      for (size_t t = 0; t < T; ++t)
        E3_VERIFY(buf.ids[t] >= 0, "{}: input_ids[{}] is {}, not a token id", sw, t, buf.ids[t]);
      recount->add(buf.ids, buf.mask);
    }
    states(g, "hidden_states", {T, K}, H, sw, regions, buf);
    for (const char* name : {"last_hidden_state", "last_hidden_state_prenorm"}) {
      const bool present = H5Lexists(g, name, H5P_DEFAULT) > 0;
      const bool wanted = std::any_of(finals_.begin(), finals_.end(), [&](const FinalDataset& d) { return d.name == name; });
      E3_VERIFY(present == wanted, "{}: {} is {} but --final is {}", sw, name, present ? "present" : "absent",
                fp_.final_mode);
      if (present) states(g, name, {T}, H, sw, regions, buf);
    }
    return static_cast<int64_t>(T);
  }

  const RunFingerprint fp_;
  const StorageCodec& codec_;
  const std::vector<FinalDataset> finals_;
  const hsize_t K_;
  std::mutex& hdf5_;
  ShardReadStages* stages_;  // may be null
  const bool map_cached_;    // VerifyOptions::map_cached

  std::atomic<uint64_t>* stage(std::atomic<uint64_t> ShardReadStages::*which) const {
    return stages_ ? &(stages_->*which) : nullptr;
  }
};

// The checks of one directory from its manifests, remembering where each sample was seen;
// the shard files of this process's share are queued for the pool.
class Verifier {
 public:
  Verifier(std::filesystem::path dir, const Manifest& first, const VerifyOptions& options)
      : dir_(std::move(dir)), fp_(first.fingerprint), options_(options), codec_(storage_codec_named(fp_.dtype)) {
    E3_VERIFY(codec_ != nullptr, "{}: unknown dtype '{}'", kManifestName, fp_.dtype);
    E3_VERIFY(fp_.final_mode == "post-norm" || fp_.final_mode == "pre-norm" || fp_.final_mode == "both" ||
                  fp_.final_mode == "none",
              "{}: unknown final mode '{}'", kManifestName, fp_.final_mode);
    report_.num_samples = first.num_samples;
    report_.part_count = first.part.count;
    report_.parts = 0;
  }

  void manifest(const Manifest& m) {
    const std::string manifest_file = manifest_name(m.part);
    check_manifest_structure(m, (dir_ / manifest_file).string(), ErrorKind::Verify);
    ++report_.parts;
    part_complete_[m.part.index] = m.complete;
    all_complete_ = all_complete_ && m.complete;
    for (const SkippedSample& sk : m.skipped) note_skipped(sk, manifest_file);
    for (const CommittedShard& s : m.shards) {
      E3_VERIFY(m.part.owns(s.shard_index), "{}: lists {}, which belongs to another part", manifest_file, s.file);
      shard(s);
    }
  }

  // The checks across manifests; then the queued shard files are read.
  VerifyReport finish() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() != ".h5" || listed_.count(name)) continue;
      unlisted(entry.path());
    }
    for (const auto& [index, where] : skipped_in_) {
      E3_VERIFY(!where_seen_.count(index), "sample {:08d} is listed as skipped ({}) but is stored in {}", index, where,
                where_seen_[index]);
      ++report_.skipped;
    }
    report_.complete = all_complete_ && report_.parts == report_.part_count && report_.unlisted == 0;
    if (report_.complete) {
      E3_VERIFY(report_.samples + report_.skipped == report_.num_samples,
                "the manifest says complete, but {} stored + {} skipped != {} input samples", report_.samples,
                report_.skipped, report_.num_samples);
      for (int64_t i = 0; i < report_.num_samples; ++i)
        E3_VERIFY(where_seen_.count(i) || skipped_in_.count(i), "sample {:08d} is neither stored nor listed as skipped",
                  i);
    }
    read_shards();
    return std::move(report_);
  }

 private:
  void note_skipped(const SkippedSample& sk, const std::string& where) {
    auto [it, fresh] = skipped_in_.emplace(sk.index, where);
    E3_VERIFY(fresh, "sample {:08d} is listed as skipped twice: in {} and {}", sk.index, it->second, where);
    E3_VERIFY(sk.index >= 0 && sk.index < report_.num_samples, "{}: skipped sample {} is outside the input", where,
              sk.index);
  }

  // A final-named shard that no manifest lists: committed after its job's last manifest
  // update (a kill, or another DP group's shard before the job's end). A rerun adopts it,
  // so it must be whole and of this run; in a part whose manifest says complete it is stray.
  void unlisted(const std::filesystem::path& path) {
    const std::string where = path.string();
    InspectedShard found;
    try {
      found = inspect_shard(path);
    } catch (const Error& e) {
      E3_THROW(ErrorKind::Verify, "{} (a shard file that no manifest lists)", e.what());
    }
    const int part = static_cast<int>(found.record.shard_index % report_.part_count);
    const auto it = part_complete_.find(part);
    E3_VERIFY(it == part_complete_.end() || !it->second, "{}: a shard file that no manifest lists", where);
    E3_VERIFY(found.run_fingerprint == fp_.digest(), "{}: not listed, and written by a run with other settings", where);
    E3_VERIFY(path.filename() == shard_file_name(found.record.shard_index), "{}: its shard_index says it is {}", where,
              shard_file_name(found.record.shard_index));
    found.record.checksum.clear();  // taken from this very file: comparing it would prove nothing
    shard(found.record);
    ++report_.unlisted;
  }

  void shard(const CommittedShard& s) {
    const auto path = dir_ / s.file;
    const std::string where = path.string();
    E3_VERIFY(listed_.insert(s.file).second, "{}: listed by two manifests", where);
    for (int64_t idx : s.samples) {
      E3_VERIFY(idx >= 0 && idx < report_.num_samples, "{}: holds sample {}, but the input has {} samples", where, idx,
                report_.num_samples);
      auto [it, fresh] = where_seen_.emplace(idx, where);
      E3_VERIFY(fresh, "sample {:08d} appears twice: in {} and {}", idx, it->second, where);
      ++report_.samples;
    }
    for (const SkippedSample& sk : s.skipped) note_skipped(sk, where);
    report_.tokens += s.num_tokens;
    ++report_.shards;
    if (s.shard_index % options_.ranks == options_.rank) jobs_.push_back({path, s});
  }

  // Reads the queued shard files, several at a time.
  void read_shards() {
    std::sort(jobs_.begin(), jobs_.end(),
              [](const ShardJob& a, const ShardJob& b) { return a.record.shard_index < b.record.shard_index; });
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    uint64_t bytes_total = 0;
    for (const ShardJob& j : jobs_) bytes_total += j.record.bytes;
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    const size_t threads =
        std::max<size_t>(1, std::min(options_.threads > 0 ? static_cast<size_t>(options_.threads) : cores, jobs_.size()));
    std::mutex own_hdf5_lock;
    ShardChecker checker(fp_, *codec_, options_.hdf5_lock ? *options_.hdf5_lock : own_hdf5_lock, options_.stages,
                         options_.map_cached);
    std::vector<std::optional<Error>> problems(jobs_.size());
    std::atomic<size_t> next{0};
    std::atomic<int64_t> done{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<bool> failed{false};
    const auto work = [&] {
      ReadBuffers buf;
      for (size_t i; (i = next++) < jobs_.size();) {
        // Without collect_problems only the first problem is reported: stop taking shards.
        if (failed && !options_.collect_problems) break;
        try {
          checker.check(jobs_[i], buf, bytes, options_.consumer);
        } catch (const Error& e) {
          problems[i] = e;
          failed = true;
        } catch (const std::exception& e) {
          problems[i] = Error(ErrorKind::Verify, fmt::format("{}: {}", jobs_[i].path.string(), e.what()), __FILE__,
                              __LINE__);
          failed = true;
        }
        ++done;
      }
    };
    std::mutex m;
    std::condition_variable cv;
    bool finished = false;
    std::thread reporter;
    if (options_.progress) {
      reporter = std::thread([&] {
        std::unique_lock<std::mutex> lock(m);
        const auto interval = std::chrono::duration<double>(options_.progress_interval_s);
        while (!cv.wait_for(lock, interval, [&] { return finished; }))
          options_.progress({done, static_cast<int64_t>(jobs_.size()), bytes, bytes_total, elapsed()});
      });
    }
    {
      std::vector<std::thread> pool;
      for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
      work();
      for (std::thread& t : pool) t.join();
    }
    if (reporter.joinable()) {
      {
        std::lock_guard<std::mutex> lock(m);
        finished = true;
      }
      cv.notify_all();
      reporter.join();
    }
    if (options_.progress)
      options_.progress({done, static_cast<int64_t>(jobs_.size()), bytes, bytes_total, elapsed(), true});
    report_.shards_read = static_cast<int64_t>(jobs_.size());
    report_.bytes_read = bytes;
    for (auto& p : problems)
      if (p) report_.problems.push_back(std::move(*p));
    if (!report_.problems.empty() && !options_.collect_problems) throw report_.problems.front();
  }

  std::filesystem::path dir_;
  RunFingerprint fp_;
  VerifyOptions options_;
  const StorageCodec* codec_;  // of the manifest's dtype
  VerifyReport report_{};
  bool all_complete_ = true;
  std::map<int, bool> part_complete_;  // part index -> its manifest says complete
  std::map<int64_t, std::string> where_seen_;  // stored sample -> its shard
  std::map<int64_t, std::string> skipped_in_;  // skipped sample -> where it is listed
  std::set<std::string> listed_;               // shard files named by a manifest
  std::vector<ShardJob> jobs_;                 // shard files this process reads
};

struct ShardRange {
  int64_t first = 0, end = 0;  // samples [first, end)
};

// Where each shard of a manifest's plan starts and ends: from its shard_starts, or, in a
// manifest of a version before --shard-size, from samples_per_shard in order.
class ShardBounds {
 public:
  ShardBounds(const Manifest& m, const std::function<void(const std::string&)>& fail) : n_(m.num_samples) {
    if (!m.shard_starts.empty()) {
      starts_ = m.shard_starts;
      if (starts_.front() != 0) fail(fmt::format("shard_starts begins at sample {}, not 0", starts_.front()));
      for (size_t i = 1; i < starts_.size(); ++i)
        if (starts_[i] <= starts_[i - 1] || starts_[i] >= n_)
          fail(fmt::format("shard_starts[{}] is {}: the starts must rise and stay below {} samples", i, starts_[i],
                           n_));
      return;
    }
    const int64_t per_shard = m.fingerprint.samples_per_shard;
    if (per_shard <= 0) fail(fmt::format("samples_per_shard is {} and there is no shard_starts", per_shard));
    for (int64_t first = 0; first < n_; first += per_shard) starts_.push_back(first);
  }
  int64_t count() const { return static_cast<int64_t>(starts_.size()); }
  ShardRange range(int64_t index) const {
    const auto i = static_cast<size_t>(index);
    return {starts_[i], i + 1 < starts_.size() ? starts_[i + 1] : n_};
  }
  int64_t shard_of(int64_t sample) const {
    return static_cast<int64_t>(std::upper_bound(starts_.begin(), starts_.end(), sample) - starts_.begin()) - 1;
  }

 private:
  int64_t n_;
  std::vector<int64_t> starts_;
};

}  // namespace

void check_manifest_structure(const Manifest& m, const std::string& where, ErrorKind kind, std::string_view advice) {
  const auto fail = [&](const std::string& problem) { E3_THROW(kind, "{}: {}{}", where, problem, advice); };
  const int64_t n = m.num_samples;
  if (n <= 0) fail(fmt::format("num_samples is {}", n));

  // Identity first: what is listed twice or lies outside the input.
  std::map<int64_t, std::string> stored, skipped;  // sample -> the shard (or list) naming it
  std::set<std::string> files;
  std::set<int64_t> indices;
  const auto note_skipped = [&](const SkippedSample& sk, const std::string& in) {
    if (sk.index < 0 || sk.index >= n) fail(fmt::format("skipped sample {} is outside the input ({} samples)", sk.index, n));
    const auto [it, fresh] = skipped.emplace(sk.index, in);
    if (!fresh) fail(fmt::format("sample {:08d} is listed as skipped twice: in {} and {}", sk.index, it->second, in));
  };
  for (const SkippedSample& sk : m.skipped) note_skipped(sk, "the top-level skipped list");
  for (const CommittedShard& s : m.shards) {
    if (!m.part.owns(s.shard_index)) fail(fmt::format("lists {}, which belongs to another part", s.file));
    if (!files.insert(s.file).second) fail(fmt::format("lists {} twice", s.file));
    if (!indices.insert(s.shard_index).second) fail(fmt::format("lists shard_index {} twice", s.shard_index));
    for (int64_t idx : s.samples) {
      if (idx < 0 || idx >= n) fail(fmt::format("{} holds sample {}, but the input has {} samples", s.file, idx, n));
      const auto [it, fresh] = stored.emplace(idx, s.file);
      if (!fresh) fail(fmt::format("sample {:08d} appears twice: in {} and {}", idx, it->second, s.file));
    }
    for (const SkippedSample& sk : s.skipped) note_skipped(sk, s.file);
  }
  for (const auto& [idx, in] : skipped)
    if (stored.count(idx))
      fail(fmt::format("sample {:08d} is listed as skipped ({}) but is stored in {}", idx, in, stored[idx]));

  // Placement: each shard's name and samples follow from its index, as the plan made them.
  const ShardBounds bounds(m, fail);
  const int64_t shard_count = bounds.count();
  for (const CommittedShard& s : m.shards) {
    if (s.shard_index < 0 || s.shard_index >= shard_count)
      fail(fmt::format("{} has shard_index {}, but the plan of {} samples has shards 0 to {}", s.file, s.shard_index,
                       n, shard_count - 1));
    if (s.file != shard_file_name(s.shard_index))
      fail(fmt::format("{} has shard_index {}, which is the index of {}", s.file, s.shard_index,
                       shard_file_name(s.shard_index)));
    const ShardRange r = bounds.range(s.shard_index);
    const auto check_in_range = [&](int64_t idx) {
      if (idx < r.first || idx >= r.end)
        fail(fmt::format("{} (samples {} to {}) lists sample {:08d}, which belongs in {}", s.file, r.first, r.end - 1,
                         idx, shard_file_name(bounds.shard_of(idx))));
    };
    for (int64_t idx : s.samples) check_in_range(idx);
    for (const SkippedSample& sk : s.skipped) check_in_range(sk.index);
  }
  for (const SkippedSample& sk : m.skipped)
    if (!m.part.owns(bounds.shard_of(sk.index)))
      fail(fmt::format("skipped sample {:08d} belongs to {}, another part's shard", sk.index,
                       shard_file_name(bounds.shard_of(sk.index))));

  // A manifest that says complete accounts for every sample of its part.
  int64_t part_shards = 0;
  for (int64_t i = m.part.index; i < shard_count; i += m.part.count) ++part_shards;
  if (m.num_shards != part_shards)
    fail(fmt::format("num_shards is {}, but the plan of {} samples makes {} shards for part {}/{}", m.num_shards, n,
                     part_shards, m.part.index, m.part.count));
  if (!m.complete) return;
  for (int64_t i = m.part.index; i < shard_count; i += m.part.count) {
    const ShardRange r = bounds.range(i);
    for (int64_t idx = r.first; idx < r.end; ++idx)
      if (!stored.count(idx) && !skipped.count(idx))
        fail(fmt::format("says complete, but sample {:08d} is neither stored nor listed as skipped", idx));
  }
}

void require_complete(const VerifyReport& r, const std::filesystem::path& dir) {
  if (r.complete) return;
  const std::string parts =
      r.part_count == 1 ? "" : fmt::format(", {} of {} parts present", r.parts, r.part_count);
  E3_THROW(ErrorKind::Verify,
           "{}: the run is not complete: {} of {} input samples accounted for ({} stored, {} skipped){}; rerun {} to "
           "finish it, or pass --allow-incomplete to check a partial output",
           dir.string(), r.samples + r.skipped, r.num_samples, r.samples, r.skipped, parts,
           r.part_count == 1 ? "the same command" : "the command of every part");
}

namespace {

// What the stored states are, from a shard's attributes (already checked against the manifest).
void describe_layers(const std::filesystem::path& shard, const RunFingerprint& fp, VerifyReport& r) {
  const H5Id fapl = file_access_list();
  H5Id file(E3_H5(H5Fopen(shard.c_str(), H5F_ACC_RDONLY, fapl.get()), "opening {}", shard.string()), H5Fclose);
  r.model_type = read_attr_string(file.get(), "model_type").value_or("");
  r.model_path = read_attr_string(file.get(), "model").value_or("");
  r.num_hidden_layers = read_attr_int(file.get(), "num_hidden_layers").value_or(0);
  r.hidden_size = read_attr_int(file.get(), "hidden_size").value_or(0);
  r.slots = read_attr_strings(file.get(), "slots").value_or(describe_slots(fp.layer_ids, fp.final_mode, r.num_hidden_layers));
}

}  // namespace

std::vector<Manifest> read_run_manifests(const std::filesystem::path& dir) {
  E3_VERIFY(std::filesystem::is_directory(dir), "{} is not a directory", dir.string());
  // One manifest per job; several when parts of the dataset were written by separate jobs.
  std::vector<Manifest> manifests;
  try {
    for (const auto& path : list_manifests(dir)) manifests.push_back(read_manifest_file(path));
  } catch (const Error& e) {
    E3_THROW(ErrorKind::Verify, "{}", e.what());
  }
  if (manifests.empty()) {
    bool has_shards = false;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      has_shards = has_shards || entry.path().filename().string().rfind("shard-", 0) == 0;
    E3_VERIFY(has_shards,
              "{} is not an eagle3_extract output directory: no {} and no shard-*.h5 files (give the --out "
              "directory of a run)",
              dir.string(), kManifestName);
    E3_THROW(ErrorKind::Verify, "{}: no {} beside its shard files (the run did not finish its first commit)",
             dir.string(), kManifestName);
  }
  const Manifest& first = manifests.front();
  for (const Manifest& m : manifests) {
    const std::string a = manifest_name(first.part), b = manifest_name(m.part);
    E3_VERIFY(m.part.count == first.part.count, "{} and {} cut the dataset into different numbers of parts", a, b);
    const auto diffs = first.fingerprint.differences(m.fingerprint);
    E3_VERIFY(diffs.empty(), "{} and {} come from runs with other settings: {}", a, b, fmt::join(diffs, "; "));
    E3_VERIFY(m.data_fingerprint == first.data_fingerprint && m.num_samples == first.num_samples,
              "{} and {} were made from different input data", a, b);
  }
  return manifests;
}

void check_shard(const std::filesystem::path& path, const CommittedShard& record, const RunFingerprint& fp) {
  silence_hdf5_errors();
  const StorageCodec* codec = storage_codec_named(fp.dtype);
  E3_VERIFY(codec != nullptr, "{}: unknown dtype '{}'", path.string(), fp.dtype);
  std::mutex hdf5;
  // Not mapped: a read error of a shard no manifest vouches for (a resume checks these) must be
  // an error to report, not a SIGBUS.
  ShardChecker checker(fp, *codec, hdf5, nullptr, /*map_cached=*/false);
  ReadBuffers buf;
  std::atomic<uint64_t> bytes_done{0};
  checker.check({path, record}, buf, bytes_done);
}

VerifyReport verify_output(const std::filesystem::path& dir, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  silence_hdf5_errors();
  const std::vector<Manifest> manifests = read_run_manifests(dir);
  const Manifest& first = manifests.front();
  E3_REQUIRE(options.ranks > 0 && options.rank >= 0 && options.rank < options.ranks, ErrorKind::Internal,
             "verify: rank {} of {}", options.rank, options.ranks);
  Verifier v(dir, first, options);
  for (const Manifest& m : manifests) v.manifest(m);
  VerifyReport r = v.finish();
  for (const Manifest& m : manifests) {
    if (m.shards.empty()) continue;
    describe_layers(dir / m.shards.front().file, first.fingerprint, r);
    break;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace e3::io
