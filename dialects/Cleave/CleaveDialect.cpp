//===- CleaveDialect.cpp - The cleave dialect -------------------*- C++ -*-===//

#include "Cleave/CleaveDialect.h"
#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::cleave;

#include "Cleave/CleaveDialect.cpp.inc"
#include "Cleave/CleaveEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "Cleave/CleaveAttrs.cpp.inc"

void CleaveDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Cleave/CleaveOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "Cleave/CleaveAttrs.cpp.inc"
      >();
}

Operation *CleaveDialect::materializeConstant(OpBuilder &builder,
                                              Attribute value, Type type,
                                              Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

//===----------------------------------------------------------------------===//
// The discardable cleave.* attributes
//===----------------------------------------------------------------------===//

namespace {
enum class AttrValue { String, Unit, Int, IntArray, StringPair, Layout };
enum Where : unsigned { OnOp = 1, OnArg = 2, OnResult = 4 };

struct AttrSpec {
  llvm::StringLiteral name;
  AttrValue value;
  unsigned where;
};

// Every cleave.* attribute, what it holds and where it may stand.
constexpr AttrSpec kAttrSpecs[] = {
    {kInputAttr, AttrValue::String, OnArg},
    {kMicroBatchAttr, AttrValue::Int, OnArg},
    {kParameterAttr, AttrValue::String, OnArg | OnResult},
    {kFrozenAttr, AttrValue::Unit, OnArg},
    {kOutputAttr, AttrValue::String, OnResult},
    {kBufferAttr, AttrValue::String, OnArg | OnResult},
    {kStepAttr, AttrValue::Unit, OnArg},
    {kLossAttr, AttrValue::Unit, OnResult},
    {kHyperparameterAttr, AttrValue::String, OnArg},
    {kMetricAttr, AttrValue::String, OnResult},
    {kGradientAttr, AttrValue::String, OnResult},
    {kOptimizerStateAttr, AttrValue::StringPair, OnArg | OnResult},
    {kMeshAttr, AttrValue::IntArray, OnOp},
    {kMeshAxesAttr, AttrValue::String, OnOp},
    {kLayoutAttr, AttrValue::Layout, OnArg | OnResult},
    {kLayoutsForAttr, AttrValue::Int, OnOp},
    {kLayoutWhyAttr, AttrValue::String, OnArg},
    {kPartitionHowAttr, AttrValue::String, OnOp},
    {kSegmentOfAttr, AttrValue::String, OnArg},
    {kSegmentAttr, AttrValue::IntArray, OnArg},
    {kPhaseAttr, AttrValue::String, OnOp},
    {kReasonAttr, AttrValue::String, OnOp},
    {kMegatronAttr, AttrValue::Unit, OnOp},
    {kCarriesAttr, AttrValue::String, OnOp},
    {kOriginAttr, AttrValue::String, OnOp},
    {kBucketAttr, AttrValue::Int, OnOp},
    {kShardAxesAttr, AttrValue::IntArray, OnOp},
    {kShardSizeAttr, AttrValue::Int, OnOp},
    {kNoGradAttr, AttrValue::Unit, OnOp},
    {kOffsetsAttr, AttrValue::IntArray, OnOp},
    {kArenaBytesAttr, AttrValue::Int, OnOp},
    {kOnnxOpsetAttr, AttrValue::Int, OnOp},
    {kShardingRuleAttr, AttrValue::String, OnOp},
    {kPrecisionAttr, AttrValue::String, OnOp},
    {kForwardAttr, AttrValue::Unit, OnOp},
    {kRecomputedAttr, AttrValue::Unit, OnOp},
};

const char *describe(AttrValue v) {
  switch (v) {
  case AttrValue::String:
    return "a string";
  case AttrValue::Unit:
    return "a unit attribute";
  case AttrValue::Int:
    return "an integer";
  case AttrValue::IntArray:
    return "an array<i64>";
  case AttrValue::StringPair:
    return "an array of two strings";
  case AttrValue::Layout:
    return "a #cleave.layout";
  }
  return "";
}

bool holds(Attribute a, AttrValue v) {
  switch (v) {
  case AttrValue::String:
    return isa<StringAttr>(a);
  case AttrValue::Unit:
    return isa<UnitAttr>(a);
  case AttrValue::Int:
    return isa<IntegerAttr>(a);
  case AttrValue::IntArray:
    return isa<DenseI64ArrayAttr>(a);
  case AttrValue::StringPair: {
    auto array = dyn_cast<ArrayAttr>(a);
    return array && array.size() == 2 &&
           llvm::all_of(array, [](Attribute e) { return isa<StringAttr>(e); });
  }
  case AttrValue::Layout:
    return isa<LayoutAttr>(a);
  }
  return false;
}

/// Checks \p attr against its spec, reporting through \p error; \p type is
/// the argument's or result's type where it stands on one.
LogicalResult verifyCleaveAttr(NamedAttribute attr, Where where,
                               llvm::function_ref<InFlightDiagnostic()> error,
                               Type type = {}) {
  StringRef name = attr.getName().getValue();
  const AttrSpec *spec = llvm::find_if(
      kAttrSpecs, [&](const AttrSpec &s) { return s.name == name; });
  if (spec == std::end(kAttrSpecs))
    return error() << "has unknown attribute '" << name
                   << "' (the cleave.* attributes are listed in "
                      "CleaveAttrNames.h)";
  if (!(spec->where & where))
    return error() << "has '" << name << "' where it cannot stand ("
                   << (where == OnOp    ? "on an op"
                       : where == OnArg ? "on an argument"
                                        : "on a result")
                   << ")";
  if (!holds(attr.getValue(), spec->value))
    return error() << "'" << name << "' must be " << describe(spec->value)
                   << ", got " << attr.getValue();
  if (auto layout = dyn_cast<LayoutAttr>(attr.getValue())) {
    auto tensor = dyn_cast_or_null<RankedTensorType>(type);
    if (!tensor)
      return error() << "has a " << name << " but is not a ranked tensor";
    return layout.verifyRank(tensor.getRank(), error);
  }
  return success();
}

/// The type of argument or result \p index of \p op, a function.
Type functionType(Operation *op, unsigned index, bool result) {
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return {};
  ArrayRef<Type> types =
      result ? function.getResultTypes() : function.getArgumentTypes();
  return index < types.size() ? types[index] : Type();
}
} // namespace

//===----------------------------------------------------------------------===//
// LayoutAttr
//===----------------------------------------------------------------------===//

LogicalResult
LayoutAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                   int64_t dim, int64_t blocks, int64_t granule, int64_t dpDim,
                   int64_t parts, int64_t copies) {
  if (parts < 0 || copies < 1)
    return emitError() << "#cleave.layout parts must be at least 0 and "
                          "copies at least 1, got parts = "
                       << parts << ", copies = " << copies;
  if (dim < 0 && (parts > 0 || copies > 1))
    return emitError() << "#cleave.layout parts and copies cut the split "
                          "dimension: they need dim";
  if (dim < -1 || dpDim < -1)
    return emitError() << "#cleave.layout dimensions must be -1 (whole) or "
                          "a dimension, got dim = "
                       << dim << ", dp_dim = " << dpDim;
  if (blocks < 1 || granule < 1)
    return emitError() << "#cleave.layout blocks and granule must be at "
                          "least 1, got blocks = "
                       << blocks << ", granule = " << granule;
  if (dim < 0 && (blocks > 1 || granule > 1))
    return emitError() << "#cleave.layout blocks and granule cut the split "
                          "dimension: they need dim";
  if (dim < 0 && dpDim < 0)
    return emitError() << "#cleave.layout splits nothing (a whole tensor "
                          "carries no layout)";
  return success();
}

LogicalResult LayoutAttr::verifyRank(
    int64_t rank, llvm::function_ref<InFlightDiagnostic()> emitError) const {
  for (auto [what, d] : {std::pair<const char *, int64_t>{"dim", getDim()},
                         {"dp_dim", getDpDim()}})
    if (d >= rank)
      return emitError() << "has a #cleave.layout with " << what << " = " << d
                         << " on a tensor of rank " << rank;
  return success();
}

LogicalResult CleaveDialect::verifyOperationAttribute(Operation *op,
                                                      NamedAttribute attr) {
  return verifyCleaveAttr(attr, OnOp, [&] { return op->emitOpError(); });
}

LogicalResult CleaveDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                      unsigned argIndex,
                                                      NamedAttribute attr) {
  auto error = [&] {
    return op->emitOpError() << "argument " << argIndex << " ";
  };
  if (failed(verifyCleaveAttr(attr, OnArg, error,
                              functionType(op, argIndex, /*result=*/false))))
    return failure();
  // Only a weight can be frozen: a frozen input or buffer means nothing.
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (attr.getName() == kFrozenAttr && function &&
      !function.getArgAttr(argIndex, kParameterAttr))
    return error() << "has '" << kFrozenAttr << "' but no '" << kParameterAttr
                   << "'";
  return success();
}

LogicalResult CleaveDialect::verifyRegionResultAttribute(Operation *op,
                                                         unsigned,
                                                         unsigned resultIndex,
                                                         NamedAttribute attr) {
  return verifyCleaveAttr(
      attr, OnResult,
      [&] { return op->emitOpError() << "result " << resultIndex << " "; },
      functionType(op, resultIndex, /*result=*/true));
}
