//===- CleaveDialect.cpp - The cleave dialect -------------------*- C++ -*-===//

#include "Cleave/CleaveDialect.h"
#include "Cleave/CleaveOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::cleave;

#include "Cleave/CleaveDialect.cpp.inc"
#include "Cleave/CleaveEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "Cleave/CleaveAttrs.cpp.inc"

void CleaveDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Cleave/CleaveOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "Cleave/CleaveAttrs.cpp.inc"
      >();
}

Operation *CleaveDialect::materializeConstant(OpBuilder &builder,
                                              Attribute value, Type type,
                                              Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
