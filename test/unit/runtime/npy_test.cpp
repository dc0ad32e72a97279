//===- npy_test.cpp - .npy reading and writing ----------------------------===//

#include "test_util.h"

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

class NpyTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/cleave-npy-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }
  std::string path(const std::string &name) { return dir_ + "/" + name; }

  void writeRaw(const std::string &p, const std::string &bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string readRaw(const std::string &p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  /// A .npy file of the given version with \p dict padded to 64 bytes.
  std::string makeFile(int major, const std::string &dict,
                       const std::string &data) {
    size_t prefix = major == 1 ? 10 : 12;
    std::string header = dict;
    while ((prefix + header.size() + 1) % 64 != 0)
      header += ' ';
    header += '\n';
    std::string out = "\x93NUMPY";
    out += static_cast<char>(major);
    out += '\0';
    size_t len = header.size();
    for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i)
      out += static_cast<char>((len >> (8 * i)) & 0xff);
    return out + header + data;
  }

  std::string dir_;
};

TEST_F(NpyTest, RoundTripEveryDType) {
  std::vector<HostTensor> tensors = {
      randomF32({2, 3}, 1),
      i64({4}, {-1, 0, int64_t(1) << 40, 7}),
      i32({2, 1, 2}, {-5, 6, 7, 8}),
      boolean({3}, {1, 0, 1}),
      f32({}, {3.5f}), // scalar
      f32({0, 3}, {}), // empty
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string p = path("t" + std::to_string(i) + ".npy");
    Status s = writeNpy(p, tensors[i]);
    ASSERT_TRUE(s.isOk()) << s.message();
    // Format 1.0 with the data 64-byte aligned, no temporary left behind.
    std::string raw = readRaw(p);
    ASSERT_GE(raw.size(), 10u);
    EXPECT_EQ(raw.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    size_t headerLen =
        static_cast<uint8_t>(raw[8]) | (static_cast<uint8_t>(raw[9]) << 8);
    EXPECT_EQ((10 + headerLen) % 64, 0u);
    EXPECT_EQ(raw[10 + headerLen - 1], '\n');
    EXPECT_FALSE(std::ifstream(p + ".tmp." + std::to_string(getpid())).good());

    HostTensor back;
    s = readNpy(p, &back);
    ASSERT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(back.dtype, tensors[i].dtype);
    EXPECT_EQ(back.shape, tensors[i].shape);
    EXPECT_EQ(back.bytes, tensors[i].bytes);
  }
}

TEST_F(NpyTest, HeaderTextMatchesNumpy) {
  std::string p = path("h.npy");
  ASSERT_TRUE(writeNpy(p, i32({5}, {1, 2, 3, 4, 5})).isOk());
  std::string raw = readRaw(p);
  std::string dict =
      "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }";
  EXPECT_EQ(raw.substr(10, dict.size()), dict);
}

TEST_F(NpyTest, ReadsVersions2And3AndByteBools) {
  float data[2] = {1.5f, -2.0f};
  std::string bytes(reinterpret_cast<const char *>(data), sizeof(data));
  for (int major : {2, 3}) {
    std::string p = path("v" + std::to_string(major) + ".npy");
    writeRaw(
        p, makeFile(major,
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                    bytes));
    HostTensor t;
    Status s = readNpy(p, &t);
    ASSERT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(values<float>(t), (std::vector<float>{1.5f, -2.0f}));
  }
  std::string p = path("u1.npy");
  writeRaw(
      p,
      makeFile(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 3), }",
               std::string("\x00\x02\x01", 3)));
  HostTensor t;
  Status s = readNpy(p, &t);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(t.dtype, DType::U8);
  EXPECT_EQ(values<uint8_t>(t), (std::vector<uint8_t>{0, 2, 1}));
  // uint8 data given for a bool input reads as bool.
  conformInput(t, DType::Bool);
  EXPECT_EQ(t.dtype, DType::Bool);
  EXPECT_EQ(t.shape, (Shape{1, 3}));
  EXPECT_EQ(values<uint8_t>(t), (std::vector<uint8_t>{0, 1, 1}));

  p = path("scalar.npy");
  int64_t v = 42;
  writeRaw(
      p, makeFile(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }",
                  std::string(reinterpret_cast<const char *>(&v), 8)));
  ASSERT_TRUE(readNpy(p, &t).isOk());
  EXPECT_TRUE(t.shape.empty());
  EXPECT_EQ(values<int64_t>(t), (std::vector<int64_t>{42}));
}

TEST_F(NpyTest, ErrorsNameThePathAndCause) {
  auto expectError = [&](const std::string &name, const std::string &contents,
                         const std::string &cause) {
    std::string p = path(name);
    writeRaw(p, contents);
    HostTensor t;
    Status s = readNpy(p, &t);
    ASSERT_FALSE(s.isOk()) << name;
    EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(cause), std::string::npos) << s.message();
  };
  std::string good =
      makeFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
               std::string(16, '\0'));
  expectError("truncated_data.npy", good.substr(0, good.size() - 3),
              "truncated");
  expectError("truncated_header.npy", good.substr(0, 30), "truncated");
  expectError("tiny.npy", good.substr(0, 7), "truncated");
  expectError("short_magic.npy", good.substr(0, 4), "bad magic");
  expectError("magic.npy", "PK\x03\x04" + good.substr(4), "bad magic");
  expectError(
      "fortran.npy",
      makeFile(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
               std::string(16, '\0')),
      "Fortran");
  expectError(
      "c8.npy",
      makeFile(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }",
               std::string(16, '\0')),
      "unsupported dtype '<c8'");
  expectError(
      "bigendian.npy",
      makeFile(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
               std::string(8, '\0')),
      "unsupported dtype '>f4'");
  expectError(
      "version.npy",
      makeFile(4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
               std::string(8, '\0')),
      "version");

  HostTensor t;
  Status s = readNpy(path("missing.npy"), &t);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("missing.npy"), std::string::npos);
}

TEST_F(NpyTest, WriteRejectsInconsistentTensor) {
  HostTensor t = f32({2}, {1, 2});
  t.bytes.pop_back();
  EXPECT_FALSE(writeNpy(path("bad.npy"), t).isOk());
  EXPECT_FALSE(writeNpy(path("no/such/dir/x.npy"), f32({1}, {1})).isOk());
}

TEST(SanitizeFileName, MapsOtherCharacters) {
  EXPECT_EQ(sanitizeFileName("layer.0/attn:q-proj_W"), "layer.0_attn_q-proj_W");
  EXPECT_EQ(sanitizeFileName("a b\xc3\xa9"), "a_b__");
  EXPECT_EQ(sanitizeFileName(""), "");
}

// The storage dtypes round-trip with numpy's descrs; bfloat16, which numpy
// lacks, is refused on writing.
TEST_F(NpyTest, StorageDTypesRoundTrip) {
  for (auto [dtype, descr] :
       {std::pair{DType::F64, "<f8"}, std::pair{DType::F16, "<f2"},
        std::pair{DType::I8, "|i1"}, std::pair{DType::I16, "<i2"},
        std::pair{DType::U8, "|u1"}, std::pair{DType::U16, "<u2"},
        std::pair{DType::U32, "<u4"}}) {
    HostTensor t = HostTensor::zeros(dtype, {2, 3});
    for (size_t i = 0; i < t.bytes.size(); ++i)
      t.bytes[i] = static_cast<uint8_t>(i * 37 + 1);
    std::string p = path(std::string(dtypeName(dtype)) + ".npy");
    ASSERT_TRUE(writeNpy(p, t).isOk()) << descr;
    std::ifstream in(p, std::ios::binary);
    std::string file((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(file.find(std::string("'descr': '") + descr + "'"),
              std::string::npos)
        << file;
    HostTensor back;
    ASSERT_TRUE(readNpy(p, &back).isOk()) << descr;
    EXPECT_EQ(back.dtype, dtype);
    EXPECT_EQ(back.shape, t.shape);
    EXPECT_EQ(back.bytes, t.bytes);
  }
  Status s = writeNpy(path("bf16.npy"), HostTensor::zeros(DType::BF16, {2}));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("numpy has no dtype for bf16"), std::string::npos)
      << s.message();
}

} // namespace
