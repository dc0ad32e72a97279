//===- cleave-opt.cpp - Runs cleave passes on IR ----------------*- C++ -*-===//

#include "Cleave/CleaveDialect.h"
#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Autodiff/Passes.h"
#include "cleave/Lowering/Passes.h"
#include "cleave/Pipelines/Pipelines.h"
#include "cleave/Sharding/Passes.h"
#include "cleave/Sharding/Sharding.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::cleave::registerAutodiffPasses();
  mlir::cleave::registerLoweringPasses();
  mlir::cleave::registerShardingPasses();
  mlir::cleave::registerPipelines();

  mlir::DialectRegistry registry;
  registry.insert<mlir::cleave::CleaveDialect, mlir::func::FuncDialect>();
  mlir::cleave::registerDifferentiationRules(registry);
  mlir::cleave::registerShardingRules(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Cleave optimizer driver\n", registry));
}
