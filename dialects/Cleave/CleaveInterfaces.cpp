//===- CleaveInterfaces.cpp - Interfaces of the cleave dialect ------------===//

#include "Cleave/CleaveInterfaces.h"

#include "Cleave/CleaveInterfaces.cpp.inc"
