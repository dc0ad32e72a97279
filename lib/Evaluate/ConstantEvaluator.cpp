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

/// Element types and runtime dtypes, in both directions.
static std::optional<rt::DType> dtypeOfElement(Type e) {
  if (e.isF32())
    return rt::DType::F32;
  if (e.isSignlessInteger(64))
    return rt::DType::I64;
  if (e.isSignlessInteger(32))
    return rt::DType::I32;
  if (e.isSignlessInteger(1))
    return rt::DType::Bool;
  if (e.isF64())
    return rt::DType::F64;
  if (e.isF16())
    return rt::DType::F16;
  if (e.isBF16())
    return rt::DType::BF16;
  if (e.isSignlessInteger(8))
    return rt::DType::I8;
  if (e.isSignlessInteger(16))
    return rt::DType::I16;
  if (e.isUnsignedInteger(8))
    return rt::DType::U8;
  if (e.isUnsignedInteger(16))
    return rt::DType::U16;
  if (e.isUnsignedInteger(32))
    return rt::DType::U32;
  return std::nullopt;
}

static bool supportedType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.hasStaticShape() &&
         dtypeOfElement(tensor.getElementType());
}

rt::DType mlir::cleave::runtimeDType(Type element) {
  return dtypeOfElement(element).value_or(rt::DType::F32);
}

Type mlir::cleave::elementTypeOf(MLIRContext *context, rt::DType dtype) {
  Builder b(context);
  switch (dtype) {
  case rt::DType::F32:
    return b.getF32Type();
  case rt::DType::I64:
    return b.getI64Type();
  case rt::DType::I32:
    return b.getI32Type();
  case rt::DType::Bool:
    return b.getI1Type();
  case rt::DType::F64:
    return b.getF64Type();
  case rt::DType::F16:
    return b.getF16Type();
  case rt::DType::BF16:
    return b.getBF16Type();
  case rt::DType::I8:
    return b.getI8Type();
  case rt::DType::I16:
    return b.getI16Type();
  case rt::DType::U8:
    return b.getIntegerType(8, /*isSigned=*/false);
  case rt::DType::U16:
    return b.getIntegerType(16, /*isSigned=*/false);
  case rt::DType::U32:
    return b.getIntegerType(32, /*isSigned=*/false);
  }
  return b.getF32Type();
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
  int64_t operandElements = 0;
  for (Value v : op->getOperands()) {
    DenseElementsAttr attr;
    if (!matchPattern(v, m_Constant(&attr)) || !supportedType(v.getType()))
      return failure();
    operands.push_back(attr);
    operandElements += attr.getNumElements();
  }
  if (operandElements > maxElements * kOperandFactor)
    return failure();
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
