//===- EmitPlan.cpp - cleave IR to a plan Program ---------------*- C++ -*-===//
//
// The last step of lowering: a straight-line function with planned buffers
// becomes a list of kernel calls, each written through the kernel schema's
// typed writer (kernels.def, plan_writer.h): kernel names and attributes
// are the runtime's by construction.
//
//===----------------------------------------------------------------------===//

#include "cleave/Lowering/EmitPlan.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Lowering/Passes.h"
#include "cleave/Lowering/PlanBuffers.h"
#include "cleave/Sharding/Sharding.h"
#include "plan/plan.pb.h"
#include "plan/plan_writer.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"
#include <google/protobuf/text_format.h>

using namespace mlir;
using namespace mlir::cleave;
namespace pb = ::cleave::plan;

static FailureOr<pb::DType> dtypeOf(Type element) {
  if (element.isF32())
    return pb::F32;
  if (element.isSignlessInteger(64))
    return pb::I64;
  if (element.isSignlessInteger(32))
    return pb::I32;
  if (element.isSignlessInteger(1))
    return pb::BOOL;
  // Storage dtypes of a model's inputs and outputs (only cast reads them).
  if (element.isF64())
    return pb::F64;
  if (element.isF16())
    return pb::F16;
  if (element.isBF16())
    return pb::BF16;
  if (element.isSignlessInteger(8))
    return pb::I8;
  if (element.isSignlessInteger(16))
    return pb::I16;
  if (element.isUnsignedInteger(8))
    return pb::U8;
  if (element.isUnsignedInteger(16))
    return pb::U16;
  if (element.isUnsignedInteger(32))
    return pb::U32;
  return failure();
}

/// Raw little-endian bytes of a dense constant, splats expanded.
static FailureOr<std::string> constantBytes(ElementsAttr attr) {
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return failure();
  Type element = dense.getElementType();
  std::string out;
  auto append = [&](auto range) {
    using T = std::decay_t<decltype(*range.begin())>;
    out.reserve(dense.getNumElements() * sizeof(T));
    for (T v : range)
      out.append(reinterpret_cast<const char *>(&v), sizeof(T));
  };
  if (element.isF32())
    append(dense.getValues<float>());
  else if (element.isSignlessInteger(64))
    append(dense.getValues<int64_t>());
  else if (element.isSignlessInteger(32))
    append(dense.getValues<int32_t>());
  else if (element.isSignlessInteger(1))
    for (bool b : dense.getValues<bool>())
      out.push_back(b ? 1 : 0);
  else if (succeeded(dtypeOf(element)))
    // The storage dtypes: the attribute's own little-endian bytes.
    for (int64_t i = 0, n = dense.getNumElements(); i < n; ++i) {
      ArrayRef<char> raw = dense.getRawData();
      size_t size = raw.size() / (dense.isSplat() ? 1 : n);
      out.append(raw.data() + (dense.isSplat() ? 0 : i * size), size);
    }
  else
    return failure();
  return out;
}

namespace {
namespace schema = ::cleave::rt::schema;
using K = schema::Kernel;
template <K Kind> using Params = schema::Params<Kind>;

std::vector<int64_t> ints(ArrayRef<int64_t> values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

/// Writes \p p's kernel and attributes into \p inst (kernels.def's writer).
template <K Kind>
LogicalResult emit(pb::Instruction &inst, const Params<Kind> &p = {}) {
  schema::writeInstruction(p, inst);
  return success();
}

LogicalResult emitCmp(CmpPredicate p, pb::Instruction &inst) {
  switch (p) {
  case CmpPredicate::eq:
    return emit<K::k_cmp_eq>(inst);
  case CmpPredicate::ne:
    return emit<K::k_cmp_ne>(inst);
  case CmpPredicate::lt:
    return emit<K::k_cmp_lt>(inst);
  case CmpPredicate::le:
    return emit<K::k_cmp_le>(inst);
  case CmpPredicate::gt:
    return emit<K::k_cmp_gt>(inst);
  case CmpPredicate::ge:
    return emit<K::k_cmp_ge>(inst);
  }
  llvm_unreachable("unknown predicate");
}

template <K Kind> LogicalResult emitReduce(ReduceOp r, pb::Instruction &inst) {
  Params<Kind> p;
  p.axes = ints(r.getDims());
  return emit(inst, p);
}

LogicalResult emitReduce(ReduceOp r, pb::Instruction &inst) {
  switch (r.getKind()) {
  case ReduceKind::sum:
    return emitReduce<K::k_reduce_sum>(r, inst);
  case ReduceKind::mean:
    return emitReduce<K::k_reduce_mean>(r, inst);
  case ReduceKind::max:
    return emitReduce<K::k_reduce_max>(r, inst);
  case ReduceKind::min:
    return emitReduce<K::k_reduce_min>(r, inst);
  case ReduceKind::prod:
    return emitReduce<K::k_reduce_prod>(r, inst);
  }
  llvm_unreachable("unknown reduction");
}

/// The window of conv2d, the pools and their adjoints (Params \p P).
template <typename P, typename Op> void setWindow(P &p, Op op) {
  p.strides = ints(op.getStrides());
  p.pads = ints(op.getPads());
  p.dilations = ints(op.getDilations());
}
template <K Kind, typename Op>
LogicalResult emitConv(Op op, pb::Instruction &inst) {
  Params<Kind> p;
  setWindow(p, op);
  p.groups = op.getGroups();
  return emit(inst, p);
}
template <K Kind, typename Op>
LogicalResult emitPool(Op op, pb::Instruction &inst) {
  Params<Kind> p;
  setWindow(p, op);
  p.kernel = ints(op.getKernel());
  if constexpr (Kind == K::k_avg_pool2d || Kind == K::k_avg_pool2d_backward)
    p.count_include_pad = op.getCountIncludePad();
  return emit(inst, p);
}

/// gather's and scatter_add's axis and row sharding.
template <K Kind>
LogicalResult emitIndexed(Operation *op, int64_t axis, pb::Instruction &inst) {
  Params<Kind> p;
  p.axis = axis;
  if (auto shard = op->getAttrOfType<DenseI64ArrayAttr>(kShardAxesAttr))
    p.shard_axes = ints(shard.asArrayRef());
  if (auto size = op->getAttrOfType<IntegerAttr>(kShardSizeAttr))
    p.shard_size = size.getInt();
  return emit(inst, p);
}

/// all_gather, reduce_scatter, shard_slice: axes, dim and (but for
/// reduce_scatter, which has none) blocks.
template <K Kind, typename Op>
LogicalResult emitSplit(Op op, pb::Instruction &inst) {
  Params<Kind> p;
  p.axes = ints(op.getAxes());
  p.dim = op.getDim();
  if constexpr (Kind != K::k_reduce_scatter)
    p.blocks = op.getBlocks();
  return emit(inst, p);
}

LogicalResult emitFill(ConstantOp c, pb::Instruction &inst) {
  // A large splat (isStoredConstant is false): filled at run time.
  auto dense = cast<DenseElementsAttr>(c.getValue());
  Type element = dense.getElementType();
  Params<K::k_fill> p;
  if (isa<FloatType>(element)) {
    p.value.isFloat = true;
    p.value.f = dense.getSplatValue<APFloat>().convertToDouble();
  } else if (element.isSignlessInteger(1)) {
    p.value.i = dense.getSplatValue<bool>() ? 1 : 0;
  } else {
    p.value.i = dense.getSplatValue<APInt>().getSExtValue();
  }
  return emit(inst, p);
}

LogicalResult emitCast(CastOp op, pb::Instruction &inst) {
  Params<K::k_cast> p;
  p.range_checked = op.getRangeChecked();
  return emit(inst, p);
}

/// The softmax family, attention and the norms: kernels whose attributes
/// are the op's own.
LogicalResult lowerNormalising(Operation *op, pb::Instruction &inst) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<SoftmaxOp>([&](SoftmaxOp s) {
        Params<K::k_softmax> p;
        p.axis = s.getAxis();
        return emit(inst, p);
      })
      .Case<LogSoftmaxOp>([&](LogSoftmaxOp s) {
        Params<K::k_log_softmax> p;
        p.axis = s.getAxis();
        return emit(inst, p);
      })
      .Case<AttentionOp>([&](AttentionOp a) {
        Params<K::k_attention> p;
        p.scale = a.getScale().convertToDouble();
        p.causal = a.getCausal();
        return emit(inst, p);
      })
      .Case<CrossEntropyOp>([&](CrossEntropyOp c) {
        Params<K::k_cross_entropy> p;
        p.axis = c.getAxis();
        return emit(inst, p);
      })
      .Case<CrossEntropyBackwardOp>([&](CrossEntropyBackwardOp c) {
        Params<K::k_cross_entropy_backward> p;
        p.axis = c.getAxis();
        return emit(inst, p);
      })
      .Case<AttentionBackwardOp>([&](AttentionBackwardOp a) {
        Params<K::k_attention_backward> p;
        p.scale = a.getScale().convertToDouble();
        p.causal = a.getCausal();
        return emit(inst, p);
      })
      .Case<LayerNormBackwardOp>([&](LayerNormBackwardOp l) {
        Params<K::k_layer_norm_backward> p;
        p.axis = l.getAxis();
        return emit(inst, p);
      })
      .Case<LayerNormOp>([&](LayerNormOp l) {
        Params<K::k_layer_norm> p;
        p.axis = l.getAxis();
        p.epsilon = l.getEpsilon().convertToDouble();
        return emit(inst, p);
      })
      .Case<BatchNormOp>([&](BatchNormOp n) {
        Params<K::k_batch_norm> p;
        p.epsilon = n.getEpsilon().convertToDouble();
        return emit(inst, p);
      })
      .Default([](Operation *) { return failure(); });
}

/// The kernel of \p op with its attributes, written into \p inst; failure
/// (with no diagnostic) when the op has no kernel.
LogicalResult lowerOp(Operation *op, pb::Instruction &inst) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<AddOp>([&](auto) { return emit<K::k_add>(inst); })
      .Case<SubOp>([&](auto) { return emit<K::k_sub>(inst); })
      .Case<MulOp>([&](auto) { return emit<K::k_mul>(inst); })
      .Case<DivOp>([&](auto) { return emit<K::k_div>(inst); })
      .Case<PowOp>([&](auto) { return emit<K::k_pow>(inst); })
      .Case<MaxOp>([&](auto) { return emit<K::k_max>(inst); })
      .Case<MinOp>([&](auto) { return emit<K::k_min>(inst); })
      .Case<AndOp>([&](auto) { return emit<K::k_and>(inst); })
      .Case<OrOp>([&](auto) { return emit<K::k_or>(inst); })
      .Case<XorOp>([&](auto) { return emit<K::k_xor>(inst); })
      .Case<NotOp>([&](auto) { return emit<K::k_not>(inst); })
      .Case<CmpOp>([&](CmpOp c) { return emitCmp(c.getPredicate(), inst); })
      .Case<SelectOp>([&](auto) { return emit<K::k_select>(inst); })
      .Case<NegOp>([&](auto) { return emit<K::k_neg>(inst); })
      .Case<AbsOp>([&](auto) { return emit<K::k_abs>(inst); })
      .Case<ExpOp>([&](auto) { return emit<K::k_exp>(inst); })
      .Case<LogOp>([&](auto) { return emit<K::k_log>(inst); })
      .Case<SqrtOp>([&](auto) { return emit<K::k_sqrt>(inst); })
      .Case<RsqrtOp>([&](auto) { return emit<K::k_rsqrt>(inst); })
      .Case<ReciprocalOp>([&](auto) { return emit<K::k_reciprocal>(inst); })
      .Case<TanhOp>([&](auto) { return emit<K::k_tanh>(inst); })
      .Case<SigmoidOp>([&](auto) { return emit<K::k_sigmoid>(inst); })
      .Case<ReluOp>([&](auto) { return emit<K::k_relu>(inst); })
      .Case<ErfOp>([&](auto) { return emit<K::k_erf>(inst); })
      .Case<SinOp>([&](auto) { return emit<K::k_sin>(inst); })
      .Case<CosOp>([&](auto) { return emit<K::k_cos>(inst); })
      .Case<GeluOp>([&](GeluOp g) {
        Params<K::k_gelu> p;
        p.approximate = g.getApproximate();
        return emit(inst, p);
      })
      .Case<LeakyReluOp>([&](LeakyReluOp l) {
        Params<K::k_leaky_relu> p;
        p.alpha = l.getAlpha().convertToDouble();
        return emit(inst, p);
      })
      .Case<CastOp>([&](CastOp c) { return emitCast(c, inst); })
      .Case<IotaOp>([&](IotaOp i) {
        Params<K::k_iota> p;
        p.dim = i.getDim();
        return emit(inst, p);
      })
      .Case<CheckIndexOp>([&](CheckIndexOp c) {
        Params<K::k_check_index> p;
        p.bound = c.getBound();
        p.ignore = c.getIgnore();
        return emit(inst, p);
      })
      .Case<MatmulOp>([&](MatmulOp m) {
        Params<K::k_matmul> p;
        p.transpose_a = m.getTransposeLhs();
        p.transpose_b = m.getTransposeRhs();
        return emit(inst, p);
      })
      .Case<MatmulDequantOp>([&](MatmulDequantOp m) {
        Params<K::k_matmul_dequant> p;
        p.transpose_b = m.getTransposeRhs();
        return emit(inst, p);
      })
      .Case<ReduceOp>([&](ReduceOp r) { return emitReduce(r, inst); })
      .Case<SoftmaxOp, LogSoftmaxOp, AttentionOp, AttentionBackwardOp,
            CrossEntropyOp, CrossEntropyBackwardOp, LayerNormOp,
            LayerNormBackwardOp, BatchNormOp>(
          [&](Operation *o) { return lowerNormalising(o, inst); })
      .Case<TransposeOp>([&](TransposeOp t) {
        Params<K::k_transpose> p;
        p.perm = ints(t.getPermutation());
        return emit(inst, p);
      })
      .Case<BroadcastOp>([&](auto) { return emit<K::k_broadcast>(inst); })
      .Case<ConcatOp>([&](ConcatOp c) {
        Params<K::k_concat> p;
        p.axis = c.getAxis();
        return emit(inst, p);
      })
      .Case<SliceOp>([&](SliceOp s) {
        Params<K::k_slice> p;
        p.starts = ints(s.getStarts());
        p.steps = ints(s.getSteps());
        return emit(inst, p);
      })
      .Case<GatherOp>([&](GatherOp g) {
        return emitIndexed<K::k_gather>(g, g.getAxis(), inst);
      })
      .Case<Conv2DOp>(
          [&](Conv2DOp c) { return emitConv<K::k_conv2d>(c, inst); })
      .Case<MaxPool2DOp>(
          [&](MaxPool2DOp p) { return emitPool<K::k_max_pool2d>(p, inst); })
      .Case<AvgPool2DOp>(
          [&](AvgPool2DOp p) { return emitPool<K::k_avg_pool2d>(p, inst); })
      .Case<ScatterAddOp>([&](ScatterAddOp g) {
        return emitIndexed<K::k_scatter_add>(g, g.getAxis(), inst);
      })
      .Case<SliceScatterOp>([&](SliceScatterOp s) {
        Params<K::k_slice_scatter> p;
        p.starts = ints(s.getStarts());
        p.steps = ints(s.getSteps());
        return emit(inst, p);
      })
      .Case<Conv2DBackwardInputOp>([&](Conv2DBackwardInputOp c) {
        return emitConv<K::k_conv2d_backward_input>(c, inst);
      })
      .Case<Conv2DBackwardFilterOp>([&](Conv2DBackwardFilterOp c) {
        return emitConv<K::k_conv2d_backward_filter>(c, inst);
      })
      .Case<MaxPool2DBackwardOp>([&](MaxPool2DBackwardOp p) {
        return emitPool<K::k_max_pool2d_backward>(p, inst);
      })
      .Case<AvgPool2DBackwardOp>([&](AvgPool2DBackwardOp p) {
        return emitPool<K::k_avg_pool2d_backward>(p, inst);
      })
      .Case<AllReduceOp>([&](AllReduceOp r) {
        Params<K::k_all_reduce> p;
        p.axes = ints(r.getAxes());
        p.reduction = r.getKind() == ReduceKind::sum   ? 0
                      : r.getKind() == ReduceKind::max ? 1
                                                       : 2;
        return emit(inst, p);
      })
      .Case<AllGatherOp>(
          [&](AllGatherOp c) { return emitSplit<K::k_all_gather>(c, inst); })
      .Case<ReduceScatterOp>([&](ReduceScatterOp c) {
        return emitSplit<K::k_reduce_scatter>(c, inst);
      })
      .Case<ShardSliceOp>(
          [&](ShardSliceOp c) { return emitSplit<K::k_shard_slice>(c, inst); })
      .Case<AllToAllOp>([&](AllToAllOp c) {
        Params<K::k_all_to_all> p;
        p.axes = ints(c.getAxes());
        p.split_dim = c.getSplitDim();
        p.concat_dim = c.getConcatDim();
        return emit(inst, p);
      })
      .Case<RandomUniformOp>([&](RandomUniformOp r) {
        Params<K::k_random_uniform> p;
        p.seed = static_cast<int64_t>(r.getSeed());
        p.stream = static_cast<int64_t>(r.getStream());
        return emit(inst, p);
      })
      .Case<ConstantOp>([&](ConstantOp c) { return emitFill(c, inst); })
      .Default([](Operation *) { return failure(); });
}

/// The driver-facing role of an argument or result, from its attributes.
pb::Binding bindingOf(DictionaryAttr attrs, bool isResult) {
  pb::Binding b;
  auto str = [&](StringRef name) {
    auto a = attrs ? attrs.getAs<StringAttr>(name) : StringAttr();
    return a ? a.str() : std::string();
  };
  if (auto layout = attrs ? attrs.getAs<LayoutAttr>(kLayoutAttr) : nullptr)
    recordLayout(layout, b);
  if (!attrs) {
    b.set_role(isResult ? pb::Binding::OUTPUT : pb::Binding::INPUT);
  } else if (attrs.get(kLossAttr)) {
    b.set_role(pb::Binding::LOSS);
    b.set_name("loss");
  } else if (attrs.get(kStepAttr)) {
    b.set_role(pb::Binding::STEP);
    b.set_name("step");
  } else if (attrs.get(kHyperparameterAttr)) {
    b.set_role(pb::Binding::HYPERPARAMETER);
    b.set_name(str(kHyperparameterAttr));
  } else if (attrs.get(kMetricAttr)) {
    b.set_role(pb::Binding::METRIC);
    b.set_name(str(kMetricAttr));
  } else if (auto state = attrs.getAs<ArrayAttr>(kOptimizerStateAttr)) {
    b.set_role(pb::Binding::OPTIMIZER_STATE);
    if (state.size() == 2) {
      b.set_name(cast<StringAttr>(state[0]).str());
      b.set_slot(cast<StringAttr>(state[1]).str());
    }
  } else if (attrs.get(kGradientAttr)) {
    b.set_role(pb::Binding::GRADIENT);
    b.set_name(str(kGradientAttr));
  } else if (attrs.get(kParameterAttr) && attrs.get(kFrozenAttr)) {
    // A weight that does not train is loaded and saved as state, under the
    // "b:" keys frozen weights have always had.
    b.set_role(pb::Binding::BUFFER);
    b.set_name(str(kParameterAttr));
    b.set_frozen(true);
  } else if (attrs.get(kParameterAttr)) {
    b.set_role(pb::Binding::PARAMETER);
    b.set_name(str(kParameterAttr));
  } else if (attrs.get(kBufferAttr)) {
    b.set_role(pb::Binding::BUFFER);
    b.set_name(str(kBufferAttr));
  } else if (attrs.get(kInputAttr)) {
    b.set_role(pb::Binding::INPUT);
    b.set_name(str(kInputAttr));
    if (auto micro = attrs.getAs<IntegerAttr>(kMicroBatchAttr))
      b.set_micro_batch(micro.getInt());
  } else {
    b.set_role(isResult ? pb::Binding::OUTPUT : pb::Binding::INPUT);
    b.set_name(str(kOutputAttr));
  }
  return b;
}

std::string locationString(Location loc) {
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}
} // namespace

LogicalResult mlir::cleave::emitPlan(func::FuncOp func, pb::Program &program) {
  auto arena = func->getAttrOfType<IntegerAttr>(kArenaBytesAttr);
  if (!arena)
    return func.emitOpError("has no buffer plan; run cleave-plan-buffers");
  program.Clear();
  program.set_name(func.getName().str());
  program.set_arena_bytes(arena.getInt());

  llvm::DenseMap<Value, int32_t> ids;
  llvm::DenseMap<Value, unsigned> outputs = plannedOutputs(func);
  auto addValue = [&](Value v, pb::Value::Storage storage, int64_t offset,
                      int32_t index) -> FailureOr<int32_t> {
    auto type = cast<RankedTensorType>(v.getType());
    FailureOr<pb::DType> dtype = dtypeOf(type.getElementType());
    if (failed(dtype))
      return emitError(v.getLoc(), "the CPU runtime has no element type ")
             << type.getElementType();
    pb::Value *value = program.add_values();
    value->mutable_type()->set_dtype(*dtype);
    for (int64_t d : type.getShape())
      value->mutable_type()->add_shape(d);
    value->set_storage(storage);
    value->set_offset(offset);
    value->set_index(index);
    int32_t id = program.values_size() - 1;
    ids[v] = id;
    return id;
  };

  for (BlockArgument arg : func.getArguments()) {
    FailureOr<int32_t> id =
        addValue(arg, pb::Value::INPUT, 0, arg.getArgNumber());
    if (failed(id))
      return failure();
    program.add_inputs(*id);
    pb::Binding binding =
        bindingOf(func.getArgAttrDict(arg.getArgNumber()), false);
    std::string name = binding.name();
    if (binding.role() == pb::Binding::OPTIMIZER_STATE)
      name += "." + binding.slot();
    program.add_input_names(
        name.empty() ? "arg" + std::to_string(arg.getArgNumber()) : name);
    *program.add_input_bindings() = std::move(binding);
  }

  for (Operation &op : func.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        program.add_outputs(ids.lookup(v));
        pb::Binding binding = bindingOf(func.getResultAttrDict(i), true);
        std::string name = binding.name();
        if (binding.role() == pb::Binding::OPTIMIZER_STATE)
          name += "." + binding.slot();
        else if (binding.role() == pb::Binding::GRADIENT)
          name += ".grad";
        program.add_output_names(name.empty() ? "result" + std::to_string(i)
                                              : name);
        *program.add_output_bindings() = std::move(binding);
      }
      continue;
    }
    if (auto constant = dyn_cast<ConstantOp>(op);
        constant && isStoredConstant(constant)) {
      FailureOr<std::string> bytes = constantBytes(constant.getValue());
      if (failed(bytes))
        return constant.emitOpError("has a constant the plan cannot store");
      program.add_constants(std::move(*bytes));
      if (failed(addValue(constant, pb::Value::CONSTANT, 0,
                          program.constants_size() - 1)))
        return failure();
      continue;
    }
    if (isView(&op)) {
      // The view shares its operand's storage, offset and all.
      const pb::Value &src = program.values(ids.lookup(op.getOperand(0)));
      if (failed(addValue(op.getResult(0), src.storage(), src.offset(),
                          src.index())))
        return failure();
      continue;
    }
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(kOffsetsAttr);
    if (!offsets || offsets.size() != static_cast<int64_t>(op.getNumResults()))
      return op.emitOpError("has no buffer offsets; run cleave-plan-buffers");

    pb::Instruction inst;
    if (failed(lowerOp(&op, inst))) {
      if (inst.kernel().empty())
        return op.emitOpError("has no kernel in the CPU runtime");
      return failure();
    }
    inst.set_location(locationString(op.getLoc()));
    if (auto phase = op.getAttrOfType<StringAttr>(kPhaseAttr))
      inst.set_phase(phase.str());
    if (auto reason = op.getAttrOfType<StringAttr>(kReasonAttr))
      inst.set_reason(reason.str());
    inst.set_megatron(op.hasAttr(kMegatronAttr));
    inst.set_recomputed(op.hasAttr(kRecomputedAttr));
    if (auto carries = op.getAttrOfType<StringAttr>(kCarriesAttr))
      inst.set_carries(carries.str());
    if (auto origin = op.getAttrOfType<StringAttr>(kOriginAttr))
      inst.set_origin(origin.str());
    // Optional operands that are absent are encoded as -1 (kernels.def).
    auto appendOperand = [&](Value v) {
      inst.add_operands(v ? ids.lookup(v) : -1);
    };
    if (auto ln = dyn_cast<LayerNormOp>(op)) {
      for (Value v : {ln.getInput(), ln.getScale(), ln.getBias()})
        appendOperand(v);
    } else if (auto lnb = dyn_cast<LayerNormBackwardOp>(op)) {
      for (Value v : {lnb.getInput(), lnb.getMean(), lnb.getInvStdDev(),
                      lnb.getGrad(), lnb.getScale()})
        appendOperand(v);
    } else if (auto conv = dyn_cast<Conv2DOp>(op)) {
      for (Value v : {conv.getInput(), conv.getFilter(), conv.getBias()})
        appendOperand(v);
    } else {
      for (Value v : op.getOperands())
        appendOperand(v);
    }
    for (auto [result, offset] :
         llvm::zip(op.getResults(), offsets.asArrayRef())) {
      auto output = outputs.find(result);
      FailureOr<int32_t> id =
          output == outputs.end()
              ? addValue(result, pb::Value::ARENA, offset, 0)
              : addValue(result, pb::Value::OUTPUT, 0, output->second);
      if (failed(id))
        return failure();
      inst.add_results(*id);
    }
    *program.add_instructions() = std::move(inst);
  }
  return success();
}

namespace mlir::cleave {
#define GEN_PASS_DEF_EMITPLANPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

namespace {
struct EmitPlanPass
    : public mlir::cleave::impl::EmitPlanPassBase<EmitPlanPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isDeclaration())
        continue;
      pb::Program program;
      if (failed(emitPlan(func, program)))
        return signalPassFailure();
      std::string text;
      if (!google::protobuf::TextFormat::PrintToString(program, &text)) {
        func.emitOpError("has a plan protobuf cannot print");
        return signalPassFailure();
      }
      llvm::outs() << text;
    }
  }
};
} // namespace
