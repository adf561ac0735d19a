#include "jobs/output_dir.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "io/shard_writer.h"
#include "kernels/error.h"

namespace e3::jobs {

OutputState prepare_output_dir(const std::filesystem::path& out, const io::RunFingerprint& fp,
                               const std::string& data_fingerprint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out, ec);
  E3_REQUIRE(!ec, ErrorKind::Output, "cannot create --out {}: {}", out.string(), ec.message());
  E3_REQUIRE(fs::is_directory(out), ErrorKind::Output, "--out {} is not a directory", out.string());
  {
    const auto probe = out / fmt::format(".write-test.{}", ::getpid());
    std::ofstream f(probe);
    f << "ok\n";
    f.flush();
    const bool ok = f.good();
    f.close();
    fs::remove(probe, ec);
    E3_REQUIRE(ok, ErrorKind::Output, "--out {} is not writable", out.string());
  }

  OutputState state;
  std::map<int64_t, io::CommittedShard> by_index;
  if (auto m = io::read_manifest(out)) {
    const auto diffs = m->fingerprint.differences(fp);
    E3_REQUIRE(diffs.empty(), ErrorKind::Output,
               "refusing to resume into {}: it holds output of a run with other settings ({}); use another "
               "--out or remove it",
               out.string(), fmt::join(diffs, "; "));
    E3_REQUIRE(m->data_fingerprint == data_fingerprint, ErrorKind::Output,
               "refusing to resume into {}: --data has other samples or lengths than the run that wrote it ({} "
               "vs {})",
               out.string(), m->data_path, data_fingerprint);
    for (const io::CommittedShard& s : m->shards) {
      const auto path = out / s.file;
      if (fs::exists(path) && fs::file_size(path) == s.bytes) {
        by_index[s.shard_index] = s;
      } else {
        spdlog::warn("{}: listed in the manifest but missing or resized; it will be written again", path.string());
      }
    }
  }
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".h5.tmp.") != std::string::npos || name.rfind(std::string(io::kManifestName) + ".tmp.", 0) == 0) {
      fs::remove(entry.path(), ec);
      ++state.temps_removed;
      continue;
    }
    if (entry.path().extension() != ".h5") continue;
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

}  // namespace e3::jobs
