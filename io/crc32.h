// CRC-32 as zip stores it (ISO-HDLC: reflected polynomial 0xEDB88320, initial and final value
// 0xFFFFFFFF), at memory speed: the torch.save writer checksums every byte it writes, and the
// exporter must run at storage speed, which byte tables (zlib's crc32 included) fall short of.
#pragma once

#include <cstddef>
#include <cstdint>

namespace e3::io {

// Continues `crc` over `n` bytes; crc32(crc32(0, a), b) == crc32(0, a followed by b).
uint32_t crc32(uint32_t crc, const void* data, size_t n);

namespace detail {
// The table method (eight bytes a step), used for short pieces and where the CPU lacks
// carry-less multiplication; exposed so tests compare both.
uint32_t crc32_tables(uint32_t crc, const void* data, size_t n);
// Whether crc32() folds with PCLMULQDQ on this CPU.
bool crc32_uses_clmul();
}  // namespace detail

}  // namespace e3::io
