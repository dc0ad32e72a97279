//===- Tensors.h - ONNX tensors: locating and decoding ----------*- C++ -*-===//
//
// The importer's and OnnxModel's readers of a TensorProto's bytes
// (Tensors.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_IMPORT_ONNX_TENSORS_H
#define CLEAVE_IMPORT_ONNX_TENSORS_H

#include "cleave/Import/OnnxImporter.h"
#include "onnx/onnx_pb.h"

#include <string>

namespace mlir::cleave::onnx_import {

/// ONNX's name of element type \p dataType, for messages.
std::string onnxTypeName(int32_t dataType);

/// Where a tensor's bytes are, every size checked: its element type and
/// shape (no bytes yet), how many bytes it needs and, for external data,
/// the file and the offset in it.
struct TensorSource {
  TensorData header;
  int64_t count = 0, bytes = 0;
  std::string file;
  int64_t offset = 0;
};

/// The folder a model file's external data is relative to.
std::string modelFolder(llvm::StringRef modelPath);

/// Checks \p t's shape, sizes and data location without reading external
/// data: the bytes are there and of the size the shape needs.
LogicalResult locateTensor(MLIRContext *context, const onnx::TensorProto &t,
                           const std::string &baseDir, TensorSource &src,
                           std::string &error);

/// Decodes \p t (inline, raw or external) into TensorData.
FailureOr<TensorData> decodeTensor(MLIRContext *context,
                                   const onnx::TensorProto &t,
                                   const std::string &baseDir,
                                   std::string &error);

} // namespace mlir::cleave::onnx_import

#endif // CLEAVE_IMPORT_ONNX_TENSORS_H
