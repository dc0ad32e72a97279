//===- EmitPlan.cpp - cleave IR to a plan Program ---------------*- C++ -*-===//
//
// The last step of lowering: a straight-line function with planned buffers
// becomes a list of kernel calls. Kernel names are checked against the list
// the runtime implements (kernels.def), so the two cannot drift apart.
//
//===----------------------------------------------------------------------===//

#include "cleave/Lowering/EmitPlan.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Lowering/PlanBuffers.h"
#include "cleave/Sharding/Sharding.h"
#include "plan/plan.pb.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::cleave;
namespace pb = ::cleave::plan;

static const llvm::StringSet<> &runtimeKernels() {
  static const llvm::StringSet<> kernels = {
#define CLEAVE_KERNEL(NAME) #NAME,
#include "cleave/runtime/kernels.def"
  };
  return kernels;
}

static FailureOr<pb::DType> dtypeOf(Type element) {
  if (element.isF32())
    return pb::F32;
  if (element.isSignlessInteger(64))
    return pb::I64;
  if (element.isSignlessInteger(32))
    return pb::I32;
  if (element.isSignlessInteger(1))
    return pb::BOOL;
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
  else
    return failure();
  return out;
}

namespace {
/// Builds one Instruction: kernel name and named attributes.
struct InstructionBuilder {
  pb::Instruction &inst;
  void ints(StringRef name, ArrayRef<int64_t> values) {
    pb::Attribute &a = (*inst.mutable_attrs())[name.str()];
    for (int64_t v : values)
      a.add_ints(v);
  }
  void floats(StringRef name, ArrayRef<double> values) {
    pb::Attribute &a = (*inst.mutable_attrs())[name.str()];
    for (double v : values)
      a.add_floats(v);
  }
};

const char *cmpKernel(CmpPredicate p) {
  switch (p) {
  case CmpPredicate::eq:
    return "cmp_eq";
  case CmpPredicate::ne:
    return "cmp_ne";
  case CmpPredicate::lt:
    return "cmp_lt";
  case CmpPredicate::le:
    return "cmp_le";
  case CmpPredicate::gt:
    return "cmp_gt";
  case CmpPredicate::ge:
    return "cmp_ge";
  }
  llvm_unreachable("unknown predicate");
}

/// The kernel of \p op, with its attributes written into \p b; empty when
/// the op has no kernel.
std::string lowerOp(Operation *op, InstructionBuilder &b) {
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case<AddOp>([](auto) { return "add"; })
      .Case<SubOp>([](auto) { return "sub"; })
      .Case<MulOp>([](auto) { return "mul"; })
      .Case<DivOp>([](auto) { return "div"; })
      .Case<PowOp>([](auto) { return "pow"; })
      .Case<MaxOp>([](auto) { return "max"; })
      .Case<MinOp>([](auto) { return "min"; })
      .Case<AndOp>([](auto) { return "and"; })
      .Case<OrOp>([](auto) { return "or"; })
      .Case<XorOp>([](auto) { return "xor"; })
      .Case<NotOp>([](auto) { return "not"; })
      .Case<CmpOp>([](CmpOp c) { return cmpKernel(c.getPredicate()); })
      .Case<SelectOp>([](auto) { return "select"; })
      .Case<NegOp>([](auto) { return "neg"; })
      .Case<AbsOp>([](auto) { return "abs"; })
      .Case<ExpOp>([](auto) { return "exp"; })
      .Case<LogOp>([](auto) { return "log"; })
      .Case<SqrtOp>([](auto) { return "sqrt"; })
      .Case<RsqrtOp>([](auto) { return "rsqrt"; })
      .Case<ReciprocalOp>([](auto) { return "reciprocal"; })
      .Case<TanhOp>([](auto) { return "tanh"; })
      .Case<SigmoidOp>([](auto) { return "sigmoid"; })
      .Case<ReluOp>([](auto) { return "relu"; })
      .Case<ErfOp>([](auto) { return "erf"; })
      .Case<SinOp>([](auto) { return "sin"; })
      .Case<CosOp>([](auto) { return "cos"; })
      .Case<GeluOp>([&](GeluOp g) {
        b.ints("approximate", {g.getApproximate() ? 1 : 0});
        return "gelu";
      })
      .Case<LeakyReluOp>([&](LeakyReluOp l) {
        b.floats("alpha", {l.getAlpha().convertToDouble()});
        return "leaky_relu";
      })
      .Case<CastOp>([](auto) { return "cast"; })
      .Case<IotaOp>([&](IotaOp i) {
        b.ints("dim", {static_cast<int64_t>(i.getDim())});
        return "iota";
      })
      .Case<CheckIndexOp>([&](CheckIndexOp c) {
        b.ints("bound", {static_cast<int64_t>(c.getBound())});
        if (std::optional<int64_t> ignore = c.getIgnore())
          b.ints("ignore", {*ignore});
        return "check_index";
      })
      .Case<MatmulOp>([&](MatmulOp m) {
        b.ints("transpose_a", {m.getTransposeLhs() ? 1 : 0});
        b.ints("transpose_b", {m.getTransposeRhs() ? 1 : 0});
        return "matmul";
      })
      .Case<ReduceOp>([&](ReduceOp r) -> std::string {
        b.ints("axes", r.getDims());
        return ("reduce_" + stringifyReduceKind(r.getKind())).str();
      })
      .Case<SoftmaxOp, LogSoftmaxOp>([&](auto s) -> std::string {
        b.ints("axis", {static_cast<int64_t>(s.getAxis())});
        return isa<SoftmaxOp>(op) ? "softmax" : "log_softmax";
      })
      .Case<LayerNormOp>([&](LayerNormOp l) {
        b.ints("axis", {static_cast<int64_t>(l.getAxis())});
        b.floats("epsilon", {l.getEpsilon().convertToDouble()});
        return "layer_norm";
      })
      .Case<BatchNormOp>([&](BatchNormOp n) {
        b.floats("epsilon", {n.getEpsilon().convertToDouble()});
        return "batch_norm";
      })
      .Case<TransposeOp>([&](TransposeOp t) {
        b.ints("perm", t.getPermutation());
        return "transpose";
      })
      .Case<BroadcastOp>([](auto) { return "broadcast"; })
      .Case<ConcatOp>([&](ConcatOp c) {
        b.ints("axis", {static_cast<int64_t>(c.getAxis())});
        return "concat";
      })
      .Case<SliceOp>([&](SliceOp s) {
        b.ints("starts", s.getStarts());
        b.ints("steps", s.getSteps());
        return "slice";
      })
      .Case<GatherOp>([&](GatherOp g) {
        b.ints("axis", {static_cast<int64_t>(g.getAxis())});
        if (auto shard = g->getAttrOfType<DenseI64ArrayAttr>(kShardAxesAttr))
          b.ints("shard_axes", shard.asArrayRef());
        if (auto size = g->getAttrOfType<IntegerAttr>(kShardSizeAttr))
          b.ints("shard_size", {size.getInt()});
        return "gather";
      })
      .Case<Conv2DOp>([&](Conv2DOp c) {
        b.ints("strides", c.getStrides());
        b.ints("pads", c.getPads());
        b.ints("dilations", c.getDilations());
        b.ints("groups", {static_cast<int64_t>(c.getGroups())});
        return "conv2d";
      })
      .Case<MaxPool2DOp, AvgPool2DOp>([&](auto p) -> std::string {
        b.ints("kernel", p.getKernel());
        b.ints("strides", p.getStrides());
        b.ints("pads", p.getPads());
        b.ints("dilations", p.getDilations());
        if (auto avg = dyn_cast<AvgPool2DOp>(op)) {
          b.ints("count_include_pad", {avg.getCountIncludePad() ? 1 : 0});
          return "avg_pool2d";
        }
        return "max_pool2d";
      })
      .Case<ScatterAddOp>([&](ScatterAddOp g) {
        b.ints("axis", {static_cast<int64_t>(g.getAxis())});
        if (auto shard = g->getAttrOfType<DenseI64ArrayAttr>(kShardAxesAttr))
          b.ints("shard_axes", shard.asArrayRef());
        if (auto size = g->getAttrOfType<IntegerAttr>(kShardSizeAttr))
          b.ints("shard_size", {size.getInt()});
        return "scatter_add";
      })
      .Case<SliceScatterOp>([&](SliceScatterOp s) {
        b.ints("starts", s.getStarts());
        b.ints("steps", s.getSteps());
        return "slice_scatter";
      })
      .Case<Conv2DBackwardInputOp, Conv2DBackwardFilterOp>(
          [&](auto c) -> std::string {
            b.ints("strides", c.getStrides());
            b.ints("pads", c.getPads());
            b.ints("dilations", c.getDilations());
            b.ints("groups", {static_cast<int64_t>(c.getGroups())});
            return isa<Conv2DBackwardInputOp>(op) ? "conv2d_backward_input"
                                                  : "conv2d_backward_filter";
          })
      .Case<MaxPool2DBackwardOp, AvgPool2DBackwardOp>(
          [&](auto p) -> std::string {
            b.ints("kernel", p.getKernel());
            b.ints("strides", p.getStrides());
            b.ints("pads", p.getPads());
            b.ints("dilations", p.getDilations());
            if (auto avg = dyn_cast<AvgPool2DBackwardOp>(op)) {
              b.ints("count_include_pad", {avg.getCountIncludePad() ? 1 : 0});
              return "avg_pool2d_backward";
            }
            return "max_pool2d_backward";
          })
      .Case<AllReduceOp>([&](AllReduceOp r) {
        b.ints("axes", r.getAxes());
        int64_t kind = r.getKind() == ReduceKind::sum   ? 0
                       : r.getKind() == ReduceKind::max ? 1
                                                        : 2;
        b.ints("reduction", {kind});
        return "all_reduce";
      })
      .Case<AllGatherOp, ReduceScatterOp, ShardSliceOp>(
          [&](auto c) -> std::string {
            b.ints("axes", c.getAxes());
            b.ints("dim", {static_cast<int64_t>(c.getDim())});
            if (auto blocks = c->template getAttrOfType<IntegerAttr>("blocks"))
              if (blocks.getInt() != 1)
                b.ints("blocks", {blocks.getInt()});
            return isa<AllGatherOp>(op)       ? "all_gather"
                   : isa<ReduceScatterOp>(op) ? "reduce_scatter"
                                              : "shard_slice";
          })
      .Case<RandomUniformOp>([&](RandomUniformOp r) {
        b.ints("seed", {static_cast<int64_t>(r.getSeed())});
        b.ints("stream", {static_cast<int64_t>(r.getStream())});
        return "random_uniform";
      })
      .Case<ConstantOp>([&](ConstantOp c) -> std::string {
        // A large splat (isStoredConstant is false): filled at run time.
        auto dense = cast<DenseElementsAttr>(c.getValue());
        Type element = dense.getElementType();
        if (isa<FloatType>(element))
          b.floats("value", {dense.getSplatValue<APFloat>().convertToDouble()});
        else if (element.isSignlessInteger(1))
          b.ints("value", {dense.getSplatValue<bool>() ? 1 : 0});
        else
          b.ints("value", {dense.getSplatValue<APInt>().getSExtValue()});
        return "fill";
      })
      .Default([](Operation *) { return std::string(); });
}

/// The driver-facing role of an argument or result, from its attributes.
pb::Binding bindingOf(DictionaryAttr attrs, bool isResult) {
  pb::Binding b;
  auto str = [&](StringRef name) {
    auto a = attrs ? attrs.getAs<StringAttr>(name) : StringAttr();
    return a ? a.str() : std::string();
  };
  if (attrs)
    if (auto split = attrs.getAs<IntegerAttr>(kSplitDimAttr)) {
      b.set_split_dim(split.getInt());
      if (auto blocks = attrs.getAs<IntegerAttr>(kSplitBlocksAttr))
        b.set_split_blocks(blocks.getInt());
      if (auto granule = attrs.getAs<IntegerAttr>(kSplitGranuleAttr))
        b.set_split_granule(granule.getInt());
    }
  if (!attrs) {
    b.set_role(isResult ? pb::Binding::OUTPUT : pb::Binding::INPUT);
  } else if (attrs.get(kLossAttr)) {
    b.set_role(pb::Binding::LOSS);
    b.set_name("loss");
  } else if (attrs.get(kStepAttr)) {
    b.set_role(pb::Binding::STEP);
    b.set_name("step");
  } else if (auto state = attrs.getAs<ArrayAttr>(kOptimizerStateAttr)) {
    b.set_role(pb::Binding::OPTIMIZER_STATE);
    if (state.size() == 2) {
      b.set_name(cast<StringAttr>(state[0]).str());
      b.set_slot(cast<StringAttr>(state[1]).str());
    }
  } else if (attrs.get(kGradientAttr)) {
    b.set_role(pb::Binding::GRADIENT);
    b.set_name(str(kGradientAttr));
  } else if (attrs.get(kParameterAttr)) {
    b.set_role(pb::Binding::PARAMETER);
    b.set_name(str(kParameterAttr));
  } else if (attrs.get(kBufferAttr)) {
    b.set_role(pb::Binding::BUFFER);
    b.set_name(str(kBufferAttr));
  } else if (attrs.get(kInputAttr)) {
    b.set_role(pb::Binding::INPUT);
    b.set_name(str(kInputAttr));
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
    InstructionBuilder builder{inst};
    std::string kernel = lowerOp(&op, builder);
    if (kernel.empty())
      return op.emitOpError("has no kernel in the CPU runtime");
    if (!runtimeKernels().contains(kernel))
      return op.emitOpError("lowers to kernel '")
             << kernel << "', which the runtime does not list";
    inst.set_kernel(kernel);
    inst.set_location(locationString(op.getLoc()));
    if (auto phase = op.getAttrOfType<StringAttr>(kPhaseAttr))
      inst.set_phase(phase.str());
    if (auto reason = op.getAttrOfType<StringAttr>(kReasonAttr))
      inst.set_reason(reason.str());
    inst.set_megatron(op.hasAttr(kMegatronAttr));
    // Optional operands that are absent are encoded as -1 (kernels.def).
    auto appendOperand = [&](Value v) {
      inst.add_operands(v ? ids.lookup(v) : -1);
    };
    if (auto ln = dyn_cast<LayerNormOp>(op)) {
      for (Value v : {ln.getInput(), ln.getScale(), ln.getBias()})
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
      FailureOr<int32_t> id = addValue(result, pb::Value::ARENA, offset, 0);
      if (failed(id))
        return failure();
      inst.add_results(*id);
    }
    *program.add_instructions() = std::move(inst);
  }
  return success();
}
