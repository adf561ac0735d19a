// The writer path's account: its stages add up, and its line says which side sets the pace.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "io/write_account.h"

namespace e3::io {
namespace {

using std::chrono::milliseconds;

TEST(WriteAccount, SaysTheDeviceSetsThePaceWhenTheWriterWaitsForIt) {
  WriteAccount a;
  a.add(WriteStage::DataWrite, milliseconds(1000));
  a.add(WriteStage::DeviceWait, milliseconds(3000));
  a.add_bytes(3'000'000'000);
  const std::string line = a.summary();
  EXPECT_NE(line.find("3.00 GB of states"), std::string::npos) << line;
  EXPECT_NE(line.find("data writes 1.0 s = 3.00 GB/s"), std::string::npos) << line;
  EXPECT_NE(line.find("waiting for the device 3.0 s: the device sets the pace"), std::string::npos) << line;
}

TEST(WriteAccount, SaysTheWriterSetsThePaceWhenItNeverWaits) {
  WriteAccount a;
  a.add(WriteStage::Scan, milliseconds(500));
  a.add(WriteStage::DataWrite, milliseconds(2000));
  a.add(WriteStage::Metadata, milliseconds(300));
  a.add(WriteStage::Close, milliseconds(200));
  a.add(WriteStage::DeviceWait, milliseconds(100));
  a.add(WriteStage::Checksum, milliseconds(700));
  const std::string line = a.summary();
  EXPECT_NE(line.find("writer thread busy 3.0 s"), std::string::npos) << line;
  EXPECT_NE(line.find("the writer sets the pace"), std::string::npos) << line;
  EXPECT_NE(line.find("checksum 0.7 s"), std::string::npos) << line;
}

TEST(WriteAccount, ATimerAddsItsScopeOnceAndNothingWithoutAnAccount) {
  WriteAccount a;
  {
    StageTimer t(&a, WriteStage::Sync);
    t.stop();
    t.stop();
  }
  EXPECT_GE(a.seconds(WriteStage::Sync), 0.0);
  EXPECT_LT(a.seconds(WriteStage::Sync), 1.0);
  { StageTimer none(nullptr, WriteStage::Sync); }
  EXPECT_EQ(a.seconds(WriteStage::Scan), 0.0);
}

}  // namespace
}  // namespace e3::io
