//===- ConstantEvaluator.cpp - Folds ops with the runtime's kernels -------===//
//
// Shape arithmetic of exported models (Shape -> Gather -> Div -> Concat ->
// Reshape, window lengths, ...) must fold at import time. Instead of a second
// implementation of every op in folders, the op is run once through the same
// lowering and kernels that execute the program.
//
//===----------------------------------------------------------------------===//

#include "cleave/Evaluate/ConstantEvaluator.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Lowering/Passes.h"
#include "cleave/runtime/executor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/PassManager.h"
#include "plan/plan.pb.h"

using namespace mlir;
using namespace mlir::cleave;
namespace rt = ::cleave::rt;

static bool supportedType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return false;
  Type e = tensor.getElementType();
  return e.isF32() || e.isSignlessInteger(64) || e.isSignlessInteger(32) ||
         e.isSignlessInteger(1);
}

rt::DType mlir::cleave::runtimeDType(Type element) {
  if (element.isSignlessInteger(64))
    return rt::DType::I64;
  if (element.isSignlessInteger(32))
    return rt::DType::I32;
  if (element.isSignlessInteger(1))
    return rt::DType::Bool;
  return rt::DType::F32;
}

DenseElementsAttr mlir::cleave::hostTensorToAttr(RankedTensorType type,
                                                 const rt::HostTensor &t) {
  if (type.getElementType().isInteger(1)) {
    SmallVector<bool> v;
    for (uint8_t c : t.bytes)
      v.push_back(c != 0);
    return DenseElementsAttr::get(type, v);
  }
  return DenseElementsAttr::getFromRawBuffer(
      type, ArrayRef<char>(reinterpret_cast<const char *>(t.bytes.data()),
                           t.bytes.size()));
}

FailureOr<SmallVector<DenseElementsAttr>>
mlir::cleave::evaluateWithRuntime(Operation *op, int64_t maxElements) {
  if (op->getDialect() == nullptr || !isa<CleaveDialect>(op->getDialect()) ||
      op->hasTrait<OpTrait::ConstantLike>() || op->getNumRegions() != 0)
    return failure();
  SmallVector<DenseElementsAttr> operands;
  for (Value v : op->getOperands()) {
    DenseElementsAttr attr;
    if (!matchPattern(v, m_Constant(&attr)) || !supportedType(v.getType()))
      return failure();
    operands.push_back(attr);
  }
  int64_t elements = 0;
  for (Type t : op->getResultTypes()) {
    if (!supportedType(t))
      return failure();
    elements += cast<RankedTensorType>(t).getNumElements();
  }
  if (elements > maxElements)
    return failure();

  // A scratch function: constants, the op, a return.
  MLIRContext *ctx = op->getContext();
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(op->getLoc());
  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, op->getLoc(), "fold",
                                   b.getFunctionType({}, op->getResultTypes()));
  b.setInsertionPointToEnd(func.addEntryBlock());
  IRMapping mapping;
  for (auto [v, attr] : llvm::zip(op->getOperands(), operands))
    mapping.map(v, ConstantOp::create(b, op->getLoc(), attr).getResult());
  Operation *clone = b.clone(*op, mapping);
  func::ReturnOp::create(b, op->getLoc(), clone->getResults());

  PassManager pm(ctx);
  pm.addNestedPass<func::FuncOp>(createPlanBuffersPass());
  // Diagnostics of the scratch function are not the user's concern: a
  // failure here only means "do not fold".
  ScopedDiagnosticHandler silence(ctx, [](Diagnostic &) { return success(); });
  ::cleave::plan::Program program;
  if (failed(pm.run(*module)) || failed(emitPlan(func, program)))
    return failure();
  std::unique_ptr<rt::Executor> executor;
  if (!rt::Executor::create(program, &executor))
    return failure();
  std::vector<rt::HostTensor> outputs;
  if (!executor->run({}, &outputs))
    return failure();
  SmallVector<DenseElementsAttr> results;
  for (auto [type, t] : llvm::zip(op->getResultTypes(), outputs))
    results.push_back(hostTensorToAttr(cast<RankedTensorType>(type), t));
  return results;
}

void mlir::cleave::foldConstantOps(Block::iterator begin, Block::iterator end,
                                   DenseMap<Value, Value> &replaced,
                                   int64_t maxElements) {
  for (Block::iterator it = begin; it != end;) {
    Operation *op = &*it++;
    FailureOr<SmallVector<DenseElementsAttr>> values =
        evaluateWithRuntime(op, maxElements);
    if (failed(values))
      continue;
    OpBuilder b(op);
    for (auto [result, attr] : llvm::zip(op->getResults(), *values)) {
      Value constant = ConstantOp::create(b, op->getLoc(), attr);
      result.replaceAllUsesWith(constant);
      replaced[result] = constant;
    }
    op->erase();
  }
}
