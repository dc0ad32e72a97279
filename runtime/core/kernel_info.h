//===- kernel_info.h - What a backend's kernel sees of an -------*- C++ -*-===//
//
// Backend-neutral: an instruction as the schema's validator
// (kernel_schema.cpp) leaves it, with its types, decoded attributes and
// mesh, and the geometry readers both backends share, so that the CPU and
// CUDA kernels of one instruction agree on what it means.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_KERNEL_INFO_H
#define CLEAVE_RUNTIME_CORE_KERNEL_INFO_H

#include "cleave/runtime/executor.h"
#include "plan/kernel_schema.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cleave::rt {

class Communicator;

/// Static type of a value.
struct TensorType {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  int64_t numElements() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  std::string str() const;
};

struct Attr {
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

/// What prepare functions see of an instruction.
struct KernelInfo {
  std::string kernel;
  /// Set by validateInstruction, with decoded; absent (and decoded
  /// monostate) for the runtime's own fused_elementwise.
  std::optional<schema::Kernel> kernelId;
  schema::AnyParams decoded;
  /// Absent optional operands (id -1) are std::nullopt.
  std::vector<std::optional<TensorType>> operands;
  std::vector<std::optional<TensorType>> results;
  /// The mesh this program runs on, for collectives (and their shape
  /// rules); set by the loader, never null there, and outlives the kernels.
  Communicator *comm = nullptr;

  /// The type of a present operand/result. Counts and presence are
  /// kernels.def's, checked by validateInstruction before any prepare
  /// function runs: a kernel never restates them.
  const TensorType &operand(size_t i) const { return *operands[i]; }
  const TensorType &result(size_t i) const { return *results[i]; }
  bool hasOperand(size_t i) const {
    return i < operands.size() && operands[i].has_value();
  }
  bool hasResult(size_t i) const {
    return i < results.size() && results[i].has_value();
  }

  /// The decoded attributes of kernel \p K (the instruction's own).
  template <schema::Kernel K> const schema::Params<K> &params() const {
    return std::get<schema::Params<K>>(decoded);
  }
};

/// The mesh axes of a collective instruction (all_reduce, all_gather,
/// reduce_scatter, all_to_all, shard_slice); empty for any other.
std::vector<int64_t> collectiveAxes(const KernelInfo &info);

/// Pointer slots always present in KernelArgs.
constexpr size_t kMinArgSlots = 8;

/// Buffers for one execution of an instruction, in operand/result order.
/// Absent operands and results are null, including those the instruction
/// leaves out (at least kMinArgSlots slots exist).
struct KernelArgs {
  const void *const *operands;
  void *const *results;
};

/// A host kernel bound to its instruction (the CPU backend's).
using KernelFn = std::function<Status(const KernelArgs &)>;

/// iota's layout, checked, for both backends: result element i holds
/// i / inner % extent.
struct IotaGeometry {
  int64_t inner = 1, extent = 0, count = 0;
  bool wide = true; // i64, else i32
};
Status readIotaGeometry(const KernelInfo &info, IotaGeometry *out);

/// Rows an index of gather or scatter_add may name: global rows
/// [0, global), of which this rank holds [offset, offset + extent) (all of
/// them unless attr shard_axes splits the table over mesh axes; chunks are
/// padded to a common extent, the real rows ending at shard_size).
struct ShardRows {
  int64_t offset = 0, extent = 0, global = 0;
};

/// Reads them, for a table of \p extent rows on this rank, from the
/// instruction's shard_axes and shard_size against its mesh; both backends
/// map indices through it.
Status readShardRows(const KernelInfo &info,
                     const std::optional<std::vector<int64_t>> &shardAxes,
                     std::optional<int64_t> shardSize, int64_t extent,
                     ShardRows *rows);
/// \p P: gather's or scatter_add's Params.
template <typename P>
Status readShardRows(const KernelInfo &info, const P &attrs, int64_t extent,
                     ShardRows *rows) {
  return readShardRows(info, attrs.shard_axes, attrs.shard_size, extent, rows);
}

/// check_index's error for element \p flat (row-major in \p shape) of
/// value \p value: "value 1000 at [1, 5] is out of range [0, 8)".
std::string indexRangeError(const std::vector<int64_t> &shape, int64_t flat,
                            int64_t value, int64_t bound,
                            std::optional<int64_t> ignore);
/// Checks \p info (kernel name, operand and result types) and \p attrs
/// against kernels.def, decodes the attributes into info.decoded and runs
/// the kernel's shape rule (core/shape_rules.h). The one validator of the
/// schema, run for every backend: a prepare function binds what passed.
Status validateInstruction(const std::map<std::string, Attr> &attrs,
                           KernelInfo &info);
/// Decodes \p attrs into \p kernel's Params (validateInstruction's second
/// half): every attribute the schema's, of its type and count.
Status decodeParams(schema::Kernel kernel,
                    const std::map<std::string, Attr> &attrs,
                    schema::AnyParams *params);
/// The schema's rules for \p kernel.
const schema::KernelSignature &signatureOf(schema::Kernel kernel);

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

/// Element count of \p t, computed without overflow when a dim is 0 (other
/// dims of an empty value are not bounded by the loader).
int64_t safeNumElements(const TensorType &t);

/// Row-major strides (in elements) of \p shape.
std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape);

/// Product of shape[begin, end).
int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end);

/// Checks that \p operand broadcasts to \p result ("same rank, each dim equal
/// or 1"); \p what names the operand in the error.
Status checkBroadcastable(const TensorType &operand, const TensorType &result,
                          const std::string &what);

/// Strides of \p operand broadcast to \p resultShape: 0 along dims of size 1
/// that the result does not share.
std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &operand,
                                      const std::vector<int64_t> &resultShape);

/// Element offsets, per batch index of \p resultBatch (row-major), of the
/// matrices of a matmul operand whose batch dims are \p batch (broadcast to
/// \p resultBatch); \p matrixSize elements per matrix.
std::vector<int64_t> batchOffsets(const std::vector<int64_t> &batch,
                                  const std::vector<int64_t> &resultBatch,
                                  int64_t matrixSize);

/// Whether batchOffsets' \p offsets are equally spaced from 0 (one strided
/// batched call can run them), and the spacing in \p stride (0: shared).
bool equallySpaced(const std::vector<int64_t> &offsets, int64_t *stride);

/// matmul_dequant as one matrix product, for both backends: a [m, k] (the
/// lhs's leading dims as rows) times the [rows, cols] weight dequantized,
/// read as [k, n] (or [n, k] with transposeB); scales per row and group of
/// cols / groups columns (groups 1: per row), when scaled.
struct DequantProduct {
  bool transposeB = false, scaled = false;
  int64_t groups = 1, rows = 0, cols = 0, m = 0, n = 0, k = 0;
};
/// \p info's product; an error where a dim exceeds BLAS's int range.
Status readDequantProduct(const KernelInfo &info, DequantProduct *out);

/// Where random_uniform's result lies in its global tensor, which fixes its
/// values (philox.h): `rows` runs of `run` contiguous global elements, run r
/// starting at base + sum_d index_d(r) * rowStrides[d], index(r) being r's
/// multi-index over rowDims. rows * run == 0 for an empty result.
struct RandomGeometry {
  uint32_t key[2] = {0, 0};
  uint32_t stream = 0;
  int64_t rows = 0, run = 0, base = 0;
  std::vector<int64_t> rowDims, rowStrides;
};

/// Checks a random_uniform instruction (an i64 scalar step, an f32 result,
/// 'offsets' inside 'global_shape') and reads its geometry; both backends
/// use it, so they draw the same elements.
Status readRandomGeometry(const KernelInfo &info, RandomGeometry *out);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_KERNEL_INFO_H
