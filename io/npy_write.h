// Writes one NumPy .npy file (NumPy's "format.rst", version 1.0): the speculators trainer loads
// its draft-vocabulary mapping (d2t.npy, t2d.npy) with np.load.
#pragma once

#include <filesystem>

#include "io/tensor_file.h"

namespace e3::io {

// The bytes np.save writes for a C-order array of the tensor's element type and shape (the
// header laid out as NumPy 1.24 lays it out, so the file is byte for byte np.save's): I64, I32,
// U8, Bool, F32, F16 ("<i8", "<i4", "|u1", "|b1", "<f4", "<f2"); BF16 has no NumPy type and is a
// caller's bug. Written as PATH.tmp.<pid>, closed and renamed to PATH. Throws ErrorKind::Output
// naming PATH on a failed write, ErrorKind::Internal on a caller's bug.
void write_npy(const std::filesystem::path& path, const TensorRef& tensor);

}  // namespace e3::io
