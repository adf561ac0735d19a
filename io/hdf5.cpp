#include "io/hdf5.h"

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace e3::io {

namespace {

herr_t collect(unsigned n, const H5E_error2_t* err, void* out) {
  auto* text = static_cast<std::string*>(out);
  if (!text->empty()) text->append("; ");
  text->append(err->desc ? err->desc : "?");
  if (err->func_name) text->append(fmt::format(" (in {})", err->func_name));
  return n >= 2 ? -1 : 0;  // the innermost few are the informative ones
}

#if H5_VERSION_GE(1, 12, 0)
herr_t collect_link(hid_t, const char* name, const H5L_info2_t*, void* out) {
#else
herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
#endif
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// HDF5's words for a file lock it could not take ("unable to lock the file", "file lock request
// failed", flock's "No locks available"); not any "lock": the extensible arrays' superblock
// functions (H5EA__sblock_*) fail on a damaged file, and that is no file-system matter.
bool mentions_file_locking(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* phrase : {"lock the file", "lock file", "file lock", "flock", "no locks available"})
    if (text.find(phrase) != std::string::npos) return true;
  return false;
}

}  // namespace

std::vector<std::string> list_links(hid_t group, const std::string& where) {
  std::vector<std::string> names;
  E3_H5(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_link, &names), "listing {}", where);
  return names;
}

std::optional<uint64_t> contiguous_offset(hid_t dataset) {
  H5Id dcpl(E3_H5(H5Dget_create_plist(dataset), "H5Dget_create_plist"), H5Pclose);
  if (H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS) return std::nullopt;
  if (H5Pget_nfilters(dcpl.get()) > 0) return std::nullopt;
  const haddr_t offset = H5Dget_offset(dataset);
  if (offset == HADDR_UNDEF) return std::nullopt;
  return static_cast<uint64_t>(offset);
}

void read_stored(hid_t dataset, void* out, const std::string& where) {
  H5Id type(E3_H5(H5Dget_type(dataset), "{}: H5Dget_type", where), H5Tclose);
  E3_H5(H5Dread(dataset, type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out), "reading {}", where);
}

void require_regular_file(const std::filesystem::path& path, ErrorKind kind) {
  struct stat st {};
  E3_REQUIRE(::lstat(path.c_str(), &st) == 0, kind, "{}: {}", path.string(), std::strerror(errno));
  const char* what = S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISDIR(st.st_mode) ? "a directory" : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISREG(st.st_mode) ? nullptr : "a device or other special file";
  E3_REQUIRE(what == nullptr, kind, "{}: is {}, not a regular file (a shard is a plain file written by a run)",
             path.string(), what ? what : "");
}

std::string hdf5_error_text() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &text);
  if (text.empty()) text = "HDF5 error";
  std::replace(text.begin(), text.end(), '\n', ' ');  // ctime() in its write errors ends a line
  // The two failures an HPC user meets most, with what to do about them.
  if (text.find("No space left") != std::string::npos || text.find("errno = 28") != std::string::npos)
    text += std::string(" ") + kDiskFullHint;
  else if (mentions_file_locking(text))
    text += " [this file system does not support file locking: export HDF5_USE_FILE_LOCKING=FALSE (with mpirun -x "
            "HDF5_USE_FILE_LOCKING, or in the sbatch script)]";
  return text;
}

H5Id file_access_list() {
  H5Id fapl(E3_H5(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
  // Each shard is written by one process under a private name and renamed when whole, so
  // HDF5's advisory lock guards nothing here; where the file system cannot lock (some NFS and
  // Lustre mounts) go on without it rather than fail.
  E3_H5(H5Pset_file_locking(fapl.get(), true, true), "H5Pset_file_locking");
  return fapl;
}

H5Id file_create_access_list() {
  H5Id fapl = file_access_list();
  E3_H5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), "H5Pset_libver_bounds");
  return fapl;
}

void silence_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void H5Id::close() {
  if (id_ < 0 || !closer_) return;
  const herr_t rc = closer_(std::exchange(id_, H5I_INVALID_HID));
  E3_REQUIRE(rc >= 0, ErrorKind::Output, "closing an HDF5 object failed: {}", hdf5_error_text());
}

H5Id file_type_for(DType dtype) {
  if (dtype == DType::F32) return H5Id(E3_H5(H5Tcopy(H5T_IEEE_F32LE), "H5Tcopy"), H5Tclose);
  // fp8: the e4m3fn bits as uint8 (HDF5 has no such float; the dataset's `encoding` says so).
  if (dtype == DType::F8E4M3) return H5Id(E3_H5(H5Tcopy(H5T_STD_U8LE), "H5Tcopy"), H5Tclose);
  // A custom little-endian float built from IEEE single, narrowed to 16 bits.
  H5Id t(E3_H5(H5Tcopy(H5T_IEEE_F32LE), "H5Tcopy"), H5Tclose);
  const bool bf16 = dtype == DType::BF16;
  const size_t exp_bits = bf16 ? 8 : 5, man_bits = bf16 ? 7 : 10;
  E3_H5(H5Tset_fields(t.get(), 15, man_bits, exp_bits, 0, man_bits), "H5Tset_fields");
  E3_H5(H5Tset_offset(t.get(), 0), "H5Tset_offset");
  E3_H5(H5Tset_precision(t.get(), 16), "H5Tset_precision");
  E3_H5(H5Tset_size(t.get(), 2), "H5Tset_size");
  E3_H5(H5Tset_ebias(t.get(), bf16 ? 127 : 15), "H5Tset_ebias");
  return t;
}

std::optional<DType> storage_dtype_of(hid_t type) {
  if (H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 1 && H5Tget_sign(type) == H5T_SGN_NONE)
    return DType::F8E4M3;  // only together with the fp8 encoding attribute (verify checks it)
  if (H5Tget_class(type) != H5T_FLOAT) return std::nullopt;
  const size_t size = H5Tget_size(type);
  if (size == 4) return DType::F32;
  if (size != 2) return std::nullopt;
  size_t spos, epos, esize, mpos, msize;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return std::nullopt;
  if (esize == 8 && msize == 7 && H5Tget_ebias(type) == 127) return DType::BF16;
  if (esize == 5 && msize == 10 && H5Tget_ebias(type) == 15) return DType::F16;
  return std::nullopt;
}

bool stored_as(hid_t ds, hid_t type, const StoredPart& part) {
  if (!part.encoding) return storage_dtype_of(type) == part.element;
  return H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == dtype_size(part.element) &&
         read_attr_string(ds, "encoding") == std::string(part.encoding);
}

void write_attr(hid_t obj, const char* name, const std::string& value) {
  H5Id type(E3_H5(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  E3_H5(H5Tset_size(type.get(), std::max<size_t>(value.size(), 1)), "H5Tset_size");
  E3_H5(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "H5Tset_strpad");
  H5Id space(E3_H5(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  H5Id attr(E3_H5(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                  "creating attribute '{}'", name),
            H5Aclose);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  E3_H5(H5Awrite(attr.get(), type.get(), padded.data()), "writing attribute '{}'", name);
}

void write_attr(hid_t obj, const char* name, int64_t value) {
  H5Id space(E3_H5(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  H5Id attr(E3_H5(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                  "creating attribute '{}'", name),
            H5Aclose);
  E3_H5(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), "writing attribute '{}'", name);
}

void write_attr(hid_t obj, const char* name, const std::vector<int32_t>& values) {
  const hsize_t n = values.size();
  H5Id space(E3_H5(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"), H5Sclose);
  H5Id attr(E3_H5(H5Acreate2(obj, name, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                  "creating attribute '{}'", name),
            H5Aclose);
  E3_H5(H5Awrite(attr.get(), H5T_NATIVE_INT32, values.data()), "writing attribute '{}'", name);
}

void write_attr(hid_t obj, const char* name, const std::vector<std::string>& values) {
  size_t width = 1;
  for (const std::string& v : values) width = std::max(width, v.size());
  std::string packed(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(packed.data() + i * width, values[i].data(), values[i].size());
  H5Id type(E3_H5(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  E3_H5(H5Tset_size(type.get(), width), "H5Tset_size");
  E3_H5(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "H5Tset_strpad");
  const hsize_t n = values.size();
  H5Id space(E3_H5(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"), H5Sclose);
  H5Id attr(E3_H5(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                  "creating attribute '{}'", name),
            H5Aclose);
  E3_H5(H5Awrite(attr.get(), type.get(), packed.data()), "writing attribute '{}'", name);
}

std::optional<std::vector<std::string>> read_attr_strings(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  H5Id attr(E3_H5(H5Aopen(obj, name, H5P_DEFAULT), "opening attribute '{}'", name), H5Aclose);
  H5Id type(E3_H5(H5Aget_type(attr.get()), "H5Aget_type"), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return std::nullopt;
  H5Id space(E3_H5(H5Aget_space(attr.get()), "H5Aget_space"), H5Sclose);
  const auto n = static_cast<size_t>(std::max<hssize_t>(H5Sget_simple_extent_npoints(space.get()), 0));
  const size_t width = H5Tget_size(type.get());
  std::string packed(n * width, '\0');
  E3_H5(H5Aread(attr.get(), type.get(), packed.data()), "reading attribute '{}'", name);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    std::string v = packed.substr(i * width, width);
    v.resize(std::strlen(v.c_str()));
    out.push_back(std::move(v));
  }
  return out;
}

std::optional<std::string> read_attr_string(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  H5Id attr(E3_H5(H5Aopen(obj, name, H5P_DEFAULT), "opening attribute '{}'", name), H5Aclose);
  H5Id type(E3_H5(H5Aget_type(attr.get()), "H5Aget_type"), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return std::nullopt;
  std::string value(H5Tget_size(type.get()), '\0');
  E3_H5(H5Aread(attr.get(), type.get(), value.data()), "reading attribute '{}'", name);
  value.resize(std::strlen(value.c_str()));
  return value;
}

std::optional<int64_t> read_attr_int(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  H5Id attr(E3_H5(H5Aopen(obj, name, H5P_DEFAULT), "opening attribute '{}'", name), H5Aclose);
  int64_t v = 0;
  E3_H5(H5Aread(attr.get(), H5T_NATIVE_INT64, &v), "reading attribute '{}'", name);
  return v;
}

std::optional<std::vector<int32_t>> read_attr_ints(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  H5Id attr(E3_H5(H5Aopen(obj, name, H5P_DEFAULT), "opening attribute '{}'", name), H5Aclose);
  H5Id space(E3_H5(H5Aget_space(attr.get()), "H5Aget_space"), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<int32_t> v(static_cast<size_t>(std::max<hssize_t>(n, 0)));
  E3_H5(H5Aread(attr.get(), H5T_NATIVE_INT32, v.data()), "reading attribute '{}'", name);
  return v;
}

}  // namespace e3::io
