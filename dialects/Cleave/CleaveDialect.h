//===- CleaveDialect.h - The cleave dialect ---------------------*- C++ -*-===//

#ifndef CLEAVE_DIALECT_CLEAVEDIALECT_H
#define CLEAVE_DIALECT_CLEAVEDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "Cleave/CleaveDialect.h.inc"
#include "Cleave/CleaveEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "Cleave/CleaveAttrs.h.inc"

#endif // CLEAVE_DIALECT_CLEAVEDIALECT_H
