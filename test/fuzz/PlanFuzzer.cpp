//===- PlanFuzzer.cpp - libFuzzer: plan.pb bytes -> a train step ----------===//
//
// `cleave run BUNDLE` on a bundle whose plan.pb is arbitrary bytes: the plan
// is loaded and validated, the program bound to the CPU kernels and, when
// the validator accepts it, one train step run (random weights, zero
// inputs written to match the plan's own input declarations). Whatever the
// validator accepts must run without a sanitizer report: a kernel that
// reads outside its buffers because an attribute or a shape was not checked
// is the finding this harness exists for.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/npy.h"
#include "cleave/runtime/trainer.h"
#include "plan/plan.pb.h"

#include <filesystem>

namespace pb = cleave::plan;
namespace rt = cleave::rt;

namespace {

/// Zero-filled .npy files for the plan's data inputs, as declared; false
/// where a declaration is unusable or too large to be worth running (the
/// validator then has the plan to itself).
bool writeInputs(const pb::Plan &plan, const std::string &dir) {
  if (plan.programs_size() != 1)
    return true;
  const pb::Program &p = plan.programs(0);
  if (p.arena_bytes() < 0 ||
      static_cast<uint64_t>(p.arena_bytes()) > cleave::fuzz::kMaxBytes)
    return false;
  for (int i = 0; i < p.input_bindings_size() && i < p.inputs_size(); ++i) {
    if (p.input_bindings(i).role() != pb::Binding::INPUT)
      continue;
    int id = p.inputs(i);
    if (id < 0 || id >= p.values_size())
      return true;
    const pb::TensorType &type = p.values(id).type();
    uint64_t elements = 1;
    std::vector<int64_t> shape;
    for (int64_t d : type.shape()) {
      if (d < 0 || d > int64_t(cleave::fuzz::kMaxBytes) ||
          (elements *= uint64_t(d)) > cleave::fuzz::kMaxBytes / 8)
        return false;
      shape.push_back(d);
    }
    rt::DType dtype = type.dtype() == pb::I64    ? rt::DType::I64
                      : type.dtype() == pb::I32  ? rt::DType::I32
                      : type.dtype() == pb::BOOL ? rt::DType::Bool
                                                 : rt::DType::F32;
    std::string name = p.input_bindings(i).name();
    (void)rt::writeNpy(dir + "/" + rt::sanitizeFileName(name) + ".npy",
                       rt::HostTensor::zeros(dtype, shape));
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // One thread: a finding must reproduce from its input alone.
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  cleave::fuzz::removeScratchAtExit();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  namespace fs = std::filesystem;
  const std::string bundle = cleave::fuzz::scratchDir() + "/bundle";
  const std::string inputs = cleave::fuzz::scratchDir() + "/inputs";
  std::error_code ec;
  fs::remove_all(inputs, ec);
  fs::create_directories(bundle, ec);
  fs::create_directories(inputs, ec);
  cleave::fuzz::writeFile(bundle + "/" + rt::kBundlePlanFile, data, size);

  pb::Plan plan;
  if (!plan.ParseFromArray(data, static_cast<int>(size)) ||
      !writeInputs(plan, inputs)) {
    // Still the loader's: a plan it must refuse, or one too large to run.
    (void)rt::loadBundlePlan(bundle, &plan);
    return 0;
  }
  pb::Plan loaded;
  if (rt::loadBundlePlan(bundle, &loaded))
    cleave::fuzz::checkStoredNamesStayInside(loaded);
  rt::TrainerOptions options;
  options.bundleDir = bundle;
  options.steps = 1;
  options.randomWeights = true;
  options.data.inputsDir = inputs;
  (void)rt::train(options);
  return 0;
}
