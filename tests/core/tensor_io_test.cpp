#include "core/tensor_io.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "tests/test_util.h"
#include "core/file_util.h"

namespace pare::core {
namespace {

using pare::testing::TempDir;

using pare::testing::bitwise_equal;
using pare::testing::write_bytes;

void truncate_file(const std::string& path, size_t keep) {
  std::string bytes = read_file(path);
  ASSERT_LT(keep, bytes.size());
  write_bytes(path, bytes.substr(0, keep));
}

at::Tensor sample(at::ScalarType type, at::IntArrayRef shape) {
  if (at::isFloatingType(type)) return at::randn(shape).to(type);
  if (type == at::kBool) return at::randint(0, 2, shape).to(at::kBool);
  return at::randint(-100, 100, shape).to(type == at::kByte ? at::kShort : type).abs().to(type);
}

const at::ScalarType kNpyTypes[] = {at::kHalf, at::kFloat, at::kDouble, at::kChar, at::kByte,
                                    at::kShort, at::kInt, at::kLong, at::kBool};
const at::ScalarType kAllTypes[] = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kChar,
                                    at::kByte, at::kShort, at::kInt, at::kLong, at::kBool};

// A .npy file with the given version, header dict and data, padded as numpy does.
std::string npy_bytes(int major, std::string dict, const std::string& data) {
  const size_t prefix = major == 1 ? 10 : 12;
  dict.append((64 - (prefix + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  out.append(reinterpret_cast<const char*>(&len), major == 1 ? 2 : 4);
  return out + dict + data;
}

template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return s;
}

// ---------------------------------------------------------------------------------------------

TEST(Npy, RoundTripsEveryDtypeAndShape) {
  TempDir dir;
  at::manual_seed(0);
  for (auto type : kNpyTypes) {
    for (auto shape : {std::vector<int64_t>{2, 3}, {}, {0, 4}, {7}, {2, 1, 3, 2}}) {
      SCOPED_TRACE(std::string(c10::toString(type)) + " " + std::to_string(shape.size()) + "-d");
      at::Tensor t = sample(type, shape);
      save_npy(t, dir.file("t.npy"));
      EXPECT_TRUE(bitwise_equal(load_npy(dir.file("t.npy")), t));
    }
  }
}

TEST(Npy, WritesNumpyCompatibleHeader) {
  TempDir dir;
  save_npy(at::arange(6, at::kFloat).reshape({2, 3}), dir.file("a.npy"));
  const std::string bytes = read_file(dir.file("a.npy"));
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u) << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 6 * 4);

  save_npy(at::zeros({5}, at::kLong), dir.file("b.npy"));
  EXPECT_NE(read_file(dir.file("b.npy")).find("'shape': (5,)"), std::string::npos);
  save_npy(at::scalar_tensor(1.5, at::kDouble), dir.file("c.npy"));
  EXPECT_NE(read_file(dir.file("c.npy")).find("'shape': ()"), std::string::npos);
}

TEST(Npy, ReadsFortranOrder) {
  TempDir dir;
  // [[0, 1, 2], [3, 4, 5]] stored column by column.
  write_bytes(dir.file("f.npy"), npy_bytes(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                                           raw<int32_t>({0, 3, 1, 4, 2, 5})));
  at::Tensor t = load_npy(dir.file("f.npy"));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(bitwise_equal(t, at::arange(6, at::kInt).reshape({2, 3})));

  // Three dimensions: element [i][j][k] sits at i + 2*j + 4*k.
  at::Tensor expect = at::arange(24, at::kLong).reshape({2, 3, 4});
  at::Tensor column_major = expect.permute({2, 1, 0}).contiguous();
  std::string data(static_cast<const char*>(column_major.data_ptr()), column_major.nbytes());
  write_bytes(dir.file("g.npy"),
              npy_bytes(1, "{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3, 4), }", data));
  EXPECT_TRUE(bitwise_equal(load_npy(dir.file("g.npy")), expect));
}

TEST(Npy, ReadsVersions2And3AndNativeByteOrder) {
  TempDir dir;
  write_bytes(dir.file("v2.npy"),
              npy_bytes(2, "{\"descr\": \"=f8\", \"fortran_order\": False, \"shape\": (2L,)}",
                        raw<double>({1.5, -2.0})));
  EXPECT_TRUE(bitwise_equal(load_npy(dir.file("v2.npy")), at::tensor({1.5, -2.0}, at::kDouble)));
  write_bytes(dir.file("v3.npy"),
              npy_bytes(3, "{'shape': (3,), 'fortran_order': False, 'descr': '|b1'}",
                        std::string("\x01\x00\x01", 3)));
  EXPECT_TRUE(bitwise_equal(load_npy(dir.file("v3.npy")),
                            at::tensor({1, 0, 1}, at::kInt).to(at::kBool)));
}

TEST(Npy, RejectsBigEndianWithAClearError) {
  TempDir dir;
  write_bytes(dir.file("be.npy"), npy_bytes(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
                                            std::string(4, '\0')));
  try {
    load_npy(dir.file("be.npy"));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("be.npy")), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("big-endian"), std::string::npos) << e.what();
  }
}

// An empty array whose other dims overflow its strides needs no data, but libtorch refuses the
// strides (a c10::Error): the reader refuses the shape first, naming the file.
TEST(Npy, AnEmptyArrayWithHugeOtherDimsIsRefused) {
  TempDir dir;
  write_bytes(dir.file("huge.npy"), npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, "
                                                 "'shape': (0, 4294967296, 4294967296), }", ""));
  try {
    load_npy(dir.file("huge.npy"));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("huge.npy")), std::string::npos) << e.what();
  }
  write_bytes(dir.file("empty.npy"), npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", ""));
  EXPECT_EQ(load_npy(dir.file("empty.npy")).sizes(), at::IntArrayRef({0, 3}));
}

TEST(Npy, TruncatedFileThrowsInputErrorNamingIt) {
  TempDir dir;
  save_npy(at::randn({4, 4}), dir.file("t.npy"));
  const size_t full = read_file(dir.file("t.npy")).size();
  for (size_t keep : {full - 1, size_t{70}, size_t{40}, size_t{9}, size_t{0}}) {
    SCOPED_TRACE(keep);
    save_npy(at::randn({4, 4}), dir.file("t.npy"));
    truncate_file(dir.file("t.npy"), keep);
    try {
      load_npy(dir.file("t.npy"));
      FAIL() << "expected InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file("t.npy")), std::string::npos) << e.what();
    }
  }
}

TEST(Npy, RejectsMalformedHeadersAndMissingFiles) {
  TempDir dir;
  const char* headers[] = {
      "{'descr': '<f4', 'fortran_order': False}",                      // no shape
      "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",     // complex
      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",  // structured
      "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",    // negative
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,",         // cut short
      "not a dict at all",
  };
  for (const char* h : headers) {
    SCOPED_TRACE(h);
    write_bytes(dir.file("bad.npy"), npy_bytes(1, h, std::string(4, '\0')));
    EXPECT_THROW(load_npy(dir.file("bad.npy")), InputError);
  }
  write_bytes(dir.file("garbage.npy"), "this is not a numpy file at all");
  EXPECT_THROW(load_npy(dir.file("garbage.npy")), InputError);
  EXPECT_THROW(load_npy(dir.file("missing.npy")), InputError);
}

TEST(Npy, RejectsBFloat16OnSave) {
  TempDir dir;
  EXPECT_THROW(save_npy(at::zeros({2}, at::kBFloat16), dir.file("x.npy")), InputError);
  EXPECT_FALSE(file_exists(dir.file("x.npy")));
}

// ---------------------------------------------------------------------------------------------

TEST(Safetensors, RoundTripsEveryDtypeWithMetadata) {
  TempDir dir;
  at::manual_seed(1);
  std::map<std::string, at::Tensor> tensors;
  for (auto type : kAllTypes) tensors[std::string("t_") + c10::toString(type)] = sample(type, {3, 5});
  tensors["scalar"] = at::scalar_tensor(3.25, at::kFloat);
  tensors["empty"] = at::zeros({0, 7}, at::kLong);
  tensors["noncontiguous"] = at::randn({4, 6}).t();
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "héllo"}};
  save_safetensors(tensors, dir.file("m.safetensors"), meta);

  std::map<std::string, std::string> got_meta;
  auto got = load_safetensors(dir.file("m.safetensors"), &got_meta);
  EXPECT_EQ(got_meta, meta);
  ASSERT_EQ(got.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    EXPECT_TRUE(bitwise_equal(got[name], t));
    EXPECT_TRUE(got[name].is_contiguous());
  }
}

TEST(Safetensors, HeaderIsPaddedAndTensorsAreContiguousInNameOrder) {
  TempDir dir;
  save_safetensors({{"b", at::ones({3}, at::kHalf)}, {"a", at::ones({2}, at::kDouble)}},
                   dir.file("p.safetensors"));
  const std::string bytes = read_file(dir.file("p.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 2 * 8 + 3 * 2);
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find("\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}"), std::string::npos) << header;
  EXPECT_NE(header.find("\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]}"), std::string::npos) << header;
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);
}

TEST(Safetensors, ShardedRoundTrip) {
  TempDir dir;
  at::manual_seed(2);
  std::map<std::string, at::Tensor> tensors;
  for (int i = 0; i < 5; ++i) tensors["layer" + std::to_string(i) + ".weight"] = at::randn({16, 16});  // 1 KiB each
  tensors["big"] = at::randn({64, 64});    // 16 KiB: a shard of its own
  tensors["tiny"] = at::tensor({7}, at::kLong);
  const std::string index = dir.file("model.safetensors.index.json");
  save_safetensors(tensors, index, {{"format", "pt"}}, 2500);

  EXPECT_TRUE(file_exists(dir.file("model-00001-of-00004.safetensors")));
  EXPECT_TRUE(file_exists(dir.file("model-00004-of-00004.safetensors")));
  EXPECT_FALSE(file_exists(dir.file("model-00005-of-00005.safetensors")));
  std::map<std::string, std::string> meta;
  auto got = load_safetensors(index, &meta);
  EXPECT_EQ(meta["format"], "pt");
  EXPECT_EQ(meta["total_size"], std::to_string(5 * 1024 + 16384 + 8));
  ASSERT_EQ(got.size(), tensors.size());
  for (const auto& [name, t] : tensors) EXPECT_TRUE(bitwise_equal(got.at(name), t)) << name;

  // One shard when no limit is given, still behind an index.
  TempDir one;
  save_safetensors(tensors, one.file("w.index.json"));
  EXPECT_TRUE(file_exists(one.file("w-00001-of-00001.safetensors")));
  EXPECT_EQ(load_safetensors(one.file("w.index.json")).size(), tensors.size());
}

TEST(Safetensors, ShardingNeedsAnIndexPath) {
  TempDir dir;
  EXPECT_THROW(save_safetensors({{"a", at::ones({4})}}, dir.file("m.safetensors"), {}, 8), InputError);
  EXPECT_FALSE(file_exists(dir.file("m.safetensors")));
}

TEST(Safetensors, IndexNamingAMissingTensorThrows) {
  TempDir dir;
  save_safetensors({{"a", at::ones({4})}}, dir.file("s.safetensors"));
  write_bytes(dir.file("i.index.json"), R"({"weight_map": {"a": "s.safetensors", "b": "s.safetensors"}})");
  try {
    load_safetensors(dir.file("i.index.json"));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  write_bytes(dir.file("j.index.json"), R"({"weight_map": {"a": "../s.safetensors"}})");
  EXPECT_THROW(load_safetensors(dir.file("j.index.json")), InputError);
}

// A safetensors file with a hand-written header.
std::string st_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(Safetensors, HeaderThatLiesAboutOffsetsThrowsInputError) {
  TempDir dir;
  const std::string f = dir.file("lie.safetensors");
  struct Case {
    const char* header;
    size_t data_bytes;
    const char* mention;
  } cases[] = {
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8, "'w'"},        // past the end
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", 8, "'w'"},         // size mismatch
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "'w'"},         // gap
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, "'b'"},  // overlap
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8, "'w'"},         // reversed
      {R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8, "'w'"},  // overflow
      {R"({"w":{"dtype":"U32","shape":[2],"data_offsets":[0,8]}})", 8, "U32"},         // dtype
      {R"({"w":{"dtype":"F32","shape":[2]}})", 8, "'w'"},                              // no offsets
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":1}})", 8, "__metadata__"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8, "JSON"},         // cut JSON
      {R"([1,2])", 0, "object"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    write_bytes(f, st_bytes(c.header, std::string(c.data_bytes, '\0')));
    try {
      load_safetensors(f);
      ADD_FAILURE() << "expected InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.mention), std::string::npos) << e.what();
    }
  }
  // A header length larger than the file.
  std::string huge(8, '\0');
  const uint64_t n = 1ull << 40;
  std::memcpy(huge.data(), &n, 8);
  write_bytes(f, huge + "{}");
  EXPECT_THROW(load_safetensors(f), InputError);
}

TEST(Safetensors, TruncatedFileThrowsInputErrorNamingIt) {
  TempDir dir;
  const std::string f = dir.file("t.safetensors");
  save_safetensors({{"a", at::randn({8, 8})}, {"b", at::randn({3})}}, f);
  const size_t full = read_file(f).size();
  for (size_t keep : {full - 1, full / 2, size_t{20}, size_t{5}, size_t{0}}) {
    SCOPED_TRACE(keep);
    save_safetensors({{"a", at::randn({8, 8})}, {"b", at::randn({3})}}, f);
    truncate_file(f, keep);
    try {
      load_safetensors(f);
      ADD_FAILURE() << "expected InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    }
  }
}

TEST(Safetensors, RejectsTypesItCannotStore) {
  TempDir dir;
  EXPECT_THROW(save_safetensors({{"c", at::zeros({2}, at::kComplexFloat)}}, dir.file("c.safetensors")),
               InputError);
  EXPECT_FALSE(file_exists(dir.file("c.safetensors")));
}

// A writer killed mid-write leaves PATH.tmp.PID.N (never PATH); the next write of PATH removes the
// files of writers that are gone, and nothing else: not a live process's, not one whose lock is held
// (a writer on another host sharing the folder), not another file's.
TEST(FileUtil, AWriteRemovesWhatKilledWritersOfTheSameFileLeft) {
  TempDir dir;
  const std::string path = dir.file("model.onnx");
  const pid_t killed = ::fork();
  ASSERT_GE(killed, 0);
  if (killed == 0) {
    write_file_atomic(path, [](std::ostream& out) {
      out << "half of a model";
      out.flush();
      ::raise(SIGKILL);
    });
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(killed, &status, 0), killed);
  ASSERT_TRUE(WIFSIGNALED(status));
  std::string left;  // PATH.tmp.PID.N, N the process's count of writes so far
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind("model.onnx.tmp." + std::to_string(killed) + ".", 0) == 0) left = e.path();
  ASSERT_TRUE(file_exists(left)) << "no temporary file of process " << killed << " in " << dir.path();
  EXPECT_FALSE(file_exists(path));

  const std::string dead = std::to_string(killed);
  const std::string locked = path + ".tmp." + dead + ".7", alive = path + ".tmp." + std::to_string(::getppid()) + ".0",
                    other = dir.file("other.onnx.tmp." + dead + ".0"), odd = path + ".tmp." + dead + ".x";
  for (const auto& f : {locked, alive, other, odd}) write_bytes(f, "kept");
  const int fd = ::open(locked.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);

  write_file_atomic(path, std::string("a whole model"));
  EXPECT_EQ(read_file(path), "a whole model");
  EXPECT_FALSE(file_exists(left));
  for (const auto& f : {locked, alive, other, odd}) EXPECT_TRUE(file_exists(f)) << f;
  ::close(fd);
  write_file_atomic(path, std::string("again"));
  EXPECT_FALSE(file_exists(locked));
  for (const auto& f : {alive, other, odd}) EXPECT_TRUE(file_exists(f)) << f;
}

}  // namespace
}  // namespace pare::core
