//===- OnnxImportFuzzer.cpp - libFuzzer: ONNX bytes -> cleave IR ----------===//
//
// `cleave import MODEL.onnx` on arbitrary bytes: the model is loaded from a
// file (external data resolved against its folder, which holds nothing
// else), imported, and the result verified (ImportSupport.h). Any crash,
// sanitizer report, unbounded allocation or unverifiable module is a
// finding; errors are expected.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"
#include "ImportSupport.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = [] {
    ::cleave::fuzz::removeScratchAtExit();
    return ::cleave::fuzz::scratchDir() + "/model.onnx";
  }();
  ::cleave::fuzz::writeFile(path, data, size);
  std::string error;
  std::unique_ptr<mlir::cleave::OnnxModel> model =
      mlir::cleave::OnnxModel::load(path, error);
  if (!model)
    return 0;
  std::unique_ptr<mlir::MLIRContext> context =
      ::cleave::fuzz::makeImportContext();
  ::cleave::fuzz::QuietDiagnostics quiet(*context);
  ::cleave::fuzz::importAndVerify(*context, *model);
  return 0;
}
