#include "jobs/output_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "io/shard_writer.h"
#include "io/verify.h"
#include "core/error.h"

namespace e3::jobs {

namespace {

namespace fs = std::filesystem;

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a plain file";
}

// The size of a plain file; nullopt when there is none of that name. Anything else under a
// shard's name is refused without being read: lstat first, then an open that neither
// follows a link nor waits (a FIFO would block a plain open until someone writes).
std::optional<uint64_t> plain_file_size(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    E3_REQUIRE(errno == ENOENT, ErrorKind::Output, "cannot inspect {}: {}", path.string(), std::strerror(errno));
    return std::nullopt;
  }
  const auto refuse = [&](mode_t mode) {
    E3_THROW(ErrorKind::Output,
             "{} is {}, not a shard: eagle3_extract writes its shards as plain files; move it out of --out or use "
             "another --out",
             path.string(), file_kind(mode));
  };
  if (!S_ISREG(st.st_mode)) refuse(st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  E3_REQUIRE(fd >= 0, ErrorKind::Output, "cannot open {}: {}", path.string(), std::strerror(errno));
  const bool ok = ::fstat(fd, &st) == 0;
  ::close(fd);
  E3_REQUIRE(ok, ErrorKind::Output, "cannot inspect {}: {}", path.string(), std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(st.st_mode);
  return static_cast<uint64_t>(st.st_size);
}

// Proves now, before any compute, that files can be created and written in `out`. The
// probe, named after this host (the lock holder's) and pid, is created exclusively and never through a link: a name left by an earlier process
// with this pid (pids repeat in containers), or a link planted there, is unlinked, which
// removes the name and never what a link points to.
void prove_writable(const fs::path& out, const std::string& host) {
  const auto probe = out / fmt::format(".write-test.{}.{}", host, ::getpid());
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(probe.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST && ::unlink(probe.c_str()) == 0) fd = ::open(probe.c_str(), kFlags, 0644);
  E3_REQUIRE(fd >= 0, ErrorKind::Output, "--out {} is not writable: {} (creating {})", out.string(),
             std::strerror(errno), probe.string());
  const bool wrote = ::write(fd, "ok\n", 3) == 3;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  E3_REQUIRE(wrote, ErrorKind::Output, "--out {} is not writable: {}", out.string(), std::strerror(err));
}

}  // namespace

OutputClaim::OutputClaim(std::vector<fs::path> created) : created_(std::move(created)) {}

OutputClaim::OutputClaim(OutputClaim&& other) noexcept
    : created_(std::exchange(other.created_, {})), lock_(std::move(other.lock_)), keep_(other.keep_) {
  other.lock_.reset();
}

OutputClaim::~OutputClaim() {
  lock_.reset();  // first: the lock file is the last thing a failed start left in the directory
  if (keep_) return;
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) ::rmdir(it->c_str());  // only when empty
}

OutputClaim OutputClaim::take(const fs::path& out, const io::Part& part, const LockOptions& options) {
  // The directories that do not exist yet, outermost first: these are what a failed start
  // removes again.
  fs::path p = out.lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  std::vector<fs::path> missing;
  for (; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0) break;
    missing.insert(missing.begin(), p);
    if (p == p.parent_path()) break;
  }
  std::vector<fs::path> created;
  for (const fs::path& dir : missing) {
    if (::mkdir(dir.c_str(), 0777) == 0) {
      created.push_back(dir);
      continue;
    }
    if (errno == EEXIST) continue;  // another part of this directory made it just now
    const int err = errno;
    OutputClaim undo(std::move(created));
    E3_THROW(ErrorKind::Output, "cannot create --out {}: {}", out.string(), std::strerror(err));
  }
  OutputClaim claim(std::move(created));
  E3_REQUIRE(fs::is_directory(out), ErrorKind::Output, "--out {} is not a directory", out.string());
  claim.lock_.emplace(DirLock::acquire(out, lock_file_name(part), options));
  prove_writable(out, options.self.host);
  return claim;
}

OutputState prepare_output_dir(const std::filesystem::path& out, const io::RunFingerprint& fp,
                               const std::string& data_fingerprint, const io::Part& part, bool check_checksums,
                               const std::string& data_content) {
  std::error_code ec;
  E3_REQUIRE(fs::is_directory(out), ErrorKind::Output, "--out {} is not a directory", out.string());

  // Every job writing into this directory must cut the dataset the same way.
  for (const auto& path : io::list_manifests(out)) {
    if (path.filename() == io::manifest_name(part)) continue;
    const io::Manifest other = io::read_manifest_file(path);
    E3_REQUIRE(other.part.count == part.count, ErrorKind::Output,
               "refusing to write into {}: {} is part {}/{} of a job cut in {} part{}, this job is part {}/{}; all "
               "jobs sharing a directory need the same --part count",
               out.string(), path.string(), other.part.index, other.part.count, other.part.count,
               other.part.count == 1 ? "" : "s", part.index, part.count);
    const auto diffs = other.fingerprint.differences(fp);
    E3_REQUIRE(diffs.empty(), ErrorKind::Output,
               "refusing to write into {}: {} belongs to a run with other settings ({}); use another --out",
               out.string(), path.string(), fmt::join(diffs, "; "));
  }

  OutputState state;
  std::map<int64_t, io::CommittedShard> by_index;
  const std::optional<io::Manifest> m = io::read_manifest(out, part);
  size_t listed_kept = 0;
  if (m) {
    const auto diffs = m->fingerprint.differences(fp);
    E3_REQUIRE(diffs.empty(), ErrorKind::Output,
               "refusing to resume into {}: it holds output of a run with other settings ({}); use another "
               "--out or remove it",
               out.string(), fmt::join(diffs, "; "));
    E3_REQUIRE(m->data_fingerprint == data_fingerprint, ErrorKind::Output,
               "refusing to resume into {}: --data has other samples or lengths than the run that wrote it ({} "
               "vs {})",
               out.string(), m->data_path, data_fingerprint);
    E3_REQUIRE(m->data_content_fingerprint.empty() || data_content.empty() ||
                   m->data_content_fingerprint == data_content,
               ErrorKind::Output,
               "refusing to resume into {}: --data has the same sample lengths but other content (ids, input_ids or "
               "loss_mask) than the run that wrote it (from {}); use another --out",
               out.string(), m->data_path);
    state.weights_fingerprint = m->weights_fingerprint;
    io::check_manifest_structure(*m, (out / io::manifest_name(part)).string(), ErrorKind::Output,
                                 fmt::format("; it was edited or damaged, so a rerun cannot trust it: see `eagle3_extract "
                                             "verify {}`, and move the directory aside (or use another --out) to "
                                             "start over",
                                             out.string()));
    for (const io::CommittedShard& s : m->shards) {
      const auto path = out / s.file;
      const std::optional<uint64_t> size = plain_file_size(path);
      if (!size || *size != s.bytes) {
        spdlog::warn("{}: listed in the manifest but missing or resized; it will be written again", path.string());
        continue;
      }
      if (check_checksums && !s.checksum.empty()) {
        const std::string sum = io::file_checksum(path);
        if (sum != s.checksum) {
          const auto aside = path.string() + ".invalid";
          fs::rename(path, aside, ec);
          E3_REQUIRE(!ec, ErrorKind::Output, "cannot move aside {}: {}", path.string(), ec.message());
          spdlog::warn("{}: checksum {} differs from the manifest's {}; moved to {} and will be written again",
                       path.string(), sum, s.checksum, aside);
          ++state.invalid_moved;
          continue;
        }
      }
      by_index[s.shard_index] = s;
      ++listed_kept;
    }
  }
  const std::string manifest_temp = io::manifest_name(part) + ".tmp.";
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> index = shard_index_of(name);
    const bool shard_temp = index && name.find(".h5.tmp.") != std::string::npos;
    if ((shard_temp && part.owns(*index)) || name.rfind(manifest_temp, 0) == 0) {
      fs::remove(entry.path(), ec);
      E3_REQUIRE(!ec, ErrorKind::Output, "cannot remove {}, a partial file of an earlier run: {}",
                 entry.path().string(), ec.message());
      ++state.temps_removed;
      continue;
    }
    if (entry.path().extension() != ".h5" || shard_temp) continue;
    // verify and every later rerun would trip over a foreign *.h5 (or one whose index
    // overflows): say so now, by name, rather than move it aside as if it were ours.
    E3_REQUIRE(index.has_value(), ErrorKind::Output,
               "{} is not a shard of eagle3_extract (those are named shard-NNNNNN.h5): move it out of {} or use "
               "another --out",
               entry.path().string(), out.string());
    if (!part.owns(*index)) continue;  // another part's
    bool known = false;
    for (const auto& [idx, s] : by_index) known = known || s.file == name;
    if (known) continue;
    plain_file_size(entry.path());
    // A shard renamed into place after the last manifest write: keep it if it is whole and ours.
    const auto move_aside = [&](const Error& e) {
      const auto aside = entry.path().string() + ".invalid";
      fs::rename(entry.path(), aside, ec);
      E3_REQUIRE(!ec, ErrorKind::Output, "cannot move aside {}: {}", entry.path().string(), ec.message());
      spdlog::warn("{}; moved to {} and will be written again", e.what(), aside);
      ++state.invalid_moved;
    };
    std::optional<io::InspectedShard> shard;
    try {
      shard = io::inspect_shard(entry.path());
    } catch (const Error& e) {
      move_aside(e);
      continue;
    }
    E3_REQUIRE(shard->run_fingerprint == fp.digest(), ErrorKind::Output,
               "refusing to resume into {}: {} was written by a run with other settings; use another --out or "
               "remove it",
               out.string(), entry.path().string());
    E3_REQUIRE(name == io::shard_file_name(shard->record.shard_index), ErrorKind::Output,
               "{}: its shard_index says it should be named {}", entry.path().string(),
               io::shard_file_name(shard->record.shard_index));
    // No manifest vouches for it: verify's whole check of its schema and values first, or a
    // damaged shard would be kept and every later rerun would find nothing to do.
    try {
      io::check_shard(entry.path(), shard->record, fp);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Verify) throw;
      move_aside(e);
      continue;
    }
    by_index[shard->record.shard_index] = shard->record;
  }
  state.manifest_current = m && m->complete && listed_kept == m->shards.size() && by_index.size() == listed_kept;
  for (auto& [idx, s] : by_index) state.committed.push_back(std::move(s));
  return state;
}

void check_weights_unchanged(const std::filesystem::path& out, const std::string& weights) {
  for (const auto& path : io::list_manifests(out)) {
    const io::Manifest m = io::read_manifest_file(path);
    E3_REQUIRE(m.weights_fingerprint.empty() || m.weights_fingerprint == weights, ErrorKind::Output,
               "refusing to write into {}: {} was written from other weights (weights fingerprint {} (in the "
               "directory) vs {} (this run)); config.json and the tensor names and shapes are the same, so this is "
               "another checkpoint of the same architecture (a fine-tune?); use another --out",
               out.string(), path.string(), m.weights_fingerprint, weights);
  }
}

uint64_t estimate_output_bytes(int64_t tokens, int64_t samples, int64_t shards, int64_t state_bytes_per_token) {
  // Per token: the states, int32 input_ids and uint8 loss_mask. HDF5's own metadata measured
  // about 3 KiB per sample group; 8 KiB per sample and 64 KiB per file leave a margin.
  const auto t = static_cast<uint64_t>(tokens), n = static_cast<uint64_t>(samples), f = static_cast<uint64_t>(shards);
  return t * (static_cast<uint64_t>(state_bytes_per_token) + 5) + n * 8192 + f * 65536;
}

void check_free_space(const std::filesystem::path& out, uint64_t need) {
  struct statvfs st {};
  E3_REQUIRE(::statvfs(out.c_str(), &st) == 0, ErrorKind::Output, "cannot query the free space of --out {}: {}",
             out.string(), std::strerror(errno));
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  E3_REQUIRE(free_bytes >= need, ErrorKind::Output,
             "--out {} has {:.2f} GB free, but this run will write about {:.2f} GB: free space, use another --out, or "
             "split the work with --part (--no-space-check skips this check, e.g. where a quota is not what statvfs "
             "reports)",
             out.string(), free_bytes / 1e9, need / 1e9);
}

std::optional<int64_t> shard_index_of(const std::string& file_name) {
  constexpr std::string_view prefix = "shard-";
  if (file_name.rfind(prefix, 0) != 0) return std::nullopt;
  size_t end = prefix.size();
  while (end < file_name.size() && std::isdigit(static_cast<unsigned char>(file_name[end]))) ++end;
  if (end == prefix.size() || file_name.compare(end, 3, ".h5") != 0) return std::nullopt;
  int64_t index = 0;
  const auto [ptr, err] = std::from_chars(file_name.data() + prefix.size(), file_name.data() + end, index);
  if (err != std::errc()) return std::nullopt;
  return index;
}

}  // namespace e3::jobs
