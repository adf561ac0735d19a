// The layout torch.save writes (torch/serialization.py `_save`, caffe2/serialize/
// inline_container.cc) and torch.load reads:
//   a zip archive, every record stored uncompressed under one folder ("archive/"):
//     data.pkl    the dict, pickled (protocol 2); each tensor is a call of
//                 torch._utils._rebuild_tensor_v2 on a persistent id ('storage', torch.XStorage,
//                 key, 'cpu', element count) that names the record data/<key>
//     byteorder   "little"
//     data/<key>  one per tensor: its bytes
//     version     "3\n", the format torch.save produces (torch 1.13 reads only this record)
//   each record's data starting at a multiple of 64 bytes, padded by an extra field "FB" in its
//   local header as torch pads (mmap=True maps the records in place).
// Not written: `.format_version` and `.storage_alignment` (torch >= 2.6). Given the first, new
// torch may compute record offsets from the exact header layout of its own zip writer (data
// descriptors included) instead of reading each local header; without it every torch reads
// the local headers, as it does for any file written before 2.6. `.data/serialization_id` is
// only logged.
#include "io/torch_save.h"

#include "core/utf8.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "io/crc32.h"
#include "core/error.h"

namespace e3::io {

namespace {

// torch.save names the folder after the file; its reader takes whatever folder the first record
// is in. "archive" is the name torch itself gives when saving to a buffer, and it needs no
// escaping whatever the file is called.
constexpr std::string_view kFolder = "archive/";
constexpr uint64_t kRecordAlignment = 64;
// The tensor bytes go to the file in pieces small enough to stay in cache between the checksum
// and the copy into the page cache.
constexpr size_t kChunk = size_t{1} << 20;

// Zip64 is not written: a file must stay under 4 GiB. A sample reaches that only with about
// 1M tokens at H = 7168 in bf16 (32k tokens x 4 states x 7168 is 1.9 GB), so refusing is
// cheaper than a second format path that no trainer's file ever exercises.
constexpr uint64_t kZip32Limit = 0xFFFFFFFFull;  // a field holding this value means "see zip64"

// ---------------------------------------------------------------------------------------------
// Pickle, protocol 2: only the opcodes the dict needs; no memo, which no reader requires.

class Pickle {
 public:
  Pickle() {
    op(0x80);  // PROTO 2
    op(2);
  }

  void op(unsigned char c) { out_.push_back(static_cast<char>(c)); }

  void integer(int64_t v) {
    if (v >= 0 && v < 0x100) {
      op('K');  // BININT1
      u(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 0x10000) {
      op('M');  // BININT2
      u(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');  // BININT
      u(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    } else {
      // LONG1: the shortest little-endian two's complement, as Python writes it.
      int n = 8;
      while (n > 1) {
        const auto top = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * (n - 1)));
        const auto next = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * (n - 2)));
        if ((top == 0x00 && !(next & 0x80)) || (top == 0xFF && (next & 0x80))) --n;
        else break;
      }
      op(0x8A);
      u(static_cast<uint64_t>(n), 1);
      u(static_cast<uint64_t>(v), n);
    }
  }

  void text(std::string_view s) {  // BINUNICODE
    op('X');
    u(s.size(), 4);
    out_.append(s);
  }

  void global(std::string_view module, std::string_view name) {  // GLOBAL
    op('c');
    out_.append(module).append("\n").append(name).append("\n");
  }

  // A tuple of integers, the way Python's pickler writes one of this length.
  void int_tuple(const std::vector<int64_t>& values) {
    if (values.empty()) {
      op(')');  // EMPTY_TUPLE
      return;
    }
    if (values.size() > 3) op('(');      // MARK
    for (const int64_t v : values) integer(v);
    static constexpr unsigned char kSmall[] = {0, 0x85, 0x86, 0x87};  // TUPLE1..3
    op(values.size() > 3 ? 't' : kSmall[values.size()]);
  }

  const std::string& bytes() const { return out_; }

 private:
  void u(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

const char* storage_class(TensorElement element) {
  switch (element) {
    case TensorElement::BF16: return "BFloat16Storage";
    case TensorElement::F16: return "HalfStorage";
    case TensorElement::F32: return "FloatStorage";
    case TensorElement::I64: return "LongStorage";
    case TensorElement::I32: return "IntStorage";
    case TensorElement::U8: return "ByteStorage";
    case TensorElement::Bool: return "BoolStorage";
  }
  E3_THROW(ErrorKind::Internal, "unknown tensor element {}", static_cast<int>(element));
}

// Contiguous strides as torch computes them (a zero-size dimension counts as one).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict()), where the
// storage is the persistent id of record data/<key>.
void pickle_tensor(Pickle& p, const TensorRef& t, const std::string& key) {
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.op('(');
  p.op('(');
  p.text("storage");
  p.global("torch", storage_class(t.element));
  p.text(key);
  p.text("cpu");
  int64_t numel = 1;
  for (const int64_t d : t.shape) numel *= d;
  p.integer(numel);
  p.op('t');  // TUPLE
  p.op('Q');  // BINPERSID
  p.integer(0);
  p.int_tuple(t.shape);
  p.int_tuple(contiguous_strides(t.shape));
  p.op(0x89);  // NEWFALSE: requires_grad
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');  // REDUCE: OrderedDict()
  p.op('t');
  p.op('R');
}

// ---------------------------------------------------------------------------------------------
// Zip, "stored" records, sizes and checksums in the local headers (no data descriptors).

struct Record {
  std::string name;  // with the folder
  const void* data;
  uint64_t size;
  const TensorFill* fill = nullptr;  // the bytes come from it when set
  uint64_t header_offset = 0;
  uint64_t padding = 0;  // bytes of the "FB" extra field's payload
  uint32_t crc = 0;
};

constexpr uint64_t kLocalHeader = 30;
constexpr uint64_t kCentralHeader = 46;
constexpr uint64_t kEndRecord = 22;
constexpr uint16_t kVersion = 20;    // 2.0: stored records in folders
constexpr uint16_t kDosDate = 0x21;  // 1980-01-01, the earliest, as torch writes: files are reproducible

void put(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Places every record; returns the size of the whole file.
uint64_t lay_out(std::vector<Record>& records) {
  uint64_t at = 0;
  for (Record& r : records) {
    r.header_offset = at;
    const uint64_t data_start = at + kLocalHeader + r.name.size() + 4;
    r.padding = (kRecordAlignment - data_start % kRecordAlignment) % kRecordAlignment;
    at = data_start + r.padding + r.size;
  }
  for (const Record& r : records) at += kCentralHeader + r.name.size();
  return at + kEndRecord;
}

std::string local_header(const Record& r) {
  std::string h;
  put(h, 0x04034b50, 4);
  put(h, kVersion, 2);
  put(h, 0, 2);  // flags
  put(h, 0, 2);  // method: stored
  put(h, 0, 2);  // time
  put(h, kDosDate, 2);
  put(h, r.crc, 4);  // patched once the data is written
  put(h, r.size, 4);
  put(h, r.size, 4);
  put(h, r.name.size(), 2);
  put(h, 4 + r.padding, 2);
  h.append(r.name);
  h.append("FB");
  put(h, r.padding, 2);
  h.append(r.padding, 'Z');
  return h;
}

std::string central_directory(const std::vector<Record>& records, uint64_t directory_offset) {
  std::string d;
  for (const Record& r : records) {
    put(d, 0x02014b50, 4);
    put(d, kVersion, 2);  // made by: MS-DOS attributes, 2.0
    put(d, kVersion, 2);
    put(d, 0, 2);
    put(d, 0, 2);
    put(d, 0, 2);
    put(d, kDosDate, 2);
    put(d, r.crc, 4);
    put(d, r.size, 4);
    put(d, r.size, 4);
    put(d, r.name.size(), 2);
    put(d, 0, 2);  // extra: the padding is only in the local header
    put(d, 0, 2);  // comment
    put(d, 0, 2);  // disk
    put(d, 0, 2);  // internal attributes
    put(d, 0, 4);  // external attributes
    put(d, r.header_offset, 4);
    d.append(r.name);
  }
  const uint64_t directory_size = d.size();
  put(d, 0x06054b50, 4);
  put(d, 0, 2);
  put(d, 0, 2);
  put(d, records.size(), 2);
  put(d, records.size(), 2);
  put(d, directory_size, 4);
  put(d, directory_offset, 4);
  put(d, 0, 2);
  return d;
}

void write_record(TempFile& file, Record& r) {
  const std::string header = local_header(r);
  file.write(header.data(), header.size());
  const auto* p = static_cast<const unsigned char*>(r.data);
  uint32_t crc = 0;
  uint64_t done = 0;
  if (r.fill) {
    file.write_filled(r.size, [&](unsigned char* dst, size_t n) {
      (*r.fill)(done, dst, n);
      crc = crc32(crc, dst, n);  // over the piece just made, still in cache
      done += n;
    });
  }
  while (done < r.size) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, r.size - done));
    crc = crc32(crc, p + done, n);
    file.write(p + done, n);
    done += n;
  }
  r.crc = crc;
  std::string field;
  put(field, crc, 4);
  file.write_at(r.header_offset + 14, field.data(), field.size());
}

// The archive around a pickle whose tensors are `tensors`, in the order their keys "0", "1", ...
// were given to pickle_tensor.
void write_archive(const std::filesystem::path& path, const Pickle& pickle, const std::vector<const TensorRef*>& tensors,
                   const std::vector<uint64_t>& tensor_sizes, DirectBuffer* direct, std::vector<TempFile>* hold) {
  static constexpr std::string_view kByteorder = "little";
  static constexpr std::string_view kFormatVersion = "3\n";
  std::vector<Record> records;
  const auto folder = std::string(kFolder);
  records.push_back({folder + "data.pkl", pickle.bytes().data(), pickle.bytes().size()});
  records.push_back({folder + "byteorder", kByteorder.data(), kByteorder.size()});
  for (size_t i = 0; i < tensors.size(); ++i)
    records.push_back({folder + "data/" + std::to_string(i), tensors[i]->data, tensor_sizes[i],
                       tensors[i]->fill ? &tensors[i]->fill : nullptr});
  records.push_back({folder + "version", kFormatVersion.data(), kFormatVersion.size()});

  const uint64_t file_size = lay_out(records);
  E3_REQUIRE(file_size < kZip32Limit && records.size() < 0xFFFF, ErrorKind::Output,
             "{}: the file would be {} bytes; torch.save files of 4 GiB or more need zip64, which this "
             "writer does not write (the sample is too long to export)",
             path.string(), file_size);

  TempFile file(path, direct);
  for (Record& r : records) write_record(file, r);
  const std::string directory = central_directory(records, file.size());
  file.write(directory.data(), directory.size());
  E3_REQUIRE(file.size() == file_size, ErrorKind::Internal, "{}: wrote {} bytes, planned {}", path.string(),
             file.size(), file_size);
  if (!hold) return file.commit();
  file.close();
  hold->push_back(std::move(file));
}

}  // namespace

void write_torch_dict(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, TorchValue>>& entries, DirectBuffer* direct,
                      std::vector<TempFile>* hold) {
  Pickle pickle;
  pickle.op('}');  // EMPTY_DICT
  if (!entries.empty()) pickle.op('(');
  std::vector<const TensorRef*> tensors;
  std::vector<uint64_t> tensor_sizes;
  std::set<std::string_view> keys;
  for (const auto& [key, value] : entries) {
    E3_REQUIRE(keys.insert(key).second, ErrorKind::Internal, "{}: two entries with the key '{}'", path.string(),
               key);
    E3_REQUIRE(valid_utf8(key), ErrorKind::Output, "{}: the key '{}' is not UTF-8 text", path.string(), key);
    pickle.text(key);
    if (const auto* t = std::get_if<TensorRef>(&value)) {
      tensor_sizes.push_back(tensor_bytes(*t, path));
      pickle_tensor(pickle, *t, std::to_string(tensors.size()));
      tensors.push_back(t);
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      E3_REQUIRE(valid_utf8(*s), ErrorKind::Output, "{}: the value of '{}' is not UTF-8 text", path.string(), key);
      pickle.text(*s);
    } else {
      pickle.integer(std::get<int64_t>(value));
    }
  }
  if (!entries.empty()) pickle.op('u');  // SETITEMS
  pickle.op('.');                        // STOP
  write_archive(path, pickle, tensors, tensor_sizes, direct, hold);
}

void write_torch_tensor(const std::filesystem::path& path, const TensorRef& tensor) {
  Pickle pickle;
  const uint64_t size = tensor_bytes(tensor, path);
  pickle_tensor(pickle, tensor, "0");
  pickle.op('.');  // STOP
  write_archive(path, pickle, {&tensor}, {size}, nullptr, nullptr);
}

}  // namespace e3::io
