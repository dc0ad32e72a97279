//===- DataFeedFuzzer.cpp - libFuzzer: data files -> batches --------------===//
//
// What feeds a train step: a --text file, --batch-from-arrays arrays, or a
// folder of per-step arrays. The first bytes choose the feed, the input
// shapes, shuffling and the seed; the rest is the file (split in two for
// the two arrays of an array feed). Batches are drawn for early steps and
// for steps far into the run (epoch arithmetic), and every batch must have
// the shapes the feed was created for.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"
#include "cleave/runtime/data.h"

#include <filesystem>

namespace fs = std::filesystem;
namespace rt = cleave::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string dir = [] {
    cleave::fuzz::removeScratchAtExit();
    return cleave::fuzz::scratchDir();
  }();
  if (size < 6)
    return 0;
  uint8_t mode = data[0] % 3, flags = data[1];
  int64_t rows = 1 + data[2] % 8, width = 1 + data[3] % 16;
  size_t split = 6 + ((size_t(data[4]) << 8 | data[5]) % (size - 5));
  const uint8_t *body = data + 6;
  size_t bodySize = size - 6, first = split - 6;

  rt::DataOptions options;
  options.shuffle = flags & 1;
  options.seed = flags >> 1;
  rt::DType ids = flags & 2 ? rt::DType::I32 : rt::DType::I64;
  std::vector<rt::InputSlot> slots;
  std::error_code ec;
  if (mode == 0) {
    options.textFile = dir + "/text.txt";
    cleave::fuzz::writeFile(options.textFile, body, bodySize);
    slots = {{"ids", ids, {rows, width}}, {"labels", ids, {rows, width}}};
  } else {
    options.inputsDir = dir + "/inputs";
    fs::remove_all(options.inputsDir, ec);
    fs::create_directories(options.inputsDir, ec);
    options.batchFromArrays = mode == 1;
    if (mode == 2)
      options.shuffle = false;
    cleave::fuzz::writeFile(options.inputsDir + "/x.npy", body, first);
    cleave::fuzz::writeFile(options.inputsDir + "/y.npy", body + first,
                            bodySize - first);
    slots = {{"x", rt::DType::F32, {rows, width}}, {"y", ids, {rows}}};
  }
  std::unique_ptr<rt::DataFeed> feed;
  if (!rt::DataFeed::create(options, slots, &feed))
    return 0;
  for (int64_t step : {int64_t(0), int64_t(1), int64_t(7), int64_t(1) << 40}) {
    std::map<std::string, rt::HostTensor> batch;
    if (!feed->batch(step, &batch))
      continue;
    for (const rt::InputSlot &slot : slots) {
      auto it = batch.find(slot.name);
      if (it == batch.end() || it->second.shape != slot.shape ||
          it->second.dtype != slot.dtype)
        std::abort();
    }
  }
  return 0;
}
