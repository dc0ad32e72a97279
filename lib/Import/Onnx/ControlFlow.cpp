//===- ControlFlow.cpp - ONNX If and Loop, folded at import -----*- C++ -*-===//
//
// The dialect has no control flow: a training step is one straight-line
// program whose every shape is static, which the sharding search and the
// plan need. So If and Loop are resolved here: an If whose condition folds
// (a constant, a shape test, an input --forward specialises) is the chosen
// branch imported in its place; a Loop whose trip count and condition fold
// is unrolled, its body imported once per iteration with that iteration's
// number and carried values, its scan outputs stacked. Anything that
// decides at run time stays one error naming the op and why.
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

/// Unrolling past this many iterations is refused: the program would grow
/// with the trip count.
constexpr int64_t kMaxUnrolledIterations = 1024;

/// The truth of a one-element constant, or nullopt for another size.
std::optional<bool> truthOf(DenseElementsAttr attr) {
  if (attr.getNumElements() != 1)
    return std::nullopt;
  if (isa<FloatType>(attr.getElementType()))
    return !(*attr.getValues<APFloat>().begin()).isZero();
  return !(*attr.getValues<APInt>().begin()).isZero();
}

/// The truth of \p v when it is a one-element constant.
std::optional<bool> constantTruth(Value v) {
  DenseElementsAttr attr;
  if (!v || !matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  return truthOf(attr);
}

/// The truth of condition input \p i when it folds (a constant, or an
/// input --forward gives).
std::optional<bool> inputTruth(NodeContext &ctx, unsigned i) {
  std::optional<DenseElementsAttr> k = ctx.constantInput(i);
  return k ? truthOf(*k) : std::nullopt;
}

LogicalResult ifOp(NodeContext &ctx) {
  std::optional<bool> cond = inputTruth(ctx, 0);
  if (!cond)
    return ctx.error() << "its condition depends on the data, so the branch "
                          "is not known when compiling (an If whose "
                          "condition folds at compile time is supported)";
  const char *name = *cond ? "then_branch" : "else_branch";
  const onnx::GraphProto *branch = ctx.graphAttr(name);
  if (!branch)
    return ctx.error() << "has no graph attribute '" << name << "'";
  FailureOr<SmallVector<OnnxValue>> outs = ctx.importSubgraph(*branch, {});
  if (failed(outs))
    return failure();
  if (outs->size() != ctx.numOutputs())
    return ctx.error() << "its " << name << " has " << outs->size()
                       << " outputs, the node " << ctx.numOutputs();
  for (auto [i, v] : llvm::enumerate(*outs))
    ctx.setAnyOutput(i, v);
  return success();
}

/// \p parts, each given a leading dim of 1, joined along it.
FailureOr<Value> stack(NodeContext &ctx, ArrayRef<Value> parts) {
  SmallVector<Value> rows;
  auto shape = NodeContext::typeOf(parts[0]).getShape();
  for (Value p : parts) {
    if (NodeContext::typeOf(p) != NodeContext::typeOf(parts[0]))
      return ctx.error() << "a scan output changes type across iterations, "
                         << parts[0].getType() << " then " << p.getType();
    SmallVector<int64_t> row = {1};
    llvm::append_range(row, shape);
    rows.push_back(ctx.reshape(p, row));
  }
  return rows.size() == 1 ? rows[0] : ctx.concat(rows, 0);
}

LogicalResult loop(NodeContext &ctx) {
  const onnx::GraphProto *body = ctx.graphAttr("body");
  if (!body)
    return ctx.error() << "has no graph attribute 'body'";
  int64_t trips = std::numeric_limits<int64_t>::max();
  if (ctx.hasInput(0)) {
    FailureOr<SmallVector<int64_t>> m = ctx.constantInts(0, "M");
    if (failed(m))
      return failure();
    if (m->size() != 1)
      return ctx.error() << "its trip count M must hold one value";
    trips = (*m)[0];
  }
  bool cond = true;
  if (ctx.hasInput(1)) {
    std::optional<bool> truth = inputTruth(ctx, 1);
    if (!truth)
      return ctx.error() << "its condition depends on the data, so the "
                            "number of iterations is not known when "
                            "compiling (a Loop whose trip count and "
                            "condition fold is unrolled)";
    cond = *truth;
  }
  SmallVector<OnnxValue> carried;
  for (unsigned i = 2; i < ctx.numInputs(); ++i) {
    FailureOr<OnnxValue> v = ctx.anyInput(i);
    if (failed(v))
      return failure();
    carried.push_back(*v);
  }
  int64_t numCarried = carried.size();
  int64_t numScans = body->output_size() - 1 - numCarried;
  if (numScans < 0 || body->input_size() != 2 + numCarried ||
      static_cast<int64_t>(ctx.numOutputs()) > numCarried + numScans)
    return ctx.error() << "its body takes " << body->input_size()
                       << " inputs and gives " << body->output_size()
                       << " outputs, which do not fit " << numCarried
                       << " loop-carried values";
  std::vector<SmallVector<Value>> scans(numScans);
  for (int64_t i = 0; i < trips && cond; ++i) {
    if (i == kMaxUnrolledIterations)
      return ctx.error() << "runs more than " << kMaxUnrolledIterations
                         << " iterations, which are not unrolled";
    SmallVector<OnnxValue> inputs = {
        ctx.splat(ctx.b.getI64Type(), {}, static_cast<double>(i)),
        ctx.splat(ctx.b.getI1Type(), {}, 1.0)};
    llvm::append_range(inputs, carried);
    FailureOr<SmallVector<OnnxValue>> outs = ctx.importSubgraph(*body, inputs);
    if (failed(outs))
      return failure();
    for (int64_t j = 0; j < numScans; ++j)
      if ((*outs)[1 + numCarried + j].sequence)
        return ctx.error() << "its scan output " << j << " is a sequence";
    if ((*outs)[0].sequence)
      return ctx.error() << "its condition is a sequence";
    std::optional<bool> next = constantTruth((*outs)[0].tensor);
    if (!next)
      return ctx.error() << "its condition after iteration " << i
                         << " depends on the data, so the number of "
                            "iterations is not known when compiling";
    cond = *next;
    carried.assign(outs->begin() + 1, outs->begin() + 1 + numCarried);
    for (int64_t j = 0; j < numScans; ++j)
      scans[j].push_back((*outs)[1 + numCarried + j].tensor);
  }
  for (int64_t i = 0; i < numCarried; ++i)
    ctx.setAnyOutput(i, carried[i]);
  for (int64_t j = 0; j < numScans; ++j) {
    if (!ctx.hasOutput(numCarried + j))
      continue;
    if (scans[j].empty())
      return ctx.error() << "runs no iteration, so the shape of its scan "
                            "output "
                         << j << " is not known";
    FailureOr<Value> stacked = stack(ctx, scans[j]);
    if (failed(stacked))
      return failure();
    ctx.setOutput(numCarried + j, *stacked);
  }
  return success();
}

} // namespace

void onnx_import::registerControlFlowHandlers(HandlerTable &t) {
  t.on("If", 1, ifOp);
  t.on("Loop", 1, loop);
}
