#include "io/write_account.h"

#include <fmt/format.h>

namespace e3::io {

std::string WriteAccount::summary() const {
  auto s = [&](WriteStage st) { return seconds(st); };
  const double writer = s(WriteStage::Scan) + s(WriteStage::Gather) + s(WriteStage::DataWrite) +
                        s(WriteStage::Metadata) + s(WriteStage::Close);
  return fmt::format(
      "{:.2f} GB of states; writer thread busy {:.1f} s (NaN/Inf scan {:.1f} s, gather {:.1f} s, data writes {:.1f} s "
      "= {:.2f} GB/s, HDF5 metadata {:.1f} s, shard close {:.1f} s), waiting for the device {:.1f} s; publisher: "
      "checksum {:.1f} s, fsync and rename {:.1f} s; the device waited {:.1f} s for the writer",
      static_cast<double>(bytes()) * 1e-9, writer, s(WriteStage::Scan), s(WriteStage::Gather), s(WriteStage::DataWrite),
      s(WriteStage::DataWrite) > 0 ? static_cast<double>(bytes()) * 1e-9 / s(WriteStage::DataWrite) : 0.0,
      s(WriteStage::Metadata), s(WriteStage::Close), s(WriteStage::DeviceWait), s(WriteStage::Checksum),
      s(WriteStage::Sync), s(WriteStage::SlotWait));
}

}  // namespace e3::io
