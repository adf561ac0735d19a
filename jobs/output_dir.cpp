#include "jobs/output_dir.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "io/shard_writer.h"
#include "io/verify.h"
#include "kernels/error.h"

namespace e3::jobs {

OutputState prepare_output_dir(const std::filesystem::path& out, const io::RunFingerprint& fp,
                               const std::string& data_fingerprint, const io::Part& part, bool check_checksums) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out, ec);
  E3_REQUIRE(!ec, ErrorKind::Output, "cannot create --out {}: {}", out.string(), ec.message());
  E3_REQUIRE(fs::is_directory(out), ErrorKind::Output, "--out {} is not a directory", out.string());
  {
    // Prove now, before any compute, that files can be created and written here.
    char host[64] = {};
    ::gethostname(host, sizeof host - 1);
    const auto probe = out / fmt::format(".write-test.{}.{}", host, ::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    E3_REQUIRE(fd >= 0, ErrorKind::Output, "--out {} is not writable: {}", out.string(), std::strerror(errno));
    const bool wrote = ::write(fd, "ok\n", 3) == 3;
    const int err = errno;
    ::close(fd);
    fs::remove(probe, ec);
    E3_REQUIRE(wrote, ErrorKind::Output, "--out {} is not writable: {}", out.string(), std::strerror(err));
  }

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
  if (auto m = io::read_manifest(out, part)) {
    const auto diffs = m->fingerprint.differences(fp);
    E3_REQUIRE(diffs.empty(), ErrorKind::Output,
               "refusing to resume into {}: it holds output of a run with other settings ({}); use another "
               "--out or remove it",
               out.string(), fmt::join(diffs, "; "));
    E3_REQUIRE(m->data_fingerprint == data_fingerprint, ErrorKind::Output,
               "refusing to resume into {}: --data has other samples or lengths than the run that wrote it ({} "
               "vs {})",
               out.string(), m->data_path, data_fingerprint);
    io::check_manifest_structure(*m, (out / io::manifest_name(part)).string(), ErrorKind::Output,
                                 fmt::format("; it was edited or damaged, so a rerun cannot trust it: see `eagle3_extract "
                                             "verify {}`, and move the directory aside (or use another --out) to "
                                             "start over",
                                             out.string()));
    for (const io::CommittedShard& s : m->shards) {
      const auto path = out / s.file;
      if (!fs::exists(path) || fs::file_size(path) != s.bytes) {
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
    }
  }
  const std::string manifest_temp = io::manifest_name(part) + ".tmp.";
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> index = shard_index_of(name);
    const bool shard_temp = index && name.find(".h5.tmp.") != std::string::npos;
    if ((shard_temp && part.owns(*index)) || name.rfind(manifest_temp, 0) == 0) {
      fs::remove(entry.path(), ec);
      ++state.temps_removed;
      continue;
    }
    if (entry.path().extension() != ".h5" || shard_temp) continue;
    if (index && !part.owns(*index)) continue;  // another part's
    if (!index && part.count > 1) continue;     // not named as a shard: leave it to a single job's scan
    bool known = false;
    for (const auto& [idx, s] : by_index) known = known || s.file == name;
    if (known) continue;
    // A shard renamed into place after the last manifest write: keep it if it is whole and ours.
    std::optional<io::InspectedShard> shard;
    try {
      shard = io::inspect_shard(entry.path());
    } catch (const Error& e) {
      const auto aside = entry.path().string() + ".invalid";
      fs::rename(entry.path(), aside, ec);
      E3_REQUIRE(!ec, ErrorKind::Output, "cannot move aside {}: {}", entry.path().string(), ec.message());
      spdlog::warn("{}; moved to {} and will be written again", e.what(), aside);
      ++state.invalid_moved;
      continue;
    }
    E3_REQUIRE(shard->run_fingerprint == fp.digest(), ErrorKind::Output,
               "refusing to resume into {}: {} was written by a run with other settings; use another --out or "
               "remove it",
               out.string(), entry.path().string());
    E3_REQUIRE(name == io::shard_file_name(shard->record.shard_index), ErrorKind::Output,
               "{}: its shard_index says it should be named {}", entry.path().string(),
               io::shard_file_name(shard->record.shard_index));
    by_index[shard->record.shard_index] = shard->record;
  }
  for (auto& [idx, s] : by_index) state.committed.push_back(std::move(s));
  return state;
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
  return std::stoll(file_name.substr(prefix.size(), end - prefix.size()));
}

}  // namespace e3::jobs
