//===- store_test.cpp - safetensors, sharded stores, data feeds -----------===//

#include "cleave/runtime/data.h"
#include "cleave/runtime/files.h"
#include "cleave/runtime/npy.h"
#include "cleave/runtime/safetensors.h"
#include "cleave/runtime/store.h"

#include "plan/plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

namespace cleave::rt {
namespace {

namespace fs = std::filesystem;

HostTensor iota(std::vector<int64_t> shape) {
  HostTensor t = HostTensor::zeros(DType::F32, shape);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<float>()[i] = static_cast<float>(i);
  return t;
}

fs::path scratch(const std::string &name) {
  fs::path dir = fs::temp_directory_path() /
                 ("cleave-store-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Store, RankRangesCoverTheDimensionOnce) {
  // 3 blocks of 8 (a fused q/k/v), 4 ranks: each rank holds 2 of each block.
  std::vector<int> owner(24, -1);
  for (int r = 0; r < 4; ++r)
    for (auto [lo, hi] : rankRanges(24, {0, 3}, r, 4)) {
      EXPECT_EQ(hi - lo, 2);
      for (int64_t i = lo; i < hi; ++i) {
        EXPECT_EQ(owner[i], -1);
        owner[i] = r;
      }
    }
  EXPECT_EQ(owner[0], 0);
  EXPECT_EQ(owner[2], 1);
  EXPECT_EQ(owner[8], 0); // the second block starts again at rank 0
  EXPECT_EQ(owner[23], 3);
}

TEST(Store, ChunksReassembleTheTensor) {
  HostTensor global = iota({6, 12, 2});
  for (Split split : {Split{1, 1}, Split{1, 3}, Split{0, 1}, Split{2, 1}}) {
    HostTensor back = HostTensor::zeros(DType::F32, global.shape);
    for (int r = 0; r < 2; ++r) {
      HostTensor chunk = chunkOf(global, split, r, 2);
      EXPECT_EQ(chunk.shape[split.dim], global.shape[split.dim] / 2);
      putRanges(&back, split.dim,
                rankRanges(global.shape[split.dim], split, r, 2), chunk);
    }
    EXPECT_EQ(back.bytes, global.bytes) << "split dim " << split.dim;
  }
  // Blocks: rank 1's chunk of 3 blocks of 4 columns is columns 2-3, 6-7,
  // 10-11.
  HostTensor m = iota({1, 12});
  HostTensor c = chunkOf(m, {1, 3}, 1, 2);
  std::vector<float> got(c.data<float>(), c.data<float>() + 6);
  EXPECT_EQ(got, (std::vector<float>{2, 3, 6, 7, 10, 11}));
}

TEST(Store, PaddedChunksWhereTpDoesNotDivide) {
  // 10 rows on 4 ranks: chunks of 3 in memory; rank 3 holds row 9 and two
  // rows of padding, files hold the real rows only.
  EXPECT_EQ(localExtent(10, {0, 1}, 4), 3);
  EXPECT_TRUE(isPadded(10, {0, 1}, 4));
  EXPECT_FALSE(isPadded(12, {0, 1}, 4));
  EXPECT_EQ(rankRanges(10, {0, 1}, 3, 4),
            (std::vector<std::pair<int64_t, int64_t>>{{9, 10}}));
  // 5 rows on 4 ranks (chunks of 2): rank 3 holds nothing but padding.
  EXPECT_EQ(rankRanges(5, {0, 1}, 3, 4),
            (std::vector<std::pair<int64_t, int64_t>>{{5, 5}}));
  HostTensor global = iota({10, 2});
  HostTensor back = HostTensor::zeros(DType::F32, global.shape);
  for (int r = 0; r < 4; ++r) {
    HostTensor chunk = chunkOf(global, {0, 1}, r, 4);
    EXPECT_EQ(chunk.shape[0], r < 3 ? 3 : 1);
    HostTensor local = toLocal(chunk, {0, 1}, 10, r, 4);
    ASSERT_EQ(local.shape, (std::vector<int64_t>{3, 2}));
    if (r == 3) {
      std::vector<float> got(local.data<float>(), local.data<float>() + 6);
      EXPECT_EQ(got, (std::vector<float>{18, 19, 0, 0, 0, 0}));
    }
    HostTensor trimmed = fromLocal(local, {0, 1}, 10, r, 4);
    EXPECT_EQ(trimmed.bytes, chunk.bytes);
    putRanges(&back, 0, rankRanges(10, {0, 1}, r, 4), trimmed);
  }
  EXPECT_EQ(back.bytes, global.bytes);
  // A padded inner dimension: [2, 5] split along 1 on 2 ranks.
  HostTensor m = iota({2, 5});
  HostTensor local = toLocal(chunkOf(m, {1, 1}, 1, 2), {1, 1}, 5, 1, 2);
  std::vector<float> got(local.data<float>(), local.data<float>() + 6);
  EXPECT_EQ(got, (std::vector<float>{3, 4, 0, 8, 9, 0}));
}

TEST(Store, ChunksHeldByGroupsOfRanks) {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  // tp 4 factored into 2 groups of 2: split over the outer axis alone (a
  // K/V head per group), rank r holds chunk r / 2; the first of each
  // group writes it.
  Split outer{0, 1, 1, 2, 2};
  EXPECT_EQ(localExtent(16, outer, 4), 8);
  EXPECT_FALSE(isPadded(16, outer, 4));
  std::vector<Ranges> want = {{{0, 8}}, {{0, 8}}, {{8, 16}}, {{8, 16}}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(rankRanges(16, outer, r, 4), want[r]) << r;
    EXPECT_EQ(outer.firstHolder(r, 4), r % 2 == 0) << r;
  }
  // Over the inner axis alone: rank r holds chunk r % 2, alike in every
  // group; the first group writes.
  Split inner{0, 1, 1, 2, 1};
  want = {{{0, 8}}, {{8, 16}}, {{0, 8}}, {{8, 16}}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(rankRanges(16, inner, r, 4), want[r]) << r;
    EXPECT_EQ(inner.firstHolder(r, 4), r < 2) << r;
  }
  // 5 rows over the groups: chunks of 3, the second group's padded.
  EXPECT_EQ(localExtent(5, outer, 4), 3);
  EXPECT_TRUE(isPadded(5, outer, 4));
  EXPECT_EQ(rankRanges(5, outer, 3, 4), (Ranges{{3, 5}}));
  HostTensor global = iota({5, 2});
  HostTensor local = toLocal(chunkOf(global, outer, 3, 4), outer, 5, 3, 4);
  std::vector<float> got(local.data<float>(), local.data<float>() + 6);
  EXPECT_EQ(got, (std::vector<float>{6, 7, 8, 9, 0, 0}));
}

TEST(Store, HeadAlignedChunksInBlocks) {
  // A fused q|k|v of 3 blocks of 5 heads of width 2 (30 rows) on 4 ranks:
  // every rank holds ceil(5 / 4) = 2 whole heads of each block (4 rows),
  // rank 2 one head and a head of padding, rank 3 only padding.
  Split s{0, 3, 2};
  EXPECT_EQ(localExtent(30, s, 4), 12);
  EXPECT_TRUE(isPadded(30, s, 4));
  EXPECT_EQ(rankRanges(30, s, 1, 4), (std::vector<std::pair<int64_t, int64_t>>{
                                         {4, 8}, {14, 18}, {24, 28}}));
  EXPECT_EQ(rankRanges(30, s, 2, 4), (std::vector<std::pair<int64_t, int64_t>>{
                                         {8, 10}, {18, 20}, {28, 30}}));
  EXPECT_EQ(rankRanges(30, s, 3, 4), (std::vector<std::pair<int64_t, int64_t>>{
                                         {10, 10}, {20, 20}, {30, 30}}));
  // Where tp times the granule divides a block, it changes nothing.
  EXPECT_FALSE(isPadded(24, Split{0, 3, 2}, 4));
  EXPECT_EQ(localExtent(24, Split{0, 3, 2}, 4), 6);
  HostTensor global = iota({30, 1});
  HostTensor back = HostTensor::zeros(DType::F32, global.shape);
  for (int r = 0; r < 4; ++r) {
    HostTensor local = toLocal(chunkOf(global, s, r, 4), s, 30, r, 4);
    ASSERT_EQ(local.shape, (std::vector<int64_t>{12, 1}));
    if (r == 2) {
      // Each block's chunk: its real head, then zeros.
      std::vector<float> got(local.data<float>(), local.data<float>() + 12);
      EXPECT_EQ(got,
                (std::vector<float>{8, 9, 0, 0, 18, 19, 0, 0, 28, 29, 0, 0}));
    }
    putRanges(&back, 0, rankRanges(30, s, r, 4), fromLocal(local, s, 30, r, 4));
  }
  EXPECT_EQ(back.bytes, global.bytes);
}

TEST(Safetensors, RoundTripAndDigest) {
  fs::path dir = scratch("roundtrip");
  std::string path = (dir / "a.safetensors").string();
  HostTensor a = iota({3, 5});
  HostTensor b = HostTensor::zeros(DType::I64, {4});
  for (int i = 0; i < 4; ++i)
    b.data<int64_t>()[i] = 10 * i;
  std::unique_ptr<SafetensorsWriter> w;
  ASSERT_TRUE(SafetensorsWriter::create(
      path, {{"a", DType::F32, {3, 5}}, {"b", DType::I64, {4}}},
      {{"format", "pt"}}, &w));
  // Not visible before finish().
  EXPECT_FALSE(fs::exists(path));
  ASSERT_TRUE(w->write(a.bytes.data(), a.bytes.size()));
  ASSERT_TRUE(w->write(b.bytes.data(), b.bytes.size()));
  uint64_t size;
  uint32_t crc;
  ASSERT_TRUE(w->finish(&size, &crc));
  EXPECT_EQ(fs::file_size(path), size);
  // The header is 8-aligned, as the format asks.
  EXPECT_EQ((w->tensors()[0].begin) % 8, 0u);

  std::unique_ptr<SafetensorsFile> f;
  ASSERT_TRUE(SafetensorsFile::open(path, &f, size, crc));
  EXPECT_EQ(f->metadata().at("format"), "pt");
  HostTensor ra, rb;
  ASSERT_NE(f->find("a"), nullptr);
  ASSERT_TRUE(f->read(*f->find("a"), &ra));
  ASSERT_TRUE(f->read(*f->find("b"), &rb));
  EXPECT_EQ(ra.bytes, a.bytes);
  EXPECT_EQ(rb.bytes, b.bytes);
  EXPECT_EQ(rb.shape, (std::vector<int64_t>{4}));

  // One changed byte, or a shorter file: refused, naming the file.
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(size - 3));
    io.put('\x7f');
  }
  Status changed = SafetensorsFile::open(path, &f, size, crc);
  ASSERT_FALSE(changed);
  EXPECT_NE(changed.message().find("checksum"), std::string::npos);
  fs::resize_file(path, size - 8);
  Status truncated = SafetensorsFile::open(path, &f, size, crc);
  ASSERT_FALSE(truncated);
  EXPECT_NE(truncated.message().find("truncated"), std::string::npos);
  // Without digests the header is still checked against the file.
  Status outside = SafetensorsFile::open(path, &f);
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.message().find("outside the file"), std::string::npos);
}

TEST(Safetensors, EveryDTypeRoundTripsAndFloatsWiden) {
  fs::path dir = scratch("dtypes");
  std::string path = (dir / "d.safetensors").string();
  // bf16 and f16 bits of 1, -2.5 and 3.140625 / 65504; f64 with a value
  // beyond f32's range; int8.
  const uint16_t bf16[] = {0x3F80, 0xC020, 0x4049};
  const uint16_t f16[] = {0x3C00, 0xC100, 0x7BFF};
  const double f64[] = {1.0, -2.5, 1e300};
  const int8_t i8[] = {1, -2, 3};
  std::unique_ptr<SafetensorsWriter> w;
  ASSERT_TRUE(SafetensorsWriter::create(path,
                                        {{"b", DType::BF16, {3}},
                                         {"h", DType::F16, {3}},
                                         {"d", DType::F64, {3}},
                                         {"i", DType::I8, {3}}},
                                        {}, &w));
  ASSERT_TRUE(w->write(bf16, sizeof bf16));
  ASSERT_TRUE(w->write(f16, sizeof f16));
  ASSERT_TRUE(w->write(f64, sizeof f64));
  ASSERT_TRUE(w->write(i8, sizeof i8));
  ASSERT_TRUE(w->finish(nullptr, nullptr));
  std::unique_ptr<SafetensorsFile> f;
  ASSERT_TRUE(SafetensorsFile::open(path, &f));
  HostTensor b, h, d, i;
  for (auto [name, t] : {std::pair<const char *, HostTensor *>{"b", &b},
                         {"h", &h},
                         {"d", &d},
                         {"i", &i}}) {
    ASSERT_NE(f->find(name), nullptr) << name;
    ASSERT_TRUE(f->read(*f->find(name), t)) << name;
  }
  EXPECT_EQ(b.dtype, DType::BF16);
  EXPECT_EQ(d.dtype, DType::F64);
  // 16-bit floats widen exactly; f64 beyond f32 and integers do not.
  ASSERT_TRUE(widenToF32(&b));
  ASSERT_TRUE(widenToF32(&h));
  EXPECT_EQ(b.dtype, DType::F32);
  EXPECT_EQ(std::vector<float>(b.data<float>(), b.data<float>() + 3),
            (std::vector<float>{1.0f, -2.5f, 3.140625f}));
  EXPECT_EQ(std::vector<float>(h.data<float>(), h.data<float>() + 3),
            (std::vector<float>{1.0f, -2.5f, 65504.0f}));
  EXPECT_FALSE(widenToF32(&d));
  EXPECT_EQ(d.dtype, DType::F64); // unchanged
  d.data<double>()[2] = 0.1;
  ASSERT_TRUE(widenToF32(&d));
  EXPECT_EQ(d.data<float>()[2], 0.1f);
  EXPECT_FALSE(widenToF32(&i));
}

TEST(Safetensors, WriterRejectsWrongByteCounts) {
  fs::path dir = scratch("counts");
  std::unique_ptr<SafetensorsWriter> w;
  ASSERT_TRUE(SafetensorsWriter::create((dir / "x.safetensors").string(),
                                        {{"x", DType::F32, {2}}}, {}, &w));
  float one = 1;
  ASSERT_TRUE(w->write(&one, 4));
  EXPECT_FALSE(w->finish(nullptr, nullptr)); // 4 of 8 data bytes
  w.reset();
  EXPECT_TRUE(fs::is_empty(dir)); // nothing left behind
}

TEST(Store, WriterAndReaderAcrossLayouts) {
  fs::path dir = scratch("store");
  google::protobuf::RepeatedPtrField<plan::TensorEntry> entries;
  plan::TensorEntry *w = entries.Add();
  w->set_name("w");
  w->set_key("w");
  w->mutable_type()->set_dtype(plan::F32);
  w->mutable_type()->add_shape(8);
  w->mutable_type()->add_shape(6);
  w->set_split_dim(1);
  w->set_split_blocks(3);
  plan::TensorEntry *b = entries.Add();
  b->set_name("b");
  b->set_key("b");
  b->mutable_type()->set_dtype(plan::F32);
  b->mutable_type()->add_shape(8);
  std::unique_ptr<StoreWriter> writer;
  ASSERT_TRUE(
      StoreWriter::create(dir.string(), "weights", 2, &entries, &writer));
  HostTensor gw = iota({8, 6}), gb = iota({8});
  ASSERT_TRUE(writer->add(gw));
  ASSERT_TRUE(writer->add(gb));
  google::protobuf::RepeatedPtrField<plan::FileDigest> digests;
  ASSERT_TRUE(writer->finish(&digests));
  ASSERT_EQ(digests.size(), 2);
  EXPECT_EQ(entries[0].slices_size(), 2);
  EXPECT_EQ(entries[0].slices(1).starts_size(), 3);

  StoreReader reader(dir.string(), "store", digests);
  HostTensor whole, chunk;
  ASSERT_TRUE(reader.readGlobal(entries[0], &whole));
  EXPECT_EQ(whole.bytes, gw.bytes);
  // The stored layout, and others (rows over 4 ranks; replicated).
  ASSERT_TRUE(reader.readChunk(entries[0], {1, 3}, 1, 2, &chunk));
  EXPECT_EQ(chunk.bytes, chunkOf(gw, {1, 3}, 1, 2).bytes);
  ASSERT_TRUE(reader.readChunk(entries[0], {0, 1}, 3, 4, &chunk));
  EXPECT_EQ(chunk.bytes, chunkOf(gw, {0, 1}, 3, 4).bytes);
  ASSERT_TRUE(reader.readChunk(entries[1], {}, 0, 1, &chunk));
  EXPECT_EQ(chunk.bytes, gb.bytes);
  // Rows over 3 ranks: padded chunks (3, 3, 2 real rows).
  ASSERT_TRUE(reader.readChunk(entries[0], {0, 1}, 2, 3, &chunk));
  EXPECT_EQ(chunk.shape, (std::vector<int64_t>{2, 6}));
  Status indivisible = reader.readChunk(entries[0], {1, 4}, 0, 2, &chunk);
  ASSERT_FALSE(indivisible);
  EXPECT_NE(indivisible.message().find("cannot be split"), std::string::npos);
}

// A fused [10, 3] tensor stored as rows 0:6 and 6:10 (in either order in
// the table): the model's tensor comes back whole; segments that overlap,
// leave a gap or disagree in the other dimensions are refused.
TEST(Store, SegmentsJoinIntoTheModelTensor) {
  google::protobuf::RepeatedPtrField<plan::TensorEntry> entries;
  auto add = [&](const std::string &name, int64_t offset, int64_t rows,
                 int64_t cols) {
    plan::TensorEntry *e = entries.Add();
    e->set_name(name);
    e->set_role(plan::Binding::PARAMETER);
    e->mutable_type()->set_dtype(plan::F32);
    e->mutable_type()->add_shape(rows);
    e->mutable_type()->add_shape(cols);
    e->set_segment_of("w");
    e->set_segment_dim(0);
    e->set_segment_offset(offset);
  };
  add("w[6:10]", 6, 4, 3);
  plan::TensorEntry *b = entries.Add();
  b->set_name("b");
  b->set_role(plan::Binding::PARAMETER);
  b->mutable_type()->add_shape(3);
  add("w[0:6]", 0, 6, 3);
  std::vector<ModelTensor> tensors;
  ASSERT_TRUE(modelTensors(entries, &tensors));
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].name, "w");
  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{10, 3}));
  ASSERT_EQ(tensors[0].entries.size(), 2u);
  EXPECT_EQ(tensors[0].entries[0]->name(), "w[0:6]");
  EXPECT_EQ(tensors[1].name, "b");
  EXPECT_EQ(tensors[1].dim, -1);
  HostTensor whole = iota({10, 3});
  std::vector<HostTensor> parts{takeRanges(whole, 0, {{0, 6}}),
                                takeRanges(whole, 0, {{6, 10}})};
  EXPECT_EQ(joinSegments(tensors[0], std::move(parts)).bytes, whole.bytes);

  entries.Mutable(0)->set_segment_offset(5); // overlaps rows 0:6
  EXPECT_FALSE(modelTensors(entries, &tensors));
  entries.Mutable(0)->set_segment_offset(7); // leaves row 6 out
  EXPECT_FALSE(modelTensors(entries, &tensors));
  entries.Mutable(0)->set_segment_offset(6);
  entries.Mutable(0)->mutable_type()->set_shape(1, 2); // 2 columns, not 3
  EXPECT_FALSE(modelTensors(entries, &tensors));
  entries.Mutable(0)->mutable_type()->set_shape(1, 3);
  entries.Mutable(0)->set_segment_dim(2);
  Status bad = modelTensors(entries, &tensors);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("does not have"), std::string::npos);
  entries.Mutable(0)->set_segment_dim(0);
  *entries.Add() = entries[1]; // "b" twice
  EXPECT_FALSE(modelTensors(entries, &tensors));
}

std::vector<int64_t> ids(const HostTensor &t) {
  return {t.data<int64_t>(), t.data<int64_t>() + t.numElements()};
}

TEST(StoredNames, OnlyRelativeNamesInsideTheFolderPass) {
  for (const char *good : {"rank-0.safetensors", "weights/rank-1.safetensors",
                           "./model.onnx", "a..b", "..x/y"})
    EXPECT_TRUE(checkStoredName(good, "plan 'p'", "the file")) << good;
  for (const char *bad : {"", "/etc/passwd", "~/x", "..", "../x",
                          "weights/../../x", "a/..", "w/../../../etc/passwd"})
    EXPECT_FALSE(checkStoredName(bad, "plan 'p'", "the file")) << bad;
  Status s = checkStoredName("../x.safetensors", "plan 'p'", "the file");
  EXPECT_EQ(s.message(), "plan 'p' names the file '../x.safetensors', which "
                         "leads out of its folder");
}

TEST(StoredNames, LinksLeadingOutAreRefusedWhenResolved) {
  fs::path dir = scratch("links");
  fs::create_directories(dir / "bundle" / "weights");
  std::ofstream(dir / "outside.bin") << "secret";
  std::ofstream(dir / "bundle" / "weights" / "inside.bin") << "weights";
  fs::create_symlink(dir / "outside.bin", dir / "bundle" / "out.bin");
  fs::create_symlink("weights/inside.bin", dir / "bundle" / "in.bin");
  fs::create_directory_symlink(dir, dir / "bundle" / "up");
  std::string bundle = (dir / "bundle").string(), full;
  EXPECT_TRUE(resolveStoredName(bundle, "weights/inside.bin", "b", "f", &full));
  EXPECT_EQ(full, (dir / "bundle" / "weights" / "inside.bin").string());
  EXPECT_TRUE(resolveStoredName(bundle, "in.bin", "b", "f", &full));
  Status out = resolveStoredName(bundle, "out.bin", "b", "the file", &full);
  EXPECT_EQ(out.message(), "b names the file 'out.bin', which a symbolic "
                           "link leads out of its folder");
  EXPECT_FALSE(resolveStoredName(bundle, "up/outside.bin", "b", "f", &full));
  Status missing = resolveStoredName(bundle, "none.bin", "b", "f", &full);
  EXPECT_NE(missing.message().find("is missing its file"), std::string::npos);
}

TEST(Data, TextFeedsIdsAndNextByteLabels) {
  fs::path dir = scratch("text");
  std::string text;
  for (int i = 0; i < 41; ++i)
    text += static_cast<char>('a' + i % 26);
  std::ofstream(dir / "t.txt", std::ios::binary) << text;
  DataOptions o;
  o.textFile = (dir / "t.txt").string();
  std::unique_ptr<DataFeed> feed;
  std::vector<InputSlot> slots = {{"ids", DType::I64, {2, 4}},
                                  {"labels", DType::I64, {2, 4}}};
  ASSERT_TRUE(DataFeed::create(o, slots, &feed));
  EXPECT_EQ(feed->tokensPerStep(), 8);
  // 40 / 4 = 10 windows, 5 batches an epoch.
  std::map<std::string, HostTensor> batch;
  ASSERT_TRUE(feed->batch(1, &batch));
  EXPECT_EQ(ids(batch["ids"]),
            (std::vector<int64_t>{'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p'}));
  EXPECT_EQ(ids(batch["labels"]),
            (std::vector<int64_t>{'j', 'k', 'l', 'm', 'n', 'o', 'p', 'q'}));
  std::map<std::string, HostTensor> again;
  ASSERT_TRUE(feed->batch(6, &again)); // the next epoch, in order
  EXPECT_EQ(ids(again["ids"]), ids(batch["ids"]));

  // Shuffled: each epoch a permutation of the windows, the same for the same
  // seed, another for another epoch.
  o.shuffle = true;
  o.seed = 5;
  ASSERT_TRUE(DataFeed::create(o, slots, &feed));
  std::vector<int64_t> firsts;
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(feed->batch(step, &batch));
    firsts.push_back(batch["ids"].data<int64_t>()[0]);
    firsts.push_back(batch["ids"].data<int64_t>()[4]);
  }
  std::vector<int64_t> sorted = firsts;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> windows;
  for (int w = 0; w < 10; ++w)
    windows.push_back(text[w * 4]);
  std::sort(windows.begin(), windows.end());
  EXPECT_EQ(sorted, windows);
  EXPECT_NE(epochPermutation(10, 5, 0), epochPermutation(10, 5, 1));
  EXPECT_EQ(epochPermutation(10, 5, 1), epochPermutation(10, 5, 1));

  Status tooShort = DataFeed::create(o, {{"ids", DType::I64, {8, 8}}}, &feed);
  ASSERT_FALSE(tooShort);
  EXPECT_NE(tooShort.message().find("needs at least 65"), std::string::npos);
  Status notIds = DataFeed::create(o, {{"x", DType::F32, {2, 4}}}, &feed);
  ASSERT_FALSE(notIds);
  EXPECT_NE(notIds.message().find("byte-level"), std::string::npos);
}

TEST(Data, ArraysAreCutIntoBatchesOfRows) {
  fs::path dir = scratch("arrays");
  HostTensor x = iota({10, 3});
  ASSERT_TRUE(writeNpy((dir / "x.npy").string(), x));
  DataOptions o;
  o.inputsDir = dir.string();
  o.batchFromArrays = true;
  std::unique_ptr<DataFeed> feed;
  ASSERT_TRUE(DataFeed::create(o, {{"x", DType::F32, {4, 3}}}, &feed));
  std::map<std::string, HostTensor> batch;
  ASSERT_TRUE(feed->batch(1, &batch)); // rows 4-7
  EXPECT_EQ(batch["x"].data<float>()[0], 12.0f);
  ASSERT_TRUE(feed->batch(2, &batch)); // 2 batches an epoch: rows 0-3
  EXPECT_EQ(batch["x"].data<float>()[0], 0.0f);
  Status wrongRow = DataFeed::create(o, {{"x", DType::F32, {4, 2}}}, &feed);
  ASSERT_FALSE(wrongRow);
  EXPECT_NE(wrongRow.message().find("batches f32 [4, 2]"), std::string::npos);
  // Every input takes the same rows: batches of one size.
  ASSERT_TRUE(writeNpy((dir / "y.npy").string(), iota({10})));
  Status sizes = DataFeed::create(
      o, {{"x", DType::F32, {4, 3}}, {"y", DType::F32, {2}}}, &feed);
  ASSERT_FALSE(sizes);
  o.batchFromArrays = false;
  o.shuffle = true;
  ASSERT_FALSE(DataFeed::create(o, {{"x", DType::F32, {10, 3}}}, &feed));
}

} // namespace
} // namespace cleave::rt
