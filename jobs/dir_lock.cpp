#include "jobs/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"

namespace e3::jobs {

LockHolder LockHolder::this_process(const Environment& env) {
  LockHolder h;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  h.host = host;
  h.pid = static_cast<long>(::getpid());
  h.slurm_job_id = env.get("SLURM_JOB_ID").value_or("");
  return h;
}

std::string LockHolder::describe() const {
  if (host.empty() && pid == 0) return "holder not recorded yet";
  return fmt::format("host {}, pid {}{}", host.empty() ? "?" : host, pid,
                     slurm_job_id.empty() ? "" : ", Slurm job " + slurm_job_id);
}

std::string lock_file_name(const io::Part& part) {
  if (part.count == 1) return ".lock";
  return fmt::format(".lock.part-{:04d}-of-{:04d}", part.index, part.count);
}

namespace {

namespace fs = std::filesystem;

LockHolder parse_holder(const std::string& text) {
  LockHolder h;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "host") h.host = value;
    if (key == "pid") h.pid = std::strtol(value.c_str(), nullptr, 10);
    if (key == "slurm_job_id") h.slurm_job_id = value;
  }
  return h;
}

std::string read_all(int fd) {
  std::string text;
  char buf[512];
  off_t at = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0 || text.size() > 4096) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

void write_holder(int fd, const fs::path& path, const LockHolder& self) {
  const std::string text =
      fmt::format("host={}\npid={}\nslurm_job_id={}\n", self.host, self.pid, self.slurm_job_id);
  const bool ok = ::ftruncate(fd, 0) == 0 &&
                  ::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size());
  E3_REQUIRE(ok, ErrorKind::Output, "cannot write the lock file {}: {}", path.string(), std::strerror(errno));
}

// A flock dies with its process; a lock server may still keep one of a crashed client, and
// an exclusive file always outlives it: the message says how to clear either.
[[noreturn]] void throw_in_use(const fs::path& dir, const fs::path& file, const LockHolder& holder,
                               const LockOptions& options) {
  E3_THROW(ErrorKind::Output,
           "{} {} is in use by another job ({}): {}; wait for that job to end or {}; if no such job is running any "
           "more, remove {}",
           options.what, dir.string(), holder.describe(), options.rule, options.instead, file.string());
}

bool unsupported_lock(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS; }

// Why an exclusive lock file left behind no longer holds anything, or nullopt while its
// holder may still be running.
std::optional<std::string> stale_reason(const LockHolder& holder, const LockHolder& self) {
  if (!holder.slurm_job_id.empty() && holder.slurm_job_id == self.slurm_job_id)
    return fmt::format("it names this Slurm job {} (requeued)", self.slurm_job_id);
  // This process is asking for the lock, so a file naming it is from an earlier process that
  // had the same pid (pids repeat across container restarts).
  if (!holder.host.empty() && holder.host == self.host && holder.pid == self.pid)
    return fmt::format("it names this process ({} on {}), which does not hold it", holder.pid, holder.host);
  if (!holder.host.empty() && holder.host == self.host && holder.pid > 0 &&
      ::kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH)
    return fmt::format("process {} is gone from {}", holder.pid, holder.host);
  return std::nullopt;
}

[[noreturn]] void throw_not_writable(const fs::path& dir, int err, const LockOptions& options) {
  E3_THROW(ErrorKind::Output, "{} {} is not writable: {}", options.what, dir.string(), std::strerror(err));
}

}  // namespace

LockHolder read_lock_holder(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) text = read_all(fd);
  ::close(fd);
  return parse_holder(text);
}

DirLock::DirLock(fs::path path, int fd, bool flock) : path_(std::move(path)), fd_(fd), flock_(flock) {
  struct stat st {};
  if (::fstat(fd_, &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
}

DirLock::DirLock(DirLock&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      flock_(other.flock_),
      dev_(other.dev_),
      ino_(other.ino_) {}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    flock_ = other.flock_;
    dev_ = other.dev_;
    ino_ = other.ino_;
  }
  return *this;
}

DirLock::~DirLock() { release(); }

void DirLock::release() noexcept {
  if (fd_ < 0) return;
  // Removed while still locked, so that a job waiting on this file finds it gone and starts
  // over on a new one; only our own file (a stale-lock takeover may have replaced it).
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

DirLock DirLock::acquire(const fs::path& dir, const std::string& name, const LockOptions& options) {
  const fs::path file = dir / name;
  // Each attempt either returns, throws, or found the file replaced under it (its holder
  // ended, or a stale file was taken over by someone else) and looks again.
  for (int attempt = 0; attempt < 20; ++attempt) {
    bool created = true;
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
      created = false;
      fd = ::open(file.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) continue;  // removed by its holder just now
      if (fd < 0 && errno == ELOOP)
        E3_THROW(ErrorKind::Output, "{} is a symbolic link; a lock file must be a plain file: remove it",
                 file.string());
    }
    if (fd < 0) throw_not_writable(dir, errno, options);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      E3_THROW(ErrorKind::Output, "{} is not a regular file; it must be this tool's lock file: remove it",
               file.string());
    }

    if (options.method == LockMethod::Auto) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        struct stat now {};
        if (::lstat(file.c_str(), &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
          ::close(fd);  // its holder removed it between our open and our lock
          continue;
        }
        DirLock lock(file, fd, true);
        if (!created) {
          const LockHolder earlier = parse_holder(read_all(fd));
          if (earlier.pid != 0)
            spdlog::info("{}: taking over the lock file of a job that ended without removing it ({})", file.string(),
                         earlier.describe());
        }
        write_holder(fd, file, options.self);
        return lock;
      }
      const int err = errno;
      if (err == EWOULDBLOCK) {
        const LockHolder holder = parse_holder(read_all(fd));
        ::close(fd);
        throw_in_use(dir, file, holder, options);
      }
      if (!unsupported_lock(err)) {
        ::close(fd);
        E3_THROW(ErrorKind::Output, "cannot lock {}: {}", file.string(), std::strerror(err));
      }
      spdlog::debug("{}: this file system has no locks ({}); the lock file's existence is the lock", file.string(),
                    std::strerror(err));
    }

    // No locks here: whoever created the file holds it.
    if (created) {
      DirLock lock(file, fd, false);
      write_holder(fd, file, options.self);
      return lock;
    }
    const LockHolder holder = parse_holder(read_all(fd));
    ::close(fd);
    const std::optional<std::string> stale = stale_reason(holder, options.self);
    if (!stale) throw_in_use(dir, file, holder, options);
    // Remove the stale file only if it is still the one that was read.
    struct stat now {};
    if (::lstat(file.c_str(), &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) {
      spdlog::warn("{}: removing a stale lock file ({}): {}", file.string(), holder.describe(), *stale);
      if (::unlink(file.c_str()) != 0 && errno != ENOENT)
        E3_THROW(ErrorKind::Output, "cannot remove the stale lock file {}: {}", file.string(), std::strerror(errno));
    }
  }
  E3_THROW(ErrorKind::Output, "cannot take the lock {}: it keeps being replaced by other jobs", file.string());
}

}  // namespace e3::jobs
