//===- CleaveInterfaces.h - Interfaces of the cleave dialect ----*- C++ -*-===//

#ifndef CLEAVE_DIALECT_CLEAVEINTERFACES_H
#define CLEAVE_DIALECT_CLEAVEINTERFACES_H

#include "Cleave/ShardingRule.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"

#include "Cleave/CleaveInterfaces.h.inc"

#endif // CLEAVE_DIALECT_CLEAVEINTERFACES_H
