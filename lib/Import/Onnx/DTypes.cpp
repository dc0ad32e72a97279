//===- DTypes.cpp - ONNX element types and the types they compute in -----===//
//
// Storage dtypes (float64, float16, bfloat16, int8, int16, uint8, uint16,
// uint32) keep their type at the program's edges and compute widened
// inside it (docs/design.md, "Dtypes"): the mapping from ONNX's data types
// and the widening of constants.
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

Type onnx_import::elementTypeFromOnnx(MLIRContext *context, int32_t dataType) {
  Builder b(context);
  switch (dataType) {
  case onnx::TensorProto::FLOAT:
    return b.getF32Type();
  case onnx::TensorProto::INT64:
    return b.getI64Type();
  case onnx::TensorProto::INT32:
    return b.getI32Type();
  case onnx::TensorProto::BOOL:
    return b.getI1Type();
  case onnx::TensorProto::DOUBLE:
    return b.getF64Type();
  case onnx::TensorProto::FLOAT16:
    return b.getF16Type();
  case onnx::TensorProto::BFLOAT16:
    return b.getBF16Type();
  case onnx::TensorProto::INT8:
    return b.getI8Type();
  case onnx::TensorProto::INT16:
    return b.getI16Type();
  case onnx::TensorProto::UINT8:
    return b.getIntegerType(8, /*isSigned=*/false);
  case onnx::TensorProto::UINT16:
    return b.getIntegerType(16, /*isSigned=*/false);
  case onnx::TensorProto::UINT32:
    return b.getIntegerType(32, /*isSigned=*/false);
  default:
    return {};
  }
}

Type onnx_import::computeTypeOf(Type storage) {
  Builder b(storage.getContext());
  if (storage.isF64() || storage.isF16() || storage.isBF16())
    return b.getF32Type();
  if (storage.isInteger(8) || storage.isInteger(16))
    return b.getI32Type();
  if (storage.isUnsignedInteger(32))
    return b.getI64Type();
  return storage;
}

Type onnx_import::computeTypeFromOnnx(MLIRContext *context, int32_t dataType) {
  Type t = elementTypeFromOnnx(context, dataType);
  return t ? computeTypeOf(t) : t;
}

DenseElementsAttr onnx_import::toComputeType(DenseElementsAttr attr,
                                             bool *overflow) {
  Type from = attr.getElementType(), to = computeTypeOf(from);
  if (overflow)
    *overflow = false;
  if (from == to)
    return attr;
  if (isa<FloatType>(from))
    return cast<DenseFPElementsAttr>(attr).mapValues(to, [&](const APFloat &v) {
      APFloat c = v;
      bool lost;
      c.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven, &lost);
      // Too large, or (float64 only: float16's tiny values are float32
      // normals) too small to stay a float32 normal: 1e-300 would become 0
      // and a Log of it -inf, silently.
      if (overflow &&
          ((c.isInfinity() && !v.isInfinity()) ||
           (from.isF64() && !v.isZero() && (c.isZero() || c.isDenormal()))))
        *overflow = true;
      return c.bitcastToAPInt();
    });
  unsigned width = to.getIntOrFloatBitWidth();
  bool isUnsigned = from.isUnsignedInteger();
  return cast<DenseIntElementsAttr>(attr).mapValues(to, [&](const APInt &v) {
    return isUnsigned ? v.zext(width) : v.sext(width);
  });
}
