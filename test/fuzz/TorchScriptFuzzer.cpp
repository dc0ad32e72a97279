//===- TorchScriptFuzzer.cpp - libFuzzer: .pt bytes -> cleave IR ----------===//
//
// `cleave import MODEL.pt` on arbitrary bytes: libtorch reads the archive
// (inside the translator plugin, which turns libtorch's exceptions into
// errors), the forward is translated to ONNX in memory and imported. As for
// ONNX, accepted input must verify. The translation runs in process, for
// coverage; an input on which libtorch's own reader crashes is skipped (a
// child process tries it first): cleave reads archives in a child process,
// so such a crash reaches the user as an error (test/robustness catalogue).
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"
#include "ImportSupport.h"
#include "cleave/Import/TorchImporter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = [] {
    ::cleave::fuzz::removeScratchAtExit();
    return ::cleave::fuzz::scratchDir() + "/model.pt";
  }();
  ::cleave::fuzz::writeFile(path, data, size);
  if (!mlir::cleave::libtorchSurvivesLoading(path))
    return 0;
  std::unique_ptr<mlir::MLIRContext> context =
      ::cleave::fuzz::makeImportContext();
  ::cleave::fuzz::QuietDiagnostics quiet(*context);
  std::string error;
  std::unique_ptr<mlir::cleave::OnnxModel> model =
      mlir::cleave::loadTorchScript(context.get(), path, {}, error,
                                    mlir::cleave::TorchIsolation::InProcess);
  if (model)
    ::cleave::fuzz::importAndVerify(*context, *model);
  return 0;
}
