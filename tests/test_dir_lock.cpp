// One job per output directory: the lock (flock, and the exclusive-file fallback for file
// systems without locks, with its staleness rules), and the claim on --out that a failed
// start gives back.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "jobs/dir_lock.h"
#include "jobs/output_dir.h"
#include "core/error.h"
#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using e3::ErrorKind;
using e3::jobs::DirLock;
using e3::jobs::LockHolder;
using e3::jobs::LockMethod;
using e3::jobs::LockOptions;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

LockOptions exclusive(const std::string& host, long pid, const std::string& slurm = "") {
  return {LockMethod::ExclusiveFile, LockHolder{host, pid, slurm}};
}

// A pid that is certainly not running: a child that has exited and been reaped.
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return static_cast<long>(child);
}

void write_holder_file(const fs::path& p, const LockHolder& h) {
  std::ofstream(p) << "host=" << h.host << "\npid=" << h.pid << "\nslurm_job_id=" << h.slurm_job_id << "\n";
}

TEST(DirLock, NamesPerPart) {
  EXPECT_EQ(e3::jobs::lock_file_name({}), ".lock");
  EXPECT_EQ(e3::jobs::lock_file_name({3, 8}), ".lock.part-0003-of-0008");
}

TEST(DirLock, TheHolderNamesTheSlurmJobOfItsStartUpEnvironment) {
  const LockHolder in_slurm = LockHolder::this_process(e3::Environment(std::map<std::string, std::string>{{"SLURM_JOB_ID", "345"}}));
  EXPECT_EQ(in_slurm.slurm_job_id, "345");
  EXPECT_NE(in_slurm.describe().find(", Slurm job 345"), std::string::npos) << in_slurm.describe();
  EXPECT_EQ(in_slurm.pid, static_cast<long>(::getpid()));
  EXPECT_EQ(LockHolder::this_process(e3::Environment{}).slurm_job_id, "");
  e3::test::TempDir dir;
  auto claim = e3::jobs::OutputClaim::take(dir.path(), {}, {LockMethod::Auto, in_slurm});
  EXPECT_EQ(e3::jobs::read_lock_holder(dir / ".lock").slurm_job_id, "345");
}

TEST(DirLock, SecondHolderIsRefusedNamingTheFirstAndTheFileGoesAtRelease) {
  e3::test::TempDir dir;
  const LockHolder me = LockHolder::this_process(e3::Environment{});
  {
    DirLock first = DirLock::acquire(dir.path(), ".lock");
    EXPECT_TRUE(first.uses_flock());
    EXPECT_NE(read_text(dir / ".lock").find("pid=" + std::to_string(me.pid)), std::string::npos);
    // flock locks belong to an open file, so a second acquire conflicts even in this process.
    const auto err = e3::test::error_of([&] { DirLock::acquire(dir.path(), ".lock"); });
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->kind(), ErrorKind::Output);
    const std::string msg = err->what();
    EXPECT_NE(msg.find("host " + me.host + ", pid " + std::to_string(me.pid)), std::string::npos) << msg;
    EXPECT_NE(msg.find((dir / ".lock").string()), std::string::npos) << msg;
    // Another part is another lock.
    EXPECT_NO_THROW(DirLock::acquire(dir.path(), ".lock.part-0001-of-0002"));
  }
  EXPECT_FALSE(fs::exists(dir / ".lock"));
  EXPECT_FALSE(fs::exists(dir / ".lock.part-0001-of-0002"));
}

TEST(DirLock, AFileLeftByAKilledHolderIsLockedAgain) {
  e3::test::TempDir dir;
  write_holder_file(dir / ".lock", {"elsewhere", 4242, "77"});  // what kill -9 leaves: a file, no lock
  DirLock lock = DirLock::acquire(dir.path(), ".lock");
  EXPECT_NE(read_text(dir / ".lock").find("pid=" + std::to_string(::getpid())), std::string::npos);
}

TEST(DirLock, MovedLockReleasesOnce) {
  e3::test::TempDir dir;
  std::optional<DirLock> held;
  {
    DirLock a = DirLock::acquire(dir.path(), ".lock");
    held.emplace(std::move(a));
  }
  EXPECT_TRUE(fs::exists(dir / ".lock"));
  held.reset();
  EXPECT_FALSE(fs::exists(dir / ".lock"));
}

TEST(DirLockExclusiveFile, ALiveHolderIsRefusedWithHowToClearIt) {
  e3::test::TempDir dir;
  const LockHolder me = LockHolder::this_process(e3::Environment{});
  DirLock first = DirLock::acquire(dir.path(), ".lock", exclusive(me.host, me.pid, "100"));
  EXPECT_FALSE(first.uses_flock());
  // Another job on this host: the holder (this very process) is alive.
  const auto err = e3::test::error_of([&] { DirLock::acquire(dir.path(), ".lock", exclusive(me.host, 1, "200")); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  const std::string msg = err->what();
  EXPECT_NE(msg.find("host " + me.host + ", pid " + std::to_string(me.pid) + ", Slurm job 100"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("remove " + (dir / ".lock").string()), std::string::npos) << msg;
  // A holder on another host cannot be checked: refused too.
  write_holder_file(dir / ".lock.part-0000-of-0002", {"other-host", dead_pid(), ""});
  EXPECT_TRUE(e3::test::error_of([&] {
                DirLock::acquire(dir.path(), ".lock.part-0000-of-0002", exclusive(me.host, me.pid));
              }).has_value());
}

TEST(DirLockExclusiveFile, StaleWhenItsProcessIsGoneFromThisHost) {
  e3::test::TempDir dir;
  const LockHolder me = LockHolder::this_process(e3::Environment{});
  write_holder_file(dir / ".lock", {me.host, dead_pid(), ""});
  {
    DirLock lock = DirLock::acquire(dir.path(), ".lock", exclusive(me.host, me.pid));
    EXPECT_NE(read_text(dir / ".lock").find("pid=" + std::to_string(me.pid)), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(dir / ".lock"));
}

TEST(DirLockExclusiveFile, StaleWhenItNamesThisVeryProcess) {
  // Left by an earlier process with the same pid on this host (a restarted container).
  e3::test::TempDir dir;
  const long pid = static_cast<long>(::getpid());  // alive: only the "it is us" rule makes it stale
  write_holder_file(dir / ".lock", {"box", pid, ""});
  EXPECT_NO_THROW(DirLock::acquire(dir.path(), ".lock", exclusive("box", pid)));
}

TEST(DirLockExclusiveFile, StaleWhenItNamesThisSlurmJob) {
  e3::test::TempDir dir;
  const LockHolder me = LockHolder::this_process(e3::Environment{});
  // A requeued job: its earlier run on another node holds the file; same job id, so it is ours.
  write_holder_file(dir / ".lock", {"node-a", 12345, "9001"});
  EXPECT_NO_THROW(DirLock::acquire(dir.path(), ".lock", exclusive("node-b", me.pid, "9001")));
  write_holder_file(dir / ".lock", {"node-a", 12345, "9001"});
  EXPECT_TRUE(e3::test::error_of([&] {
                DirLock::acquire(dir.path(), ".lock", exclusive("node-b", me.pid, "9002"));
              }).has_value());
  EXPECT_TRUE(e3::test::error_of([&] {
                DirLock::acquire(dir.path(), ".lock", exclusive("node-b", me.pid, ""));
              }).has_value());
}

TEST(OutputClaim, AFailedStartRemovesTheDirectoriesItCreated) {
  e3::test::TempDir dir;
  const fs::path out = dir / "a/b/out";
  {
    auto claim = e3::jobs::OutputClaim::take(out, {});
    EXPECT_TRUE(fs::exists(out / ".lock"));
  }
  EXPECT_FALSE(fs::exists(dir / "a"));
  {
    auto claim = e3::jobs::OutputClaim::take(out, {1, 2});
    EXPECT_TRUE(fs::exists(out / ".lock.part-0001-of-0002"));
    claim.keep();
  }
  EXPECT_TRUE(fs::is_directory(out));
  EXPECT_TRUE(fs::is_empty(out));
  // A directory that existed before is never removed.
  { auto claim = e3::jobs::OutputClaim::take(out, {}); }
  EXPECT_TRUE(fs::is_directory(out));
}

TEST(OutputClaim, SecondClaimOfTheSameDirectoryIsAnOutputError) {
  e3::test::TempDir dir;
  auto first = e3::jobs::OutputClaim::take(dir.path(), {});
  const auto err = e3::test::error_of([&] { e3::jobs::OutputClaim::take(dir.path(), {}); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Output);
  EXPECT_NO_THROW(e3::jobs::OutputClaim::take(dir.path(), {0, 2}));
  EXPECT_TRUE(fs::exists(dir / ".lock"));
}

TEST(OutputClaim, TheWriteProbeNeverFollowsALink) {
  e3::test::TempDir dir;
  const fs::path out = dir / "out";
  fs::create_directories(out);
  e3::test::write_text(dir / "precious", "keep me");
  const fs::path probe =
      out / (".write-test." + LockHolder::this_process(e3::Environment{}).host + "." + std::to_string(::getpid()));
  fs::create_symlink(dir / "precious", probe);
  { auto claim = e3::jobs::OutputClaim::take(out, {}); }
  EXPECT_EQ(read_text(dir / "precious"), "keep me");
  EXPECT_FALSE(fs::exists(fs::symlink_status(probe)));
}

}  // namespace
