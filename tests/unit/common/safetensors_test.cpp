// Single-file safetensors header validation: one control that must load, then one mutation
// per failure mode, each expected to fail with kExitBadModel naming the file (and tensor).
#include <gtest/gtest.h>

#include <filesystem>

#include "common/safetensors.h"
#include "test_util.h"

namespace k3 {
namespace {

using test::Entry;
using test::ExpectBadModel;

class SafetensorsTest : public ::testing::Test {
 protected:
  // Three tensors of different dtypes, packed: 24 + 8 + 3 = 35 data bytes.
  std::vector<Entry> Good() {
    return {{"a.weight", "F32", "[2,3]", 0, 24}, {"b.bias", "BF16", "[4]", 24, 32}, {"c.packed", "U8", "[3]", 32, 35}};
  }
  std::string Write(const std::vector<Entry>& es, int64_t data = 35, const std::string& meta = "") {
    const std::string p = dir_ / "m.safetensors";
    test::WriteFile(p, test::HeaderJson(es, meta), data);
    return p;
  }
  void ExpectFails(const std::string& path, const std::vector<std::string>& extra) {
    std::vector<std::string> needles = {path};
    needles.insert(needles.end(), extra.begin(), extra.end());
    ExpectBadModel([&] { SafetensorsFile::Open(path); }, needles);
  }
  test::TempDir dir_;
};

TEST_F(SafetensorsTest, ControlLoadsWithAbsoluteOffsets) {
  const std::string p = Write(Good(), 35, "{\"format\":\"pt\"}");
  const SafetensorsFile f = SafetensorsFile::Open(p);
  ASSERT_EQ(f.tensors().size(), 3u);
  const int64_t header = static_cast<int64_t>(test::ReadBytes(p).size()) - 35 - 8;
  EXPECT_EQ(f.data_start(), 8 + header);
  EXPECT_EQ(f.file_size(), 8 + header + 35);
  EXPECT_EQ(f.tensors()[0].name, "a.weight");
  EXPECT_EQ(f.tensors()[0].dtype, DType::F32);
  EXPECT_EQ(f.tensors()[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.tensors()[0].numel(), 6);
  EXPECT_EQ(f.tensors()[0].nbytes, 24);
  EXPECT_EQ(f.tensors()[0].file_offset, f.data_start());
  EXPECT_EQ(f.tensors()[1].dtype, DType::BF16);
  EXPECT_EQ(f.tensors()[1].file_offset, f.data_start() + 24);
  EXPECT_EQ(f.tensors()[2].dtype, DType::U8);
  EXPECT_EQ(f.tensors()[2].file_offset, f.data_start() + 32);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST_F(SafetensorsTest, ControlSortsByOffsetAndAcceptsScalarsAndEmpty) {
  // Listed out of offset order; a scalar (shape []) and a zero-size tensor are legal.
  const std::string p = Write({{"z", "I64", "[]", 8, 16}, {"y", "F64", "[1]", 0, 8}, {"e", "F16", "[0,5]", 16, 16},
                               {"w", "BOOL", "[2]", 16, 18}, {"i8", "I8", "[1]", 18, 19}, {"i32", "I32", "[1]", 20, 24}},
                              24);
  const SafetensorsFile f = SafetensorsFile::Open(p);
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.tensors()[0].name, "y");
  EXPECT_EQ(f.tensors()[1].name, "z");
  EXPECT_EQ(f.tensors()[1].numel(), 1);
  EXPECT_TRUE(f.metadata().empty());
}

TEST_F(SafetensorsTest, DTypeSizes) {
  EXPECT_EQ(DTypeSize(DType::F32), 4);
  EXPECT_EQ(DTypeSize(DType::BF16), 2);
  EXPECT_EQ(DTypeSize(DType::F16), 2);
  EXPECT_EQ(DTypeSize(DType::U8), 1);
  EXPECT_EQ(DTypeSize(DType::I8), 1);
  EXPECT_EQ(DTypeSize(DType::I32), 4);
  EXPECT_EQ(DTypeSize(DType::I64), 8);
  EXPECT_EQ(DTypeSize(DType::F64), 8);
  EXPECT_EQ(DTypeSize(DType::BOOL), 1);
  EXPECT_STREQ(DTypeName(DType::BF16), "BF16");
}

TEST_F(SafetensorsTest, FourByteFile) {
  const std::string p = dir_ / "m.safetensors";
  test::WriteBytes(p, "abcd");
  ExpectFails(p, {"too small"});
}

TEST_F(SafetensorsTest, MissingFile) { ExpectFails(dir_ / "absent.safetensors", {"cannot open"}); }

TEST_F(SafetensorsTest, HeaderLengthAllOnes) {
  const std::string p = dir_ / "m.safetensors";
  test::WriteFile(p, test::HeaderJson(Good()), 35, /*header_len_override=*/0x7fffffffffffffffLL);
  std::string b = test::ReadBytes(p);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(0xff);  // u64 all ones
  test::WriteBytes(p, b);
  ExpectFails(p, {"header length"});
}

TEST_F(SafetensorsTest, HeaderLongerThanFile) {
  const std::string p = dir_ / "m.safetensors";
  const std::string h = test::HeaderJson(Good());
  test::WriteFile(p, h, 35, /*header_len_override=*/1000);
  ExpectFails(p, {"exceeds the file size"});
}

TEST_F(SafetensorsTest, FirstJsonByteChanged) {
  const std::string p = Write(Good());
  std::string b = test::ReadBytes(p);
  ASSERT_EQ(b[8], '{');
  b[8] = 'x';
  test::WriteBytes(p, b);
  ExpectFails(p, {"invalid JSON"});
}

TEST_F(SafetensorsTest, NonUtf8ByteInName) {
  // The byte sequence is a valid JSON string byte-wise but not valid UTF-8.
  auto es = Good();
  es[0].name = std::string("a.we") + static_cast<char>(0xff) + "ght";
  ExpectFails(Write(es), {"invalid JSON", "UTF-8"});
}

TEST_F(SafetensorsTest, DuplicateTensorNames) {
  auto es = Good();
  es[2].name = "a.weight";
  ExpectFails(Write(es), {"duplicate", "a.weight"});
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  auto es = Good();
  es[1].begin = 20;  // b.bias [20,28) overlaps a.weight [0,24); shape says 8 bytes
  es[1].end = 28;
  ExpectFails(Write(es), {"overlaps", "b.bias", "a.weight"});
}

TEST_F(SafetensorsTest, OffsetsOutsideDataSection) {
  auto es = Good();
  es[2].begin = 40;
  es[2].end = 43;
  ExpectFails(Write(es), {"c.packed", "beyond the data section"});
}

TEST_F(SafetensorsTest, EndBeforeBegin) {
  auto es = Good();
  es[1].begin = 32;
  es[1].end = 24;
  ExpectFails(Write(es), {"b.bias", "< begin"});
}

TEST_F(SafetensorsTest, DTypeShapeByteLengthMismatch) {
  auto es = Good();
  es[0].dtype = "BF16";  // [2,3] BF16 = 12 bytes, span is 24
  ExpectFails(Write(es), {"a.weight", "12 bytes", "span 24"});
}

TEST_F(SafetensorsTest, ShapeOverflow) {
  auto es = Good();
  es[0].shape = "[1099511627776,1099511627776]";  // 2^40 x 2^40 elements
  ExpectFails(Write(es), {"a.weight", "overflow"});
}

TEST_F(SafetensorsTest, ByteSizeOverflow) {
  auto es = Good();
  es[0].shape = "[4611686018427387904]";  // 2^62 elements fit, x4 bytes do not
  ExpectFails(Write(es), {"a.weight", "overflow"});
}

TEST_F(SafetensorsTest, NegativeDim) {
  auto es = Good();
  es[0].shape = "[-2,-3]";
  ExpectFails(Write(es), {"a.weight", "non-negative integers"});
}

TEST_F(SafetensorsTest, NonIntegerDim) {
  auto es = Good();
  es[0].shape = "[2.0,3]";
  ExpectFails(Write(es), {"a.weight", "non-negative integers"});
  es[0].shape = "[\"2\",3]";
  ExpectFails(Write(es), {"a.weight", "non-negative integers"});
}

TEST_F(SafetensorsTest, UnknownDType) {
  auto es = Good();
  es[2].dtype = "F8_E9M9";
  ExpectFails(Write(es), {"c.packed", "unknown dtype"});
}

TEST_F(SafetensorsTest, MissingField) {
  const std::string p = dir_ / "m.safetensors";
  test::WriteFile(p, "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1);
  ExpectFails(p, {"tensor a", "shape"});
}

TEST_F(SafetensorsTest, TruncatedDataSection) {
  const std::string p = Write(Good());
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 2);
  ExpectFails(p, {"c.packed", "truncated"});
}

TEST_F(SafetensorsTest, MetadataMustBeStrings) {
  ExpectFails(Write(Good(), 35, "{\"format\":3}"), {"__metadata__", "format"});
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  const std::string p = dir_ / "m.safetensors";
  test::WriteFile(p, "[1,2,3]", 0);
  ExpectFails(p, {"not a JSON object"});
}

}  // namespace
}  // namespace k3

namespace k3 {
namespace {

TEST(SafetensorsJson, DuplicateFieldInsideEntry) {
  test::TempDir d;
  const std::string p = d / "m.safetensors";
  test::WriteFile(p, "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
  test::ExpectBadModel([&] { SafetensorsFile::Open(p); }, {p, "duplicate", "dtype"});
}

TEST(SafetensorsJson, DeepNestingIsAnErrorNotACrash) {
  test::TempDir d;
  const std::string p = d / "m.safetensors";
  test::WriteFile(p, "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}", 0);
  test::ExpectBadModel([&] { SafetensorsFile::Open(p); }, {p, "tensor a"});
}

TEST(SafetensorsJson, TrailingGarbageAfterHeader) {
  test::TempDir d;
  const std::string p = d / "m.safetensors";
  test::WriteFile(p, "{}x", 0);
  test::ExpectBadModel([&] { SafetensorsFile::Open(p); }, {p, "invalid JSON"});
}

}  // namespace
}  // namespace k3
