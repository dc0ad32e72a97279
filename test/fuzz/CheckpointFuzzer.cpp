//===- CheckpointFuzzer.cpp - libFuzzer: checkpoint index -> resume -------===//
//
// `--resume DIR` and `cleave export CHECKPOINT` with a checkpoint.pb of
// arbitrary bytes. The index is found and checked; with CLEAVE_FUZZ_ASSETS
// naming a folder that holds a small bundle (bundle/), its inputs
// (inputs/) and a checkpoint of it (checkpoint/step-N/), the checkpoint's
// real files are put beside the fuzzed index and a run resumed from it, so
// the index's tensor table, slices and digests reach the code that reads
// and reassembles the tensors.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"
#include "cleave/runtime/checkpoint.h"
#include "cleave/runtime/store.h"
#include "cleave/runtime/trainer.h"
#include "plan/plan.pb.h"

#include <filesystem>

namespace fs = std::filesystem;
namespace pb = cleave::plan;
namespace rt = cleave::rt;

namespace {
std::string assets, step;
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  cleave::fuzz::removeScratchAtExit();
  step = cleave::fuzz::scratchDir() + "/ckpt/step-00000001";
  std::error_code ec;
  fs::create_directories(step, ec);
  if (const char *a = std::getenv("CLEAVE_FUZZ_ASSETS")) {
    assets = a;
    // The files of the assets' newest checkpoint, without its index.
    std::string dir;
    pb::Checkpoint ckpt;
    if (!rt::findCheckpoint(assets + "/checkpoint", &dir, &ckpt)) {
      std::fprintf(stderr, "CLEAVE_FUZZ_ASSETS: no checkpoint in %s\n", a);
      std::abort();
    }
    fs::copy(dir, step, fs::copy_options::recursive, ec);
    fs::remove(fs::path(step) / rt::kCheckpointIndexFile, ec);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cleave::fuzz::writeFile(step + "/" + rt::kCheckpointIndexFile, data, size);
  std::string dir;
  pb::Checkpoint ckpt;
  if (!rt::findCheckpoint(cleave::fuzz::scratchDir() + "/ckpt", &dir, &ckpt))
    return 0;
  cleave::fuzz::checkStoredNamesStayInside(ckpt);
  std::vector<rt::ModelTensor> tensors;
  (void)rt::modelTensors(ckpt.tensors(), &tensors);
  if (assets.empty())
    return 0;
  rt::TrainerOptions options;
  options.bundleDir = assets + "/bundle";
  options.data.inputsDir = assets + "/inputs";
  options.resumeFrom = dir;
  options.steps = 1;
  (void)rt::train(options);
  return 0;
}
