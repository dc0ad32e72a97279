//===- TorchImporter.h - TorchScript modules through libtorch ---*- C++ -*-===//
//
// `cleave import|compile MODEL.pt`: the module is loaded with libtorch, its
// forward graph inlined, and every aten op lowered onto ONNX's operator set
// in memory (the decomposition torch.onnx uses), which the ONNX importer
// then turns into cleave IR. One importer thus owns shapes, constant
// folding, training state (BatchNorm statistics), dropout streams and
// losses for both front ends. Parameters keep their module names
// (blocks.0.attn.qkv.weight), inputs the forward's argument names.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_IMPORT_TORCHIMPORTER_H
#define CLEAVE_IMPORT_TORCHIMPORTER_H

#include "cleave/Import/OnnxImporter.h"

#include <map>
#include <memory>
#include <string>

namespace mlir::cleave {

/// Where libtorch reads the archive. A child process (the default) turns a
/// crash inside libtorch on a malformed archive into an error; in-process
/// is for the fuzzer, whose coverage counters live in its own memory.
enum class TorchIsolation { Subprocess, InProcess };

/// Loads the TorchScript module at \p path and translates its forward.
/// \p inputs fixes input shapes and types (needed where the module does not
/// record them: scripted modules). On failure returns null and sets \p error
/// to a message naming the op, its schema and its source line. An archive
/// whose records would inflate past \p maxArchiveBytes (0: 64 times its
/// size, at least 1 GiB) is refused before libtorch reads it.
std::unique_ptr<OnnxModel>
loadTorchScript(MLIRContext *context, const std::string &path,
                const std::map<std::string, InputSpec> &inputs,
                std::string &error,
                TorchIsolation isolation = TorchIsolation::Subprocess,
                uint64_t maxArchiveBytes = 0);

/// Whether torch::jit::load on \p path returns (a module or an exception)
/// rather than crashing; tried in a child process. The fuzzer skips inputs
/// that crash libtorch itself, which Subprocess isolation contains.
bool libtorchSurvivesLoading(const std::string &path);

} // namespace mlir::cleave

#endif // CLEAVE_IMPORT_TORCHIMPORTER_H
