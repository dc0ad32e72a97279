//===- ImportSupport.h - What the two importer harnesses share --*- C++ -*-===//
//
// A fresh context per input (interned attributes would otherwise pile up
// over millions of inputs), the importer's diagnostics swallowed (an error
// is a normal outcome), and the rule that makes a finding of a silent bug:
// a model the importer accepts must give IR the verifier accepts.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_TEST_FUZZ_IMPORTSUPPORT_H
#define CLEAVE_TEST_FUZZ_IMPORTSUPPORT_H

#include "Cleave/CleaveDialect.h"
#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Evaluate/ConstantEvaluator.h"
#include "cleave/Import/OnnxImporter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <memory>

namespace cleave::fuzz {

/// A context with the dialects the importer makes, single-threaded.
inline std::unique_ptr<mlir::MLIRContext> makeImportContext() {
  mlir::DialectRegistry registry;
  registry.insert<mlir::cleave::CleaveDialect, mlir::func::FuncDialect>();
  mlir::cleave::registerDifferentiationRules(registry);
  auto context = std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
  context->loadDialect<mlir::cleave::CleaveDialect, mlir::func::FuncDialect>();
  return context;
}

/// Imports \p model; aborts (a finding) if the result does not verify.
inline void importAndVerify(mlir::MLIRContext &context,
                            const mlir::cleave::OnnxModel &model) {
  mlir::cleave::OnnxImportOptions options;
  options.foldConstants = mlir::cleave::foldConstantOps;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::cleave::importOnnx(&context, model, options);
  if (module && mlir::failed(mlir::verify(*module))) {
    llvm::errs() << "imported module fails verification:\n";
    module->print(llvm::errs());
    std::abort();
  }
}

/// Swallows diagnostics while it lives.
struct QuietDiagnostics : mlir::ScopedDiagnosticHandler {
  explicit QuietDiagnostics(mlir::MLIRContext &context)
      : mlir::ScopedDiagnosticHandler(
            &context, [](mlir::Diagnostic &) { return mlir::success(); }) {}
};

} // namespace cleave::fuzz

#endif // CLEAVE_TEST_FUZZ_IMPORTSUPPORT_H
