// Reads and writes tensors as NumPy .npy and safetensors (single files and sharded checkpoints).
// Readers validate every size against the file before allocating, so a truncated file or a
// header that lies gives an InputError naming the file, never a crash or a huge allocation.
#include "core/tensor_io.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_util.h"

namespace pare::core {
namespace {

// Both formats store little-endian data; pare copies the bytes as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "pare's tensor I/O assumes a little-endian host");

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string base_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// numel * element size, or nullopt when a dim is negative or the product overflows. A 0 counts as
// 1 in the overflow check: an empty tensor's other dims still make its strides, which libtorch
// refuses to overflow (a c10::Error, not an InputError).
std::optional<int64_t> byte_size(const std::vector<int64_t>& dims, int64_t elem) {
  int64_t span = elem;
  bool empty = false;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    const int64_t e = std::max<int64_t>(d, 1);
    if (span > std::numeric_limits<int64_t>::max() / e) return std::nullopt;
    span *= e;
    empty = empty || d == 0;
  }
  return empty ? 0 : span;
}

// Bytes read at offsets, their size known: a file, or a buffer in memory.
class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  /// Reads `n` bytes at `offset`; the caller has checked the range against size().
  virtual void read(int64_t offset, void* dst, int64_t n) = 0;
  /// A tensor viewing the bytes at `offset` without a copy, or an undefined tensor when the
  /// source cannot lend them (then the caller reads a copy).
  virtual at::Tensor view(int64_t, const std::vector<int64_t>&, at::ScalarType) { return {}; }
};

class InFile : public Source {
 public:
  explicit InFile(const std::string& path) : path_(path), in_(path, std::ios::binary | std::ios::ate) {
    PARE_CHECK(in_.good(), "cannot open '", path, "': ", std::strerror(errno));
    size_ = static_cast<int64_t>(in_.tellg());
    PARE_CHECK(size_ >= 0, "cannot read '", path, "'");
  }
  int64_t size() const override { return size_; }
  void read(int64_t offset, void* dst, int64_t n) override {
    if (n == 0) return;
    in_.clear();
    in_.seekg(offset);
    in_.read(static_cast<char*>(dst), n);
    PARE_CHECK(in_.gcount() == n, "cannot read ", n, " bytes at offset ", offset, " of '", path_, "'");
  }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t size_ = 0;
};

// A file mapped into memory (MappedFile): its tensors view the mapping, which they keep alive.
class InMapped : public Source {
 public:
  explicit InMapped(const std::string& path) : map_(MappedFile::open(path)) {}
  int64_t size() const override { return map_->size(); }
  void read(int64_t offset, void* dst, int64_t n) override {
    if (n > 0) std::memcpy(dst, map_->data() + offset, static_cast<size_t>(n));
  }
  at::Tensor view(int64_t offset, const std::vector<int64_t>& shape, at::ScalarType type) override {
    // Empty tensors and misaligned data (a header padded to a length that is not a multiple of
    // the element size) are copied instead.
    if (reinterpret_cast<uintptr_t>(map_->data() + offset) % c10::elementSize(type) != 0 || map_->size() == 0) return {};
    std::shared_ptr<MappedFile> keep = map_;
    return at::from_blob(map_->data() + offset, shape, [keep](void*) {}, at::TensorOptions().dtype(type));
  }

 private:
  std::shared_ptr<MappedFile> map_;
};

class InMemory : public Source {
 public:
  explicit InMemory(std::string_view bytes) : bytes_(bytes) {}
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  void read(int64_t offset, void* dst, int64_t n) override {
    if (n > 0) std::memcpy(dst, bytes_.data() + offset, static_cast<size_t>(n));
  }

 private:
  std::string_view bytes_;
};

// ---------------------------------------------------------------------------------------------
// .npy

struct NpyType {
  char kind;
  int size;
  at::ScalarType type;
};
constexpr NpyType kNpyTypes[] = {
    {'f', 2, at::kHalf}, {'f', 4, at::kFloat}, {'f', 8, at::kDouble}, {'i', 1, at::kChar},
    {'u', 1, at::kByte}, {'i', 2, at::kShort}, {'i', 4, at::kInt},    {'i', 8, at::kLong},
    {'b', 1, at::kBool},
};

// One value of the header's Python dict literal.
struct PyValue {
  enum Kind { kStr, kBool, kTuple, kInt, kOther } kind = kOther;
  std::string str;
  bool b = false;
  std::vector<int64_t> ints;
};

// Parses the header dict numpy writes: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class PyDictParser {
 public:
  explicit PyDictParser(const std::string& s) : s_(s) {}

  std::map<std::string, PyValue> parse() {
    std::map<std::string, PyValue> out;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      std::string key = parse_string();
      expect(':');
      out[key] = parse_value();
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') break;
      fail("expected ',' or '}'");
    }
    ++i_;
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw InputError("header dict " + why + " at character " + std::to_string(i_) + " of \"" + s_ + "\"");
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  char peek() {
    skip_ws();
    if (i_ >= s_.size()) fail("ends early");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string parse_string() {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
      out += s_[i_++];
    }
    if (i_ >= s_.size()) fail("has an unterminated string");
    ++i_;
    return out;
  }
  int64_t parse_int() {
    skip_ws();
    size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      const int digit = s_[i_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) fail("has a number out of range");
      v = v * 10 + digit;
    }
    if (i_ == start) fail("expected a non-negative integer");
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long
    return v;
  }
  PyValue parse_value() {
    PyValue v;
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = PyValue::kStr;
      v.str = parse_string();
    } else if (s_.compare(i_, 4, "True") == 0) {
      v.kind = PyValue::kBool;
      v.b = true;
      i_ += 4;
    } else if (s_.compare(i_, 5, "False") == 0) {
      v.kind = PyValue::kBool;
      i_ += 5;
    } else if (c == '(') {
      v.kind = PyValue::kTuple;
      ++i_;
      while (peek() != ')') {
        v.ints.push_back(parse_int());
        if (peek() == ',') ++i_;
        else if (peek() != ')') fail("expected ',' or ')' in the shape");
      }
      ++i_;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      v.kind = PyValue::kInt;
      v.ints.push_back(parse_int());
    } else if (c == '[') {
      fail("has a structured dtype (a list), which pare does not support");
    } else {
      fail("has an unexpected value");
    }
    return v;
  }

  const std::string& s_;
  size_t i_ = 0;
};

// at::ScalarType for an npy descr such as "<f4"; throws InputError (without the file name).
at::ScalarType npy_type(const std::string& descr) {
  std::string d = descr;
  char order = '=';
  if (!d.empty() && std::strchr("<>|=", d[0])) {
    order = d[0];
    d = d.substr(1);
  }
  for (const auto& t : kNpyTypes) {
    if (d == std::string(1, t.kind) + std::to_string(t.size)) {
      PARE_CHECK(order != '>' || t.size == 1, "dtype '", descr,
                 "' is big-endian, which pare does not read; convert it with "
                 "arr.astype(arr.dtype.newbyteorder('<'))");
      return t.type;
    }
  }
  throw InputError("dtype '" + descr +
                   "' is not supported (supported: <f2 <f4 <f8 |i1 |u1 <i2 <i4 <i8 |b1)");
}

std::string npy_descr(at::ScalarType t) {
  for (const auto& e : kNpyTypes)
    if (e.type == t) return std::string(e.size == 1 ? "|" : "<") + e.kind + std::to_string(e.size);
  throw InputError("element type " + dtype_name(t) + " has no .npy equivalent (supported: float16, "
                   "float32, float64, int8, uint8, int16, int32, int64, bool)");
}

at::Tensor read_npy(InFile& f) {
  char prefix[12];
  PARE_CHECK(f.size() >= 10, "the file is ", f.size(), " bytes, shorter than a .npy preamble");
  f.read(0, prefix, 10);
  PARE_CHECK(std::memcmp(prefix, "\x93NUMPY", 6) == 0, "it does not start with the .npy magic \\x93NUMPY");
  const int major = static_cast<unsigned char>(prefix[6]);
  PARE_CHECK(major >= 1 && major <= 3, "format version ", major, ".",
             static_cast<int>(static_cast<unsigned char>(prefix[7])), " is not supported (1.0, 2.0, 3.0)");
  int64_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(prefix[8]) | (static_cast<unsigned char>(prefix[9]) << 8);
    header_start = 10;
  } else {
    PARE_CHECK(f.size() >= 12, "the file ends inside the .npy preamble");
    f.read(10, prefix + 10, 2);
    uint32_t len = 0;
    std::memcpy(&len, prefix + 8, 4);
    header_len = len;
    header_start = 12;
  }
  PARE_CHECK(header_start + header_len <= f.size(), "the header claims ", header_len,
             " bytes but the file has ", f.size() - header_start, " after the preamble");
  std::string header(header_len, '\0');
  f.read(header_start, header.data(), header_len);

  auto dict = PyDictParser(header).parse();
  auto get = [&](const char* key, PyValue::Kind kind) -> const PyValue& {
    auto it = dict.find(key);
    PARE_CHECK(it != dict.end() && it->second.kind == kind, "the header has no valid '", key,
               "' entry: \"", header, "\"");
    return it->second;
  };
  const at::ScalarType type = npy_type(get("descr", PyValue::kStr).str);
  const bool fortran = get("fortran_order", PyValue::kBool).b;
  std::vector<int64_t> shape = get("shape", PyValue::kTuple).ints;

  const int64_t data_start = header_start + header_len;
  const auto nbytes = byte_size(shape, static_cast<int64_t>(c10::elementSize(type)));
  PARE_CHECK(nbytes.has_value(), "shape ", dims_str(shape), " is too large");
  PARE_CHECK(f.size() - data_start == *nbytes, "shape ", dims_str(shape), " of ", dtype_name(type),
             " needs ", *nbytes, " bytes of data but the file holds ", f.size() - data_start,
             *nbytes > f.size() - data_start ? " (truncated?)" : "");
  if (fortran) std::reverse(shape.begin(), shape.end());
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  f.read(data_start, t.data_ptr(), *nbytes);
  if (fortran && t.dim() > 1) {
    // Column-major data is the row-major data of the transposed array.
    std::vector<int64_t> perm(t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) perm[i] = t.dim() - 1 - i;
    t = t.permute(perm).contiguous();
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// safetensors

struct StType {
  const char* name;
  at::ScalarType type;
};
constexpr StType kStTypes[] = {
    {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16}, {"F64", at::kDouble},
    {"I8", at::kChar},   {"U8", at::kByte},   {"I16", at::kShort},     {"I32", at::kInt},
    {"I64", at::kLong},  {"BOOL", at::kBool},
};
// The reference implementation refuses headers over 100 MB.
constexpr int64_t kMaxHeaderBytes = 100 * 1000 * 1000;

const char* st_name(at::ScalarType t, const std::string& tensor) {
  for (const auto& e : kStTypes)
    if (e.type == t) return e.name;
  throw InputError("tensor '" + tensor + "' has element type " + dtype_name(t) +
                   ", which safetensors cannot store (supported: F32 F16 BF16 F64 I8 U8 I16 I32 I64 BOOL)");
}

// `path` names the bytes of `f` in messages.
// A tensor of a safetensors header: name, type, shape and its byte range in the data.
struct StEntry {
  std::string name;
  at::ScalarType type;
  std::vector<int64_t> shape;
  int64_t begin, end;
};

// As the reference implementation: the tensors tile the data buffer, no gaps, no overlaps.
template <class Bad>
void check_tiling(std::vector<StEntry>& entries, int64_t data_size, const Bad& bad) {
  std::sort(entries.begin(), entries.end(), [](const StEntry& a, const StEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t expected = 0;
  for (const auto& e : entries) {
    if (e.begin != expected)
      throw bad("tensor '" + e.name + "' starts at data offset " + std::to_string(e.begin) +
                " but the previous tensor ends at " + std::to_string(expected) +
                " (tensors must cover the data without gaps or overlaps)");
    expected = e.end;
  }
  if (expected != data_size)
    throw bad("the tensors cover " + std::to_string(expected) + " bytes of data but the file holds " +
              std::to_string(data_size));
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path, Source& f,
                                                   std::map<std::string, std::string>* metadata) {
  using json = nlohmann::json;
  auto bad = [&](const std::string& why) { return InputError("'" + path + "' is not a valid safetensors file: " + why); };
  if (f.size() < 8) throw bad("it is " + std::to_string(f.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  f.read(0, &n, 8);
  if (n > static_cast<uint64_t>(f.size() - 8) || static_cast<int64_t>(n) > kMaxHeaderBytes)
    throw bad("the header claims " + std::to_string(n) + " bytes but the file holds " +
              std::to_string(f.size() - 8) + " after the length (limit 100 MB)");
  std::string header(n, '\0');
  f.read(8, header.data(), static_cast<int64_t>(n));
  json j;
  try {
    j = json::parse(header);
  } catch (const json::exception& e) {
    throw bad(std::string("its header is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad("its header is not a JSON object");

  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_size = f.size() - data_start;
  std::vector<StEntry> entries;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw bad("\"__metadata__\" is not an object");
      for (const auto& [k, mv] : v.items()) {
        if (!mv.is_string()) throw bad("\"__metadata__\" entry '" + k + "' is not a string");
        if (metadata) (*metadata)[k] = mv.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "' ";
    if (!v.is_object()) throw bad(what + "is not described by an object");
    StEntry e;
    e.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) throw bad(what + "has no \"dtype\" string");
    const std::string dname = dt->get<std::string>();
    auto known = std::find_if(std::begin(kStTypes), std::end(kStTypes),
                              [&](const StType& t) { return dname == t.name; });
    if (known == std::end(kStTypes))
      throw bad(what + "has dtype " + dname + ", which pare does not support (F32 F16 BF16 F64 I8 U8 I16 I32 I64 BOOL)");
    e.type = known->type;
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) throw bad(what + "has no \"shape\" array");
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) throw bad(what + "has a shape entry that is not a non-negative integer");
      const uint64_t u = d.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) throw bad(what + "has a dimension out of range");
      e.shape.push_back(static_cast<int64_t>(u));
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      throw bad(what + "has no \"data_offsets\" pair of non-negative integers");
    const uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (b > en || en > static_cast<uint64_t>(data_size))
      throw bad(what + "has data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                "] outside the " + std::to_string(data_size) + " bytes of data");
    e.begin = static_cast<int64_t>(b);
    e.end = static_cast<int64_t>(en);
    const auto nbytes = byte_size(e.shape, static_cast<int64_t>(c10::elementSize(e.type)));
    if (!nbytes || *nbytes != e.end - e.begin)
      throw bad(what + "has shape " + dims_str(e.shape) + " of " + dname + " but data_offsets [" +
                std::to_string(b) + ", " + std::to_string(en) + "] hold " + std::to_string(en - b) + " bytes");
    entries.push_back(std::move(e));
  }
  check_tiling(entries, data_size, bad);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : entries) {
    at::Tensor t = e.end > e.begin ? f.view(data_start + e.begin, e.shape, e.type) : at::Tensor();
    if (!t.defined()) {
      t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
      f.read(data_start + e.begin, t.data_ptr(), e.end - e.begin);
    }
    out[e.name] = t;
  }
  return out;
}

// A shard or index file name from an index: relative, inside the index's folder.
void check_relative(const std::string& name, const std::string& index) {
  bool escapes = name.empty() || name[0] == '/';
  for (size_t start = 0; start <= name.size();) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (end - start == 2 && name.compare(start, 2, "..") == 0) escapes = true;
    start = end + 1;
  }
  PARE_CHECK(!escapes, "'", index, "' names shard '", name,
             "': shards must be relative paths inside the index's folder");
}

std::map<std::string, at::Tensor> read_safetensors_index(const std::string& path,
                                                         std::map<std::string, std::string>* metadata) {
  using json = nlohmann::json;
  auto bad = [&](const std::string& why) {
    return InputError("'" + path + "' is not a valid safetensors index: " + why);
  };
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw bad(std::string("it is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad("it is not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) throw bad("it has no \"weight_map\" object");
  auto md = j.find("metadata");
  if (md != j.end() && !md->is_null()) {
    if (!md->is_object()) throw bad("\"metadata\" is not an object");
    if (metadata)
      for (const auto& [k, v] : md->items()) (*metadata)[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) throw bad("\"weight_map\" entry '" + name + "' is not a file name");
    check_relative(shard.get<std::string>(), path);
    by_shard[shard.get<std::string>()].push_back(name);
  }
  const std::string dir = dir_name(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& [shard, names] : by_shard) {
    const std::string shard_path = join_path(dir, shard);
    PARE_CHECK(file_exists(shard_path), "'", path, "' maps ", names.size(), " tensor(s) such as '", names.front(),
               "' to shard '", shard, "', which does not exist");
    InMapped f(shard_path);
    auto tensors = read_safetensors(shard_path, f, nullptr);
    for (const auto& name : names) {
      auto it = tensors.find(name);
      PARE_CHECK(it != tensors.end(), "'", path, "' maps tensor '", name, "' to '", shard_path,
                 "', which does not contain it");
      out[name] = std::move(it->second);
    }
  }
  return out;
}

// Writes safetensors to `out`; `path` names the destination in messages.
void write_safetensors_to(std::ostream& out, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                          const std::string& path, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    PARE_CHECK(name != "__metadata__", "a tensor cannot be named \"__metadata__\" in safetensors");
    const int64_t nbytes = static_cast<int64_t>(t.nbytes());
    header[name] = {{"dtype", st_name(t.scalar_type(), name)},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or metadata that is not UTF-8
    throw InputError("cannot write '" + path + "': " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the reference pads the header to 8 bytes
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    if (c.nbytes() > 0) out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  }
}

void write_safetensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::string& path, const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, [&](std::ostream& out) { write_safetensors_to(out, tensors, path, metadata); });
}

}  // namespace

at::Tensor load_npy(const std::string& path) {
  InFile f(path);
  try {
    return read_npy(f);
  } catch (const InputError& e) {
    throw InputError("'" + path + "' is not a valid .npy file: " + e.what());
  }
}

void save_npy(const at::Tensor& src, const std::string& path) {
  const at::Tensor t = src.detach().to(at::kCPU).contiguous();
  std::string shape = "(";
  for (int64_t d : t.sizes()) shape += std::to_string(d) + ", ";
  if (t.dim() > 1) shape.resize(shape.size() - 2);
  else if (t.dim() == 1) shape.resize(shape.size() - 1);  // "(5,)"
  shape += ")";
  std::string header = "{'descr': '" + npy_descr(t.scalar_type()) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // numpy pads with spaces so the data starts 64-byte aligned, and ends the header with '\n'.
  const size_t unpadded = 10 + header.size() + 1;
  const bool v2 = unpadded + 63 > 65535 + 10;
  const size_t prefix = v2 ? 12 : 10;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  write_file_atomic(path, [&](std::ostream& out) {
    out.write("\x93NUMPY", 6);
    out.put(v2 ? 2 : 1);
    out.put(0);
    const uint32_t len = static_cast<uint32_t>(header.size());
    out.write(reinterpret_cast<const char*>(&len), v2 ? 4 : 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    if (t.nbytes() > 0) out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  });
}

std::map<std::string, at::Tensor> load_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata) {
  if (ends_with(path, ".index.json")) return read_safetensors_index(path, metadata);
  InMapped f(path);
  return read_safetensors(path, f, metadata);
}

std::map<std::string, at::Tensor> parse_safetensors(std::string_view bytes, const std::string& what,
                                                    std::map<std::string, std::string>* metadata) {
  InMemory m(bytes);
  return read_safetensors(what, m, metadata);
}

void write_safetensors(std::ostream& out, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_safetensors_to(out, {tensors.begin(), tensors.end()}, "a stream", metadata);
}

void save_safetensors(const std::map<std::string, at::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata, int64_t max_shard_bytes) {
  for (const auto& [name, t] : tensors) st_name(t.scalar_type(), name);  // before any shard is written
  const bool sharded = ends_with(path, ".index.json");
  PARE_CHECK(sharded || max_shard_bytes <= 0, "sharded safetensors need an index path ending in "
             "\".index.json\" (such as model.safetensors.index.json), got '", path, "'");
  if (!sharded) {
    write_safetensors({tensors.begin(), tensors.end()}, path, metadata);
    return;
  }
  // Greedy packing in name order; a tensor larger than the limit gets a shard of its own.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t used = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t n = static_cast<int64_t>(t.nbytes());
    if (max_shard_bytes > 0 && !shards.back().empty() && used + n > max_shard_bytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().emplace_back(name, t);
    used += n;
    total += n;
  }
  std::string stem = base_name(path);
  stem.resize(stem.size() - std::string(".index.json").size());
  if (ends_with(stem, ".safetensors")) stem.resize(stem.size() - std::string(".safetensors").size());
  if (stem.empty()) stem = "model";
  const std::string dir = dir_name(path);
  auto pad5 = [](size_t i) {
    std::string s = std::to_string(i);
    return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
  };

  nlohmann::ordered_json index;
  index["metadata"] = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) index["metadata"][k] = v;
  index["metadata"]["total_size"] = total;
  index["weight_map"] = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = stem + "-" + pad5(i + 1) + "-of-" + pad5(shards.size()) + ".safetensors";
    write_safetensors(shards[i], join_path(dir, file), metadata);
    for (const auto& entry : shards[i]) index["weight_map"][entry.first] = file;
  }
  // The index last: it never names a shard that is not written yet.
  std::string text;
  try {
    text = index.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw InputError("cannot write '" + path + "': " + e.what());
  }
  write_file_atomic(path, text);
}

}  // namespace pare::core
