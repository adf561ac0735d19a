// One job per output directory (or per --part of it): an exclusive lock held for the whole
// job through a lock file in --out that names its holder.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

#include "core/environment.h"
#include "io/manifest.h"

namespace e3::jobs {

// Who holds a lock: written into the lock file so that a refused job can name the holder.
struct LockHolder {
  std::string host;
  long pid = 0;
  std::string slurm_job_id;  // empty outside Slurm

  // gethostname, getpid, and SLURM_JOB_ID of the start-up environment `env`.
  static LockHolder this_process(const Environment& env);
  std::string describe() const;      // "host h, pid 12, Slurm job 345"
};

enum class LockMethod {
  Auto,           // flock; where the file system has no locks, ExclusiveFile
  ExclusiveFile,  // the file's existence is the lock (O_CREAT|O_EXCL); stale holders are detected
};

struct LockOptions {
  LockMethod method = LockMethod::Auto;
  // A job names itself with its environment (its Slurm job id); this default names no job.
  LockHolder self = LockHolder::this_process(Environment{});
  // How the messages name the directory and the rule it keeps ("--out" for the extraction;
  // export names its DEST).
  std::string what = "--out";
  std::string rule = "one job at a time writes a directory (or one --part of it)";
  std::string instead = "use another --out";
};

// ".lock" for a single job, ".lock.part-0003-of-0008" for part 3 of 8.
std::string lock_file_name(const io::Part& part);

// Held from acquire() to destruction; the destructor removes the lock file. After kill -9 a
// flock is released by the kernel and the file left behind is simply locked again; an
// exclusive file left behind is stale once its process is gone from this host, or when it
// names this job's Slurm job id (a requeued job takes its own directory back).
class DirLock {
 public:
  // Throws an output error naming the holder (and how to clear a stale lock) when another
  // job holds it, or naming `dir` when the lock file cannot be created there.
  static DirLock acquire(const std::filesystem::path& dir, const std::string& name, const LockOptions& options = {});

  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

  const std::filesystem::path& path() const { return path_; }
  bool uses_flock() const { return flock_; }

 private:
  DirLock(std::filesystem::path path, int fd, bool flock);
  void release() noexcept;

  std::filesystem::path path_;
  int fd_ = -1;
  bool flock_ = false;
  dev_t dev_ = 0;  // the lock file's identity: only our own file is removed
  ino_t ino_ = 0;
};

// The holder recorded in a lock file (empty fields where the file says nothing).
LockHolder read_lock_holder(const std::filesystem::path& file);

}  // namespace e3::jobs
