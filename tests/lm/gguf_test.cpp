// GGUF reading (lm/gguf.h): metadata of every type, tensors of each dequantized type from
// hand-made blocks, and the hostile files each refused with an InputError naming what is wrong;
// writing (GgufWriter, ggml_quantize): what the writer writes the reader reads back.
// tests/peer/gguf_peer_test.sh checks the numbers against gguf-py on random and real files.
#include "lm/gguf.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/tensor_io.h"
#include "tests/test_util.h"

namespace pare::lm {
namespace {

using pare::testing::expect_input_error;
using pare::testing::TempDir;

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// Writes GGUF files byte by byte, so that each field can be made wrong on purpose.
class Builder {
 public:
  template <class T>
  Builder& scalar(const std::string& key, GgufValueType type, T v) {
    head(key, type);
    put(kv_, v);
    return *this;
  }
  Builder& str(const std::string& key, const std::string& v) {
    head(key, GgufValueType::kString);
    put_str(kv_, v);
    return *this;
  }
  // An array of `count` elements whose bytes are `payload` (strings: length-prefixed).
  Builder& array(const std::string& key, GgufValueType elem, uint64_t count, const std::string& payload) {
    head(key, GgufValueType::kArray);
    put(kv_, static_cast<uint32_t>(elem));
    put(kv_, count);
    kv_ += payload;
    return *this;
  }
  // A tensor with ggml dims `ne` (innermost first) and its data; placed at the next aligned offset
  // unless `offset` is given.
  Builder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, const std::string& bytes,
                  int64_t offset = -1) {
    while (data_.size() % alignment_) data_ += '\0';
    put_str(infos_, name);
    put(infos_, static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) put(infos_, d);
    put(infos_, type);
    put<uint64_t>(infos_, offset >= 0 ? static_cast<uint64_t>(offset) : data_.size());
    data_ += bytes;
    ++n_tensors_;
    return *this;
  }
  Builder& alignment(uint32_t a) {
    alignment_ = a;
    return scalar("general.alignment", GgufValueType::kU32, a);
  }
  std::string build(uint32_t version = 3) const {
    std::string out = "GGUF";
    put(out, version);
    put(out, n_tensors_);
    put(out, n_kv_);
    out += kv_ + infos_;
    while (out.size() % alignment_) out += '\0';
    return out + data_;
  }

 private:
  void head(const std::string& key, GgufValueType type) {
    put_str(kv_, key);
    put(kv_, static_cast<uint32_t>(type));
    ++n_kv_;
  }
  std::string kv_, infos_, data_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  uint32_t alignment_ = 32;
};

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
std::string u16(uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); }
constexpr uint16_t kHalfHalf = 0x3800, kHalfTwo = 0x4000, kHalfMinusOne = 0xbc00;

GgufFile parse(const std::string& bytes) { return GgufFile::from_bytes(bytes, "test.gguf"); }

TEST(Gguf, ReadsMetadataOfEveryType) {
  std::string strings, ints;
  put_str(strings, "a");
  put_str(strings, "");
  put_str(strings, "héllo");
  for (int32_t v : {-1, 0, 7}) put(ints, v);
  const GgufFile f = parse(Builder()
                               .scalar("u8", GgufValueType::kU8, uint8_t{200})
                               .scalar("i8", GgufValueType::kI8, int8_t{-5})
                               .scalar("u16", GgufValueType::kU16, uint16_t{60000})
                               .scalar("i16", GgufValueType::kI16, int16_t{-30000})
                               .scalar("u32", GgufValueType::kU32, uint32_t{4000000000u})
                               .scalar("i32", GgufValueType::kI32, int32_t{-2000000000})
                               .scalar("f32", GgufValueType::kF32, 1e-5f)
                               .scalar("bool", GgufValueType::kBool, uint8_t{1})
                               .str("string", "llama")
                               .scalar("u64", GgufValueType::kU64, uint64_t{1} << 40)
                               .scalar("i64", GgufValueType::kI64, int64_t{-1} << 40)
                               .scalar("f64", GgufValueType::kF64, 0.1)
                               .array("strings", GgufValueType::kString, 3, strings)
                               .array("ints", GgufValueType::kI32, 3, ints)
                               .array("floats", GgufValueType::kF32, 2, f32_bytes({0.5f, -2.f}))
                               .array("bools", GgufValueType::kBool, 2, std::string("\x01\x00", 2))
                               .array("empty", GgufValueType::kU8, 0, "")
                               .build());
  EXPECT_EQ(f.keys().size(), 17u);
  EXPECT_EQ(f.keys()[0], "u8");
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -5);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_u32("u32"), 4000000000u);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_float("f32"), static_cast<double>(1e-5f));
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.get_string("string"), "llama");
  EXPECT_EQ(f.get_int("u64"), int64_t{1} << 40);
  EXPECT_EQ(f.get_int("i64"), -(int64_t{1} << 40));
  EXPECT_EQ(f.get_float("f64"), 0.1);
  EXPECT_EQ(f.get_strings("strings"), (std::vector<std::string>{"a", "", "héllo"}));
  EXPECT_EQ(f.get_ints("ints"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(f.get_floats("floats"), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(f.get_bools("bools"), (std::vector<bool>{true, false}));
  EXPECT_TRUE(f.get_ints("empty").empty());
  EXPECT_EQ(f.value("ints").elem_type, GgufValueType::kI32);
  EXPECT_EQ(f.get_int("missing", 3), 3);
  EXPECT_EQ(f.get_float("missing", 2.5), 2.5);
  EXPECT_FALSE(f.has("missing"));
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.version(), 3u);
}

TEST(Gguf, GettersRefuseOtherTypesNamingTheKey) {
  const GgufFile f = parse(Builder()
                               .str("name", "x")
                               .scalar("big", GgufValueType::kU64, ~uint64_t{0})
                               .scalar("neg", GgufValueType::kI32, int32_t{-1})
                               .build());
  expect_input_error([&] { f.get_int("name"); }, {"test.gguf", "'name'", "a string", "not an integer"});
  expect_input_error([&] { f.get_strings("name"); }, {"'name'", "not an array of string"});
  expect_input_error([&] { f.get_string("missing"); }, {"test.gguf", "no key 'missing'"});
  expect_input_error([&] { f.get_int("big"); }, {"'big'", "18446744073709551615"});
  expect_input_error([&] { f.get_u32("neg"); }, {"'neg'", "uint32"});
  expect_input_error([&] { f.get_float("neg"); }, {"'neg'", "an int32", "float"});
  expect_input_error([&] { f.get_int("name", 1); }, {"'name'"});
}

TEST(Gguf, TensorShapesArePyTorchOrder) {
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(i);
  const GgufFile f = parse(Builder().tensor("w", {4, 2}, 0, f32_bytes(v)).tensor("s", {}, 0, f32_bytes({3.f})).build());
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensor_info("w").shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(f.tensor_info("w").nbytes, 32u);
  const at::Tensor w = f.tensor("w");
  EXPECT_EQ(w.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(w[1][0].item<float>(), 4.f);  // row-major: ne[0] is the innermost
  EXPECT_EQ(f.tensor("s").dim(), 0);
  EXPECT_EQ(f.tensor("s").item<float>(), 3.f);
  EXPECT_EQ(f.tensor_info("s").offset, 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
}

TEST(Gguf, DequantizesHandMadeBlocks) {
  // Q8_0: d = 0.5, q = -16..15.
  std::string q8 = u16(kHalfHalf);
  for (int i = 0; i < 32; ++i) q8 += static_cast<char>(i - 16);
  // Q4_0: d = 2, low nibbles 0..15 then high nibbles 15..0; value (q - 8) * d.
  std::string q4 = u16(kHalfTwo);
  for (int i = 0; i < 16; ++i) q4 += static_cast<char>(i | ((15 - i) << 4));
  // Q4_1: d = 0.5, m = -1; value q * d + m.
  std::string q41 = u16(kHalfHalf) + u16(kHalfMinusOne) + q4.substr(2);
  // Q8_K: d = 0.25 (fp32), q = i - 128, bsums unused.
  std::string q8k;
  put(q8k, 0.25f);
  for (int i = 0; i < 256; ++i) q8k += static_cast<char>(i - 128);
  q8k += std::string(32, '\0');
  const GgufFile f = parse(Builder()
                               .tensor("q8", {32}, 8, q8)
                               .tensor("q4", {32}, 2, q4)
                               .tensor("q41", {32}, 3, q41)
                               .tensor("q8k", {256}, 15, q8k)
                               .tensor("f16", {2}, 1, u16(kHalfHalf) + u16(0x0001))  // 0.5, smallest subnormal
                               .tensor("bf16", {2}, 30, u16(0x3f80) + u16(0xc000))   // 1, -2
                               .build());
  const at::Tensor a = f.tensor("q8"), b = f.tensor("q4"), c = f.tensor("q41"), d = f.tensor("q8k");
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(a[i].item<float>(), (i - 16) * 0.5f);
    EXPECT_EQ(b[i].item<float>(), (i - 8) * 2.f);
    EXPECT_EQ(b[i + 16].item<float>(), (15 - i - 8) * 2.f);
    EXPECT_EQ(c[i].item<float>(), i * 0.5f - 1.f);
    EXPECT_EQ(c[i + 16].item<float>(), (15 - i) * 0.5f - 1.f);
  }
  for (int i = 0; i < 256; ++i) EXPECT_EQ(d[i].item<float>(), (i - 128) * 0.25f);
  EXPECT_EQ(f.tensor("f16")[0].item<float>(), 0.5f);
  EXPECT_EQ(f.tensor("f16")[1].item<float>(), std::ldexp(1.f, -24));
  EXPECT_EQ(f.tensor("bf16")[1].item<float>(), -2.f);
  EXPECT_EQ(f.raw("q41").numel(), 20);
  EXPECT_EQ(std::memcmp(f.raw("q41").data_ptr(), q41.data(), 20), 0);
}

TEST(Gguf, Q4KUsesSixBitScalesAndMins) {
  // d = 1, dmin = 0.5; sub-block 0: scale 3, min 2; sub-block 4: scale 0x15, min 0x2a (bits split
  // between bytes 0..3 and 8..11); the others 0. Every nibble 5.
  std::string blk = u16(0x3c00) + u16(kHalfHalf);
  std::string scales(12, '\0');
  scales[0] = 3;
  scales[4] = 2;
  scales[8] = static_cast<char>(0x5 | (0xa << 4));    // low 4 bits of scale 4 and of min 4
  scales[0] |= static_cast<char>(0x1 << 6);           // scale 4's high 2 bits (0x15 = 01 0101)
  scales[4] |= static_cast<char>(0x2 << 6);           // min 4's high 2 bits (0x2a = 10 1010)
  blk += scales + std::string(128, '\x55');
  const at::Tensor t = parse(Builder().tensor("k", {256}, 12, blk).build()).tensor("k");
  EXPECT_EQ(t[0].item<float>(), 3 * 5 - 2 * 0.5f);
  EXPECT_EQ(t[32].item<float>(), 0.f);                 // sub-block 1
  EXPECT_EQ(t[128].item<float>(), 0x15 * 5 - 0x2a * 0.5f);
}

TEST(Gguf, TensorsOutliveTheFileAndMayBeWrittenWithoutChangingIt) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  const std::string bytes =
      Builder().str("general.architecture", "llama").tensor("w", {2}, 0, f32_bytes({1.f, 2.f})).build();
  pare::testing::write_bytes(path, bytes);
  at::Tensor w;
  {
    GgufFile f(path);
    EXPECT_EQ(f.path(), path);
    w = f.tensor("w");
  }
  EXPECT_EQ(w[1].item<float>(), 2.f);
  w.mul_(3);
  EXPECT_EQ(w[1].item<float>(), 6.f);
  EXPECT_EQ(read_file(path), bytes);
  EXPECT_EQ(GgufFile(path).tensor("w")[1].item<float>(), 2.f);
}

TEST(Gguf, ReadsVersion2AndAnAlignmentOf64) {
  const GgufFile f = parse(Builder()
                               .alignment(64)
                               .tensor("a", {1}, 0, f32_bytes({1.f}))
                               .tensor("b", {1}, 0, f32_bytes({2.f}))
                               .build(2));
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor_info("b").offset, 64u);
  EXPECT_EQ(f.tensor("b").item<float>(), 2.f);
}

TEST(Gguf, CopiesF32TensorsThatAreNotFourByteAligned) {
  // With an alignment of 1, offsets 1 and 2 cannot both be 4-byte aligned in memory.
  std::string data = std::string(1, '\0') + f32_bytes({1.5f}) + std::string(1, '\0');
  const GgufFile f = parse(Builder().alignment(1).tensor("a", {1}, 0, data, 1).tensor("b", {1}, 0, "", 2).build());
  EXPECT_EQ(f.tensor("a").item<float>(), 1.5f);
  float b;
  std::memcpy(&b, f.raw("b").data_ptr(), 4);
  EXPECT_TRUE(pare::testing::bitwise_equal(f.tensor("b"), at::full({1}, b)));
}

TEST(Gguf, RefusesBadHeaders) {
  const std::string good = Builder().str("k", "v").build();
  std::string bad = good;
  bad[0] = 'X';
  expect_input_error([&] { parse(bad); }, {"test.gguf", "magic"});
  for (uint32_t version : {1u, 4u}) {
    bad = good;
    std::memcpy(&bad[4], &version, 4);
    expect_input_error([&] { parse(bad); }, {"test.gguf", "version " + std::to_string(version)});
  }
  bad = good;
  std::swap(bad[4], bad[7]);
  expect_input_error([&] { parse(bad); }, {"big-endian"});
  expect_input_error([&] { parse(good.substr(0, 10)); }, {"test.gguf", "truncated"});
}

TEST(Gguf, RefusesEveryTruncation) {
  std::string strings;
  put_str(strings, "tok");
  const std::string good = Builder()
                               .str("general.architecture", "llama")
                               .array("tokens", GgufValueType::kString, 1, strings)
                               .scalar("n", GgufValueType::kU32, uint32_t{3})
                               .tensor("w", {32}, 8, std::string(34, '\0'))
                               .build();
  EXPECT_NO_THROW(parse(good));
  for (size_t n = 0; n < good.size(); ++n)
    expect_input_error([&] { parse(good.substr(0, n)); }, {"test.gguf"});
}

TEST(Gguf, RefusesCountsAndLengthsTheFileCannotHold) {
  std::string bad = Builder().str("k", "v").build();
  const uint64_t huge = uint64_t{1} << 60;
  std::string kv = bad;
  std::memcpy(&kv[16], &huge, 8);
  expect_input_error([&] { parse(kv); }, {"claims 1152921504606846976 key/values"});
  std::string tensors = bad;
  std::memcpy(&tensors[8], &huge, 8);
  expect_input_error([&] { parse(tensors); }, {"claims 1152921504606846976 tensors"});
  std::string key_len = bad;
  std::memcpy(&key_len[24], &huge, 8);
  expect_input_error([&] { parse(key_len); }, {"key 0", "claims 1152921504606846976 bytes"});
  std::string value_len = bad;
  std::memcpy(&value_len[24 + 8 + 1 + 4], &huge, 8);
  expect_input_error([&] { parse(value_len); }, {"key 'k'", "claims"});
  expect_input_error([&] { parse(Builder().array("a", GgufValueType::kU64, huge, "").build()); },
                     {"key 'a'", "array of 1152921504606846976 uint64"});
  expect_input_error([&] { parse(Builder().array("a", GgufValueType::kString, huge, "").build()); },
                     {"key 'a'", "array of 1152921504606846976 string"});
}

TEST(Gguf, RefusesBadKeysAndValues) {
  expect_input_error([&] { parse(Builder().str("k", "a").str("k", "b").build()); }, {"key 'k' twice"});
  expect_input_error([&] { parse(Builder().scalar("k", static_cast<GgufValueType>(13), uint8_t{0}).build()); },
                     {"key 'k'", "13", "not a GGUF value type"});
  expect_input_error([&] { parse(Builder().array("k", GgufValueType::kArray, 0, "").build()); },
                     {"key 'k'", "array of arrays"});
  expect_input_error([&] { parse(Builder().alignment(24).build()); }, {"general.alignment", "power of two", "24"});
  expect_input_error([&] { parse(Builder().scalar("general.alignment", GgufValueType::kU64, uint64_t{32}).build()); },
                     {"general.alignment", "uint32"});
}

TEST(Gguf, RefusesBadTensorInfos) {
  const std::string f32 = f32_bytes({1.f, 2.f});
  expect_input_error([&] { parse(Builder().tensor("w", {2}, 0, f32).tensor("w", {2}, 0, f32).build()); },
                     {"test.gguf", "tensor 'w' twice"});
  expect_input_error([&] { parse(Builder().tensor("w", {2}, 99, f32).build()); }, {"tensor 'w'", "type 99"});
  expect_input_error([&] { parse(Builder().tensor("w", {16}, 2, std::string(18, '\0')).build()); },
                     {"tensor 'w'", "16 elements per row", "Q4_0", "32"});
  expect_input_error([&] { parse(Builder().tensor("w", {1, 1, 1, 1, 1}, 0, f32).build()); },
                     {"tensor 'w'", "5 dimensions"});
  expect_input_error([&] { parse(Builder().tensor("w", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, f32).build()); },
                     {"tensor 'w'", "overflow"});
  // A zero dimension keeps the element count at 0 but not the strides (two fuzzer finds).
  expect_input_error([&] { parse(Builder().tensor("w", {0, uint64_t{1} << 63}, 0, "").build()); },
                     {"tensor 'w'", "overflow"});
  expect_input_error([&] { parse(Builder().tensor("w", {0, uint64_t{1} << 40, uint64_t{1} << 40}, 0, "").build()); },
                     {"tensor 'w'", "overflow"});
  expect_input_error([&] { parse(Builder().tensor("w", {2}, 0, f32, 4).build()); },
                     {"tensor 'w'", "offset 4", "alignment 32"});
  expect_input_error([&] { parse(Builder().tensor("w", {2}, 0, f32, 64).build()); },
                     {"tensor 'w'", "past the end of the file"});
  expect_input_error([&] { parse(Builder().tensor("w", {3}, 0, f32).build()); }, {"tensor 'w'", "12 bytes",
                                                                                    "past the end of the file"});
  expect_input_error([&] { parse(Builder().tensor("w", {uint64_t{1} << 61}, 0, f32).build()); },
                     {"tensor 'w'", "past the end of the file"});
}

TEST(Gguf, RefusesToDequantizeUnsupportedTypesNamingThem) {
  const GgufFile f = parse(Builder().tensor("q3", {256}, 11, std::string(110, '\0')).build());
  EXPECT_EQ(f.raw("q3").numel(), 110);  // still carried as bytes
  EXPECT_FALSE(ggml_type_dequantizable(11));
  expect_input_error([&] { f.tensor("q3"); }, {"test.gguf", "tensor 'q3'", "Q3_K", "does not dequantize"});
  expect_input_error([&] { f.tensor("nope"); }, {"test.gguf", "no tensor 'nope'"});
}

TEST(Gguf, RefusesFilesThatAreNotThere) {
  TempDir dir;
  expect_input_error([&] { GgufFile(dir.file("missing.gguf")); }, {"missing.gguf"});
  expect_input_error([&] { GgufFile{dir.path()}; }, {"not a regular file"});
  pare::testing::write_bytes(dir.file("short.gguf"), "GGUF");
  expect_input_error([&] { GgufFile(dir.file("short.gguf")); }, {"short.gguf", "truncated"});
}

// The fuzzer's seeds (written by gguf-py's GGUFWriter) open and dequantize: a seed that pare
// refused would leave the fuzzer only the refusals to explore.
TEST(Gguf, ReadsTheFuzzSeeds) {
  const std::string dir = std::string(PARE_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/";
  for (const char* name : {"metadata.gguf", "tensors.gguf", "align64_v2.gguf"}) {
    SCOPED_TRACE(name);
    const GgufFile f(dir + name);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    for (const auto& info : f.tensors()) EXPECT_EQ(f.tensor(info.name).numel(), info.numel()) << info.name;
  }
  const GgufFile v2(dir + "align64_v2.gguf");
  EXPECT_EQ(v2.version(), 2u);
  EXPECT_EQ(v2.alignment(), 64u);
  EXPECT_EQ(GgufFile(dir + "tensors.gguf").tensors().size(), 13u);
  EXPECT_EQ(GgufFile(dir + "metadata.gguf").get_ints("a.u64s"), (std::vector<int64_t>{1, 2}));
}

// ---------------------------------------------------------------------------------------------
// Writing: GgufWriter and ggml_quantize. tests/peer/gguf_export_test.sh checks the bytes against
// gguf-py's and ggml's own quantizers and runs the files in llama.cpp.

TEST(GgufWriter, WritesWhatTheReaderReads) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("general.alignment", 64);
  w.set_i32("answer", -42);
  w.set_f32("eps", 1e-5f);
  w.set_bool("flag", true);
  w.set_strings("words", {"a", "", "ünï"});
  w.set_i32s("ids", {3, -1, 7});
  w.set_f32s("scores", {0.5f, -2.f});
  w.set_u32("answer", 42);  // replaces the value, keeps the place
  const at::Tensor m = at::arange(12, at::kFloat).reshape({3, 4});
  w.add_tensor("m", {3, 4}, static_cast<uint32_t>(GgmlType::kF32), ggml_quantize(m, 0, "m"));
  const at::Tensor q = at::randn({2, 64});
  w.add_tensor("q", {2, 64}, static_cast<uint32_t>(GgmlType::kQ8_0), ggml_quantize(q, 8, "q"));
  const GgufFile f = parse(w.bytes());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.keys(), (std::vector<std::string>{"general.architecture", "general.alignment", "answer", "eps", "flag",
                                                "words", "ids", "scores"}));
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.value("answer").type, GgufValueType::kU32);
  EXPECT_EQ(f.get_int("answer"), 42);
  EXPECT_EQ(f.get_float("eps"), 1e-5f);
  EXPECT_TRUE(f.get_bool("flag"));
  EXPECT_EQ(f.get_strings("words"), (std::vector<std::string>{"a", "", "ünï"}));
  EXPECT_EQ(f.get_ints("ids"), (std::vector<int64_t>{3, -1, 7}));
  EXPECT_EQ(f.get_floats("scores"), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor_info("q").offset % 64, 0u);
  EXPECT_TRUE(at::equal(f.tensor("m"), m));
  EXPECT_EQ(f.tensor_info("q").shape, (std::vector<int64_t>{2, 64}));
  EXPECT_LE((f.tensor("q") - q).abs().max().item<float>(), q.abs().max().item<float>() / 127);
}

TEST(GgufWriter, RefusesTensorsThatDoNotFitTheirType) {
  GgufWriter w;
  w.add_tensor("a", {2}, 0, std::string(8, '\0'));
  auto refused = [&](const std::vector<int64_t>& shape, uint32_t type, size_t bytes, const std::string& says) {
    try {
      w.add_tensor("b", shape, type, std::string(bytes, '\0'));
      ADD_FAILURE() << "accepted " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused({3}, 0, 8, "has 8 bytes; its shape in F32 takes 12");
  refused({2, 48}, 8, 102, "rows of 48 values do not fill blocks of Q8_0");
  refused({1, 1, 1, 1, 1}, 0, 4, "5 dimensions");
  refused({}, 0, 4, "0 dimensions");
  try {
    w.add_tensor("a", {2}, 0, std::string(8, '\0'));
    ADD_FAILURE() << "a second tensor 'a'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a' added twice"), std::string::npos) << e.what();
  }
}

TEST(GgmlQuantize, GivesTheBlocksGgmlDoes) {
  // Q8_0: the largest magnitude maps to 127, so d = 1 and every integer comes back exactly.
  std::vector<float> v(32);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<float>(i % 2 ? -4 * i : 4 * i);
  v[5] = 127;
  std::string q8 = ggml_quantize(at::tensor(v), 8, "v");
  ASSERT_EQ(q8.size(), 34u);
  EXPECT_EQ(q8.substr(0, 2), u16(0x3c00));  // fp16 1.0
  for (int i = 0; i < 32; ++i) EXPECT_EQ(static_cast<int8_t>(q8[2 + i]), static_cast<int8_t>(v[i])) << i;
  // Q4_0: the value of largest magnitude, with its sign, becomes -8; here -8 itself, so d = 1.
  for (int i = 0; i < 32; ++i) v[i] = static_cast<float>(i % 16 - 8);
  v[3] = -8;
  const std::string q4 = ggml_quantize(at::tensor(v), 2, "v");
  ASSERT_EQ(q4.size(), 18u);
  EXPECT_EQ(q4.substr(0, 2), u16(0x3c00));
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(q4[2 + j] & 0x0F, static_cast<int>(v[j]) + 8) << j;
    EXPECT_EQ((q4[2 + j] >> 4) & 0x0F, static_cast<int>(v[j + 16]) + 8) << j;
  }
  // An all-zero block: scale -0 (0 / -8, as in ggml), every level the zero point.
  EXPECT_EQ(ggml_quantize(at::zeros({32}), 2, "z"), u16(0x8000) + std::string(16, '\x88'));
  // BF16: ggml's rounding, nearest even; a NaN stays a (quiet) NaN.
  const std::string b = ggml_quantize(at::tensor({1.0f + 1.0f / 256, 1.0f + 3.0f / 256, std::nanf("")}), 30, "b");
  EXPECT_EQ(b.substr(0, 2), u16(0x3f80));  // the tie goes to the even 1.0
  EXPECT_EQ(b.substr(2, 2), u16(0x3f82));
  uint16_t nan;
  std::memcpy(&nan, b.data() + 4, 2);
  EXPECT_EQ(nan & 0x7fc0, 0x7fc0);
}

TEST(GgmlQuantize, RoundTripsThroughTheReaderWithinEachFormatsStep) {
  at::manual_seed(11);
  const at::Tensor x = at::randn({8, 512});
  double error[4];
  int k = 0;
  for (const GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ5_0, GgmlType::kQ4_K, GgmlType::kQ4_0}) {
    GgufWriter w;
    w.add_tensor("x", {8, 512}, static_cast<uint32_t>(t), ggml_quantize(x, static_cast<uint32_t>(t), "x"));
    const at::Tensor back = parse(w.bytes()).tensor("x");
    error[k++] = (back - x).abs().mean().item<double>();
  }
  // Gaussian weights: Q8_0 about 0.25% of the spread; then Q5_0, Q4_K (a min and 6-bit sub-block
  // scales), Q4_0.
  EXPECT_LT(error[0], 0.01);
  EXPECT_LT(error[0], error[1]);
  EXPECT_LT(error[1], error[2]);
  EXPECT_LT(error[2], error[3]);
  EXPECT_LT(error[3], 0.15);
}

TEST(GgmlQuantize, RefusesRowsThatDoNotFillBlocksAndTypesItDoesNotWrite) {
  expect_input_error([] { ggml_quantize(at::zeros({2, 48}), 8, "tensor 'w'"); },
                     {"tensor 'w'", "rows of 48 values", "Q8_0's block of 32"});
  expect_input_error([] { ggml_quantize(at::zeros({2, 512}), 3, "tensor 'w'"); },
                     {"tensor 'w'", "does not write ggml type Q4_1"});
  EXPECT_TRUE(ggml_type_quantizable(12));
  EXPECT_FALSE(ggml_type_quantizable(14));
  EXPECT_EQ(ggml_block_size(12), 256);
  EXPECT_EQ(ggml_block_bytes(12), 144);
}

// ---- peer check, driven by tests/peer/gguf_peer_test.sh --------------------------------------------
//
// PARE_GGUF_PEER_DIR holds manifest.json (tests/peer/gguf_peer.py): per GGUF file, its version, its
// metadata as gguf-py's GGUFReader reads it ({key, type, elem, value} in file order) and per tensor
// its name, type, PyTorch-order shape, the CRC-32 of its stored bytes and of gguf-py's dequantized
// float32 values, and for some a .npy of those values (compared bit for bit).

uint32_t crc32_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return static_cast<uint32_t>(::crc32(0, static_cast<const Bytef*>(c.data_ptr()), static_cast<uInt>(c.nbytes())));
}

void expect_value(const GgufFile& f, const nlohmann::json& e) {
  const std::string key = e["key"];
  const GgufValue& v = f.value(key);
  ASSERT_EQ(gguf_value_type_name(v.type), e["type"].get<std::string>()) << key;
  const nlohmann::json& want = e["value"];
  if (v.is_array()) {
    const std::string elem = e["elem"];
    ASSERT_EQ(gguf_value_type_name(v.elem_type), elem) << key;
    if (elem == "string") EXPECT_EQ(f.get_strings(key), want.get<std::vector<std::string>>()) << key;
    else if (elem == "bool") EXPECT_EQ(f.get_bools(key), want.get<std::vector<bool>>()) << key;
    else if (elem.rfind("float", 0) == 0) EXPECT_EQ(f.get_floats(key), want.get<std::vector<double>>()) << key;
    else EXPECT_EQ(f.get_ints(key), want.get<std::vector<int64_t>>()) << key;
  } else if (want.is_string()) {
    EXPECT_EQ(f.get_string(key), want.get<std::string>()) << key;
  } else if (want.is_boolean()) {
    EXPECT_EQ(f.get_bool(key), want.get<bool>()) << key;
  } else if (want.is_number_float()) {
    EXPECT_EQ(f.get_float(key), want.get<double>()) << key;
  } else {
    EXPECT_EQ(f.get_int(key), want.get<int64_t>()) << key;
  }
}

void expect_tensor(const GgufFile& f, const nlohmann::json& e, const std::string& dir) {
  const std::string name = e["name"];
  const GgufTensorInfo& info = f.tensor_info(name);
  EXPECT_EQ(ggml_type_name(info.type), e["type"].get<std::string>()) << name;
  EXPECT_EQ(info.shape, e["shape"].get<std::vector<int64_t>>()) << name;
  EXPECT_EQ(crc32_of(f.raw(name)), e["raw_crc32"].get<uint32_t>()) << name << ": raw bytes differ";
  const at::Tensor t = f.tensor(name);
  EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
  EXPECT_EQ(t.sizes(), at::IntArrayRef(info.shape)) << name;
  EXPECT_EQ(crc32_of(t), e["crc32"].get<uint32_t>()) << name << " (" << e["type"] << "): dequantized values differ";
  if (e.contains("npy")) {
    const at::Tensor want = core::load_npy(dir + "/" + e["npy"].get<std::string>());
    EXPECT_TRUE(pare::testing::bitwise_equal(t, want)) << name << ": first differences at "
                                                       << at::nonzero(t.ne(want)).slice(0, 0, 4);
  }
}

TEST(GgufPeer, FromFiles) {
  const char* dir_env = std::getenv("PARE_GGUF_PEER_DIR");
  if (!dir_env || !*dir_env) GTEST_SKIP() << "PARE_GGUF_PEER_DIR is unset (tests/peer/gguf_peer_test.sh sets it)";
  const std::string dir = dir_env;
  const auto manifest = nlohmann::json::parse(read_file(dir + "/manifest.json"));
  ASSERT_FALSE(manifest.empty());
  for (const auto& file : manifest) {
    const GgufFile f(file["file"].get<std::string>());
    SCOPED_TRACE(f.path());
    EXPECT_EQ(f.version(), file["version"].get<uint32_t>());
    std::vector<std::string> keys;
    for (const auto& e : file["metadata"]) keys.push_back(e["key"]);
    EXPECT_EQ(f.keys(), keys);
    for (const auto& e : file["metadata"]) expect_value(f, e);
    std::vector<std::string> names;
    for (const auto& e : file["tensors"]) names.push_back(e["name"]);
    ASSERT_EQ(f.tensors().size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(f.tensors()[i].name, names[i]);
    for (const auto& e : file["tensors"]) expect_tensor(f, e, dir);
  }
}

}  // namespace
}  // namespace pare::lm
