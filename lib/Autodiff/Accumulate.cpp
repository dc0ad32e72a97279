//===- Accumulate.cpp - Gradient accumulation over micro-batches -*- C++
//-*-===//
//
// The step's body (forward, then backward) is repeated once per micro-batch
// in order, so that a micro-batch's activations die at the end of its
// backward and only the gradients' running sums cross from one to the
// next: the memory of one micro-batch, the update of all. Each micro-batch
// reads its own copy of the graph inputs. Weights and optimizer state are
// read once, and the update (appended later by --cleave-optimizer) sees the
// summed gradients only: on a dp mesh the partitioner then reduces each
// gradient once per update, where the last micro-batch completes it.
//
//===----------------------------------------------------------------------===//

#include "Accumulate.h"
#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Autodiff.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::cleave;

namespace {

Value scalarConstant(OpBuilder &b, Location loc, Type type, double v) {
  auto t = cast<RankedTensorType>(type);
  Type e = t.getElementType();
  Attribute a = isa<FloatType>(e)
                    ? Attribute(b.getFloatAttr(e, v))
                    : Attribute(b.getIntegerAttr(e, static_cast<int64_t>(v)));
  return ConstantOp::create(b, loc, DenseElementsAttr::get(t, a));
}

/// The count the loss divides by, where it is one the parameters do not
/// change (its ops read no trained weight) and the loss's division is its
/// only use in the forward (so the whole update's count may stand in for
/// it); \p slice receives the ops that compute it, in order.
Value countDivisor(func::FuncOp func, Value loss, Operation *seedOp,
                   SmallVectorImpl<Operation *> &slice) {
  Value v = loss;
  while (auto reshape = v.getDefiningOp<ReshapeOp>())
    v = reshape.getInput();
  auto div = v.getDefiningOp<DivOp>();
  if (!div || !isa<FloatType>(getElementTypeOrSelf(div.getType())))
    return {};
  Value count = div.getRhs();
  for (Operation *user : count.getUsers())
    if (user != div && !seedOp->isBeforeInBlock(user))
      return {};
  llvm::SetVector<Operation *> ops;
  SmallVector<Value> work{count};
  while (!work.empty()) {
    Value w = work.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(w)) {
      if (isTrainedParameter(func, arg.getArgNumber()) ||
          func.getArgAttr(arg.getArgNumber(), kStepAttr))
        return {};
      continue;
    }
    Operation *op = w.getDefiningOp();
    if (!op || op->getNumRegions() || !ops.insert(op))
      continue;
    llvm::append_range(work, op->getOperands());
  }
  slice.assign(ops.begin(), ops.end());
  llvm::sort(slice,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return count;
}

/// Folds \p values left to right with cleave.add.
Value sumInOrder(OpBuilder &b, Location loc, ArrayRef<Value> values) {
  Value sum = values.front();
  for (Value v : values.drop_front())
    sum = AddOp::create(b, loc, sum, v);
  return sum;
}

} // namespace

LogicalResult mlir::cleave::accumulateMicroBatches(func::FuncOp func,
                                                   Value seed, int64_t n) {
  if (n <= 1)
    return success();
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Operation *seedOp = seed.getDefiningOp();
  if (!seedOp)
    return func.emitOpError("has a backward seed made by no op");
  Location loc = func.getLoc();
  OpBuilder b(func.getContext());

  SmallVector<Operation *> countSlice;
  Value count = countDivisor(func, ret.getOperand(0), seedOp, countSlice);
  if (!count) {
    // A plain mean: each micro-batch's gradient is its mean's over N.
    b.setInsertionPointAfter(seedOp);
    Value scaled =
        MulOp::create(b, seedOp->getLoc(), seed,
                      scalarConstant(b, loc, seed.getType(), 1.0 / n));
    seed.replaceAllUsesExcept(scaled, scaled.getDefiningOp());
  }

  SmallVector<BlockArgument> inputs;
  BlockArgument step;
  llvm::StringMap<BlockArgument> bufferArgs;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (func.getArgAttr(i, kInputAttr))
      inputs.push_back(arg);
    if (func.getArgAttr(i, kStepAttr))
      step = arg;
    if (auto name = func.getArgAttrOfType<StringAttr>(i, kBufferAttr))
      bufferArgs[name] = arg;
  }
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);

  // Micro-batch j's copies of the inputs.
  SmallVector<SmallVector<Value>> microInputs(n);
  for (BlockArgument in : inputs)
    microInputs[0].push_back(in);
  for (int64_t j = 1; j < n; ++j)
    for (BlockArgument in : inputs) {
      NamedAttrList attrs(func.getArgAttrDict(in.getArgNumber()));
      attrs.set(kMicroBatchAttr, b.getI64IntegerAttr(j));
      unsigned at = func.getNumArguments();
      if (failed(func.insertArgument(at, in.getType(),
                                     attrs.getDictionary(func.getContext()),
                                     in.getLoc())))
        return failure();
      microInputs[j].push_back(func.getArgument(at));
    }
  auto baseMapping = [&](int64_t j, IRMapping &m) {
    for (auto [in, copy] : llvm::zip(inputs, microInputs[j]))
      m.map(in, copy);
  };

  // Ahead of every micro-batch: the step each one draws its random masks
  // from ((step - 1) * N + j + 1, so no two share dropout masks), and the
  // update's count, the sum of the micro-batches'.
  b.setInsertionPointToStart(&body);
  SmallVector<Value> steps(n);
  if (step)
    for (int64_t j = 0; j < n; ++j)
      steps[j] = AddOp::create(
          b, loc,
          MulOp::create(b, loc, step,
                        scalarConstant(b, loc, step.getType(), n)),
          scalarConstant(b, loc, step.getType(), double(j + 1 - n)));
  Value total;
  if (count) {
    SmallVector<Value> counts;
    for (int64_t j = 0; j < n; ++j) {
      IRMapping m;
      baseMapping(j, m);
      for (Operation *op : countSlice)
        b.clone(*op, m);
      counts.push_back(m.lookupOrDefault(count));
    }
    total = sumInOrder(b, loc, counts);
  }
  Operation *ahead = total  ? total.getDefiningOp()
                     : step ? steps.back().getDefiningOp()
                            : nullptr;
  auto inOriginal = [&](OpOperand &use) {
    return !ahead || ahead->isBeforeInBlock(use.getOwner());
  };
  if (step)
    step.replaceUsesWithIf(steps[0], inOriginal);
  if (count)
    count.replaceUsesWithIf(total, inOriginal);

  // Micro-batches 1..N-1, each after the one before, its loss and
  // gradients added to the running sums as soon as it is done (so that no
  // micro-batch's gradients outlive it).
  unsigned numResults = ret.getNumOperands();
  SmallVector<Value> results(ret.getOperands());
  b.setInsertionPoint(ret);
  for (int64_t j = 1; j < n; ++j) {
    IRMapping m;
    baseMapping(j, m);
    if (step)
      m.map(steps[0], steps[j]);
    for (unsigned r = 0; r < numResults; ++r)
      if (auto name = func.getResultAttrOfType<StringAttr>(r, kBufferAttr))
        if (BlockArgument arg = bufferArgs.lookup(name))
          m.map(arg, results[r]);
    for (Operation *op : ops) {
      b.clone(*op, m);
      if (count && count.getDefiningOp() == op)
        m.map(count, total);
    }
    // Gradients summed in order, as .grad accumulates them; the loss too;
    // buffers are the last micro-batch's.
    for (unsigned r = 0; r < numResults; ++r) {
      Value mine = m.lookupOrDefault(ret.getOperand(r));
      results[r] = r == 0 || func.getResultAttr(r, kGradientAttr)
                       ? AddOp::create(b, loc, results[r], mine).getResult()
                       : mine;
    }
  }
  if (!count)
    results[0] =
        MulOp::create(b, loc, results[0],
                      scalarConstant(b, loc, results[0].getType(), 1.0 / n));
  ret->setOperands(results);
  return success();
}
