#include "io/write_account.h"

#include <fmt/format.h>

namespace e3::io {

std::string WriteAccount::summary() const {
  auto s = [&](WriteStage st) { return seconds(st); };
  const double busy =
      s(WriteStage::Scan) + s(WriteStage::DataWrite) + s(WriteStage::Metadata) + s(WriteStage::Close);
  const double waiting = s(WriteStage::DeviceWait);
  // A writer idle for a fifth of its time or more is not what holds the run back.
  const char* pace = waiting >= 0.25 * busy ? "the device sets the pace, not the writer"
                                            : "the writer sets the pace: the device waits for it";
  return fmt::format(
      "{:.2f} GB of states; writer thread busy {:.1f} s (NaN/Inf scan {:.1f} s, data writes {:.1f} s = {:.2f} GB/s, "
      "HDF5 metadata {:.1f} s, shard close {:.1f} s), waiting for the device {:.1f} s: {}; device-to-host copies "
      "{:.1f} s (beside the compute); publisher thread: checksum {:.1f} s, writeback, fsync and rename {:.1f} s",
      static_cast<double>(bytes()) * 1e-9, busy, s(WriteStage::Scan), s(WriteStage::DataWrite),
      s(WriteStage::DataWrite) > 0 ? static_cast<double>(bytes()) * 1e-9 / s(WriteStage::DataWrite) : 0.0,
      s(WriteStage::Metadata), s(WriteStage::Close), waiting, pace, s(WriteStage::DeviceCopy), s(WriteStage::Checksum),
      s(WriteStage::Sync));
}

}  // namespace e3::io
