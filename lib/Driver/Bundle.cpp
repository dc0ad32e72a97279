//===- Bundle.cpp - Writing bundles, exporting trained models -------------===//

#include "cleave/Driver/Bundle.h"

#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Evaluate/ConstantEvaluator.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Sharding/Sharding.h"
#include "cleave/runtime/checkpoint.h"
#include "cleave/runtime/files.h"
#include "cleave/runtime/safetensors.h"
#include "cleave/runtime/store.h"
#include "cleave/runtime/trainer.h"
#include "plan/plan.pb.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <unistd.h>

using namespace mlir;
namespace pb = ::cleave::plan;
namespace rt = ::cleave::rt;

namespace cleave::driver {

namespace {

pb::DType planDType(rt::DType d) {
  switch (d) {
  case rt::DType::F32:
    return pb::F32;
  case rt::DType::I64:
    return pb::I64;
  case rt::DType::I32:
    return pb::I32;
  case rt::DType::Bool:
    return pb::BOOL;
  case rt::DType::BF16: // mixed precision's frozen weights
    return pb::BF16;
  case rt::DType::F16:
    return pb::F16;
  case rt::DType::I8: // weight-only quantized weights
    return pb::I8;
  default:
    return pb::F32;
  }
}

int onnxDType(rt::DType d) {
  switch (d) {
  case rt::DType::F32:
    return onnx::TensorProto::FLOAT;
  case rt::DType::I64:
    return onnx::TensorProto::INT64;
  case rt::DType::I32:
    return onnx::TensorProto::INT32;
  case rt::DType::Bool:
    return onnx::TensorProto::BOOL;
  case rt::DType::I8:
    return onnx::TensorProto::INT8;
  default:
    break;
  }
  return onnx::TensorProto::FLOAT;
}

/// \p model's graph with the data of the tensors in \p trained dropped (they
/// live in the weight files), everything else kept.
onnx::ModelProto stripTrained(const mlir::cleave::OnnxModel &source,
                              const WeightSource &weights,
                              const llvm::StringMap<bool> &trained,
                              rt::Status &status) {
  const onnx::ModelProto &model = source.proto();
  onnx::ModelProto out;
  out.set_ir_version(model.ir_version());
  *out.mutable_opset_import() = model.opset_import();
  out.set_producer_name(model.producer_name());
  out.set_producer_version(model.producer_version());
  out.set_domain(model.domain());
  out.set_model_version(model.model_version());
  out.set_doc_string(model.doc_string());
  *out.mutable_metadata_props() = model.metadata_props();
  *out.mutable_training_info() = model.training_info();
  *out.mutable_functions() = model.functions();
  const onnx::GraphProto &g = model.graph();
  onnx::GraphProto *graph = out.mutable_graph();
  graph->set_name(g.name());
  graph->set_doc_string(g.doc_string());
  *graph->mutable_node() = g.node();
  *graph->mutable_input() = g.input();
  *graph->mutable_output() = g.output();
  *graph->mutable_value_info() = g.value_info();
  *graph->mutable_sparse_initializer() = g.sparse_initializer();
  *graph->mutable_quantization_annotation() = g.quantization_annotation();
  for (const onnx::TensorProto &t : g.initializer()) {
    if (!trained.count(t.name())) {
      onnx::TensorProto *copy = graph->add_initializer();
      *copy = t;
      // External data is relative to the source model: the bundle's copy
      // carries the values inline.
      if (t.data_location() == onnx::TensorProto::EXTERNAL) {
        rt::HostTensor value;
        if (rt::Status s = weights.readFromModel(t.name(), &value); !s) {
          status = s;
          return out;
        }
        copy->clear_external_data();
        copy->set_data_location(onnx::TensorProto::DEFAULT);
        copy->set_raw_data(value.bytes.data(), value.bytes.size());
      }
      continue;
    }
    onnx::TensorProto *copy = graph->add_initializer();
    copy->set_name(t.name());
    copy->set_data_type(t.data_type());
    *copy->mutable_dims() = t.dims();
  }
  return out;
}

/// Moves directory \p tmp to \p target, replacing what is there last.
rt::Status swapIn(const std::string &tmp, const std::string &target) {
  namespace fs = llvm::sys::fs;
  std::string old = target + ".old-" + std::to_string(::getpid());
  if (rt::Status s = checkReplaceable(target); !s)
    return s;
  bool hadOld = fs::exists(target);
  if (hadOld)
    if (std::error_code ec = fs::rename(target, old))
      return rt::Status::error("cannot replace '" + target +
                               "': " + ec.message());
  if (std::error_code ec = fs::rename(tmp, target)) {
    if (hadOld)
      (void)fs::rename(old, target);
    return rt::Status::error("cannot write '" + target + "': " + ec.message());
  }
  if (hadOld)
    (void)fs::remove_directories(old);
  return rt::Status::ok();
}

} // namespace

/// Whether \p target may be replaced by a bundle: it does not exist, or
/// is an empty folder or a bundle (its plan file says so). A folder of the
/// user's own files is never deleted to make room.
rt::Status checkReplaceable(const std::string &target) {
  namespace fs = llvm::sys::fs;
  if (!fs::exists(target))
    return rt::Status::ok();
  if (!fs::is_directory(target))
    return rt::Status::error("'" + target +
                             "' exists and is not a bundle directory");
  llvm::SmallString<256> plan(target);
  llvm::sys::path::append(plan, rt::kBundlePlanFile);
  if (fs::is_regular_file(plan))
    return rt::Status::ok();
  std::error_code ec;
  fs::directory_iterator it(target, ec);
  if (ec)
    return rt::Status::error("cannot read '" + target + "': " + ec.message());
  if (it != fs::directory_iterator())
    return rt::Status::error(
        "'" + target +
        "' is a folder that is not a bundle and not empty: it is left as it "
        "is; name a new folder, an empty one or a previous bundle with -o");
  return rt::Status::ok();
}

rt::Status WeightSource::useSafetensors(const std::string &path) {
  weightsPath = path;
  if (llvm::StringRef(path).ends_with(".json"))
    return useIndex(path);
  files.emplace_back();
  if (rt::Status s = rt::SafetensorsFile::open(path, &files.back()); !s)
    return s;
  for (const rt::TensorInfo &t : files.back()->tensors())
    fileOf[t.name] = 0;
  return rt::Status::ok();
}

/// How deeply \p text nests arrays and objects (outside strings).
/// llvm::json parses and frees recursively: an index of a million '[' would
/// overflow the stack, so a deep one is refused before it is parsed.
static int jsonDepth(llvm::StringRef text) {
  int depth = 0, deepest = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

/// Hugging Face's sharded checkpoint: {"weight_map": {tensor: shard file}}.
/// The index may come from someone else: its shard names must be files
/// beside it, and each shard must hold what the index puts there.
rt::Status WeightSource::useIndex(const std::string &path) {
  std::string where = "--weights '" + path + "'";
  auto text = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!text)
    return rt::Status::error("cannot read " + where + ": " +
                             text.getError().message());
  constexpr int kMaxDepth = 16; // an index is two levels deep
  if (jsonDepth((*text)->getBuffer()) > kMaxDepth)
    return rt::Status::error(where + " nests deeper than a sharded "
                                     "checkpoint's index does");
  llvm::Expected<llvm::json::Value> doc =
      llvm::json::parse((*text)->getBuffer());
  if (!doc) {
    std::string why = llvm::toString(doc.takeError());
    return rt::Status::error(where + " is not JSON: " + why);
  }
  const llvm::json::Object *map = nullptr;
  if (const llvm::json::Object *root = doc->getAsObject())
    map = root->getObject("weight_map");
  if (!map)
    return rt::Status::error(where + " is not a sharded checkpoint's index "
                                     "(it has no weight_map object)");
  std::string dir = llvm::sys::path::parent_path(path).str();
  llvm::StringMap<size_t> opened;
  for (const auto &[tensor, value] : *map) {
    std::optional<llvm::StringRef> shard = value.getAsString();
    if (!shard)
      return rt::Status::error(where + ": the weight_map entry of '" +
                               tensor.str() + "' is not a file name");
    // Keyed by the resolved path: "a", "./a" and ".//a" are one shard,
    // opened once.
    std::string full;
    if (rt::Status s =
            rt::resolveStoredName(dir.empty() ? "." : dir, shard->str(), where,
                                  "the shard of '" + tensor.str() + "'", &full);
        !s)
      return s;
    llvm::SmallString<256> real;
    if (llvm::sys::fs::real_path(full, real))
      real = full;
    auto [it, fresh] = opened.try_emplace(real, files.size());
    if (fresh) {
      files.emplace_back();
      if (rt::Status s = rt::SafetensorsFile::open(full, &files.back()); !s)
        return s;
    }
    if (!files[it->second]->find(tensor.str()))
      return rt::Status::error(where + " puts '" + tensor.str() + "' in '" +
                               shard->str() + "', which does not hold it");
    fileOf[tensor] = it->second;
  }
  return rt::Status::ok();
}

rt::Status WeightSource::readFromModel(const std::string &name,
                                       rt::HostTensor *out) const {
  std::string error;
  FailureOr<mlir::cleave::TensorData> data =
      model.readInitializer(&ctx, name, error);
  if (failed(data))
    return rt::Status::error(error);
  out->dtype = mlir::cleave::runtimeDType(data->elementType);
  out->shape = data->shape;
  out->bytes = std::move(data->bytes); // no second copy of a large weight
  return rt::Status::ok();
}

std::optional<rt::DType>
WeightSource::storedDType(const std::string &name) const {
  auto where = fileOf.find(name);
  if (where == fileOf.end())
    return std::nullopt;
  return files[where->second]->find(name)->dtype;
}

rt::Status WeightSource::read(const std::string &name,
                              rt::HostTensor *out) const {
  std::string error;
  FailureOr<std::vector<int64_t>> dims = model.initializerShape(name, error);
  if (failed(dims))
    return rt::Status::error(error);
  if (!weightsPath.empty()) {
    auto where = fileOf.find(name);
    if (where == fileOf.end())
      return rt::Status::error("--weights '" + weightsPath +
                               "' has no tensor '" + name + "'");
    const rt::SafetensorsFile *file = files[where->second].get();
    const rt::TensorInfo *info = file->find(name);
    if (info->shape != *dims)
      return rt::Status::error("--weights '" + file->path() + "': tensor '" +
                               name + "' does not have the model's shape");
    // An int8 (weight-only quantized) weight is held as it is.
    if (model.initializerDataType(name) == onnx::TensorProto::INT8) {
      if (info->dtype != rt::DType::I8)
        return rt::Status::error(
            "--weights '" + file->path() + "': tensor '" + name + "' is " +
            rt::describeTensor(info->dtype, info->shape) +
            ", not the int8 tensor the model's quantized weight is");
      return file->read(*info, out);
    }
    // A checkpoint in its own float dtype (bf16, f16, f64) gives the f32
    // master weights.
    if (rt::Status s = file->read(*info, out); !s)
      return s;
    if (!rt::widenToF32(out))
      return rt::Status::error(
          "--weights '" + file->path() + "': tensor '" + name + "' is " +
          rt::describeTensor(info->dtype, info->shape) +
          (info->dtype == rt::DType::F64
               ? ", with values beyond float32's range"
               : ", not a float tensor the model's float32 weight can take"));
    return rt::Status::ok();
  }
  return readFromModel(name, out);
}

rt::Status WeightSource::read(const pb::TensorEntry &entry,
                              rt::HostTensor *out) const {
  if (entry.segment_of().empty())
    return read(entry.name(), out);
  rt::HostTensor whole;
  if (rt::Status s = read(entry.segment_of(), &whole); !s)
    return s;
  int64_t start = entry.segment_offset();
  *out = rt::takeRanges(
      whole, entry.segment_dim(),
      {{start, start + entry.type().shape(entry.segment_dim())}});
  return rt::Status::ok();
}

rt::Status writeBundle(const mlir::cleave::OnnxModel &model,
                       const WeightSource &weights, func::FuncOp main,
                       pb::Plan &plan, const std::string &bundle,
                       bool planOnly) {
  namespace fs = llvm::sys::fs;
  if (rt::Status s = checkReplaceable(bundle); !s)
    return s;
  std::string tmp = bundle + ".tmp-" + std::to_string(::getpid());
  (void)fs::remove_directories(tmp);
  if (std::error_code ec = fs::create_directories(tmp, true, fs::all_all))
    return rt::Status::error("cannot create '" + tmp + "': " + ec.message());
  auto cleanup =
      llvm::make_scope_exit([&] { (void)fs::remove_directories(tmp); });

  // The table: global shapes, layouts as the partitioner chose them.
  llvm::StringMap<bool> trained;
  std::string error;
  for (BlockArgument arg : main.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto param =
        main.getArgAttrOfType<StringAttr>(i, mlir::cleave::kParameterAttr);
    auto buffer =
        main.getArgAttrOfType<StringAttr>(i, mlir::cleave::kBufferAttr);
    StringAttr name = param ? param : buffer;
    if (!name)
      continue;
    // A segment's values are its piece of the model's tensor.
    auto segmentOf =
        main.getArgAttrOfType<StringAttr>(i, mlir::cleave::kSegmentOfAttr);
    auto segment =
        main.getArgAttrOfType<DenseI64ArrayAttr>(i, mlir::cleave::kSegmentAttr);
    std::string source = segmentOf ? segmentOf.str() : name.str();
    FailureOr<std::vector<int64_t>> dims =
        model.initializerShape(source, error);
    if (failed(dims))
      return rt::Status::error(error);
    pb::TensorEntry *entry = plan.add_tensors();
    if (segmentOf) {
      int64_t dim = segment[0], offset = segment[1], size = segment[2];
      if (dim < 0 || dim >= int64_t(dims->size()) || offset < 0 || size < 0 ||
          offset + size > (*dims)[dim])
        return rt::Status::error("'" + name.str() + "' is not a piece of '" +
                                 source + "'");
      (*dims)[dim] = size;
      entry->set_segment_of(source);
      entry->set_segment_dim(dim);
      entry->set_segment_offset(offset);
    }
    entry->set_name(name.str());
    entry->set_key(name.str());
    entry->set_role(mlir::cleave::isTrainedParameter(main, i)
                        ? pb::Binding::PARAMETER
                        : pb::Binding::BUFFER);
    entry->mutable_type()->set_dtype(planDType(mlir::cleave::runtimeDType(
        cast<RankedTensorType>(arg.getType()).getElementType())));
    for (int64_t d : *dims)
      entry->mutable_type()->add_shape(d);
    if (auto layout = main.getArgAttrOfType<mlir::cleave::LayoutAttr>(
            i, mlir::cleave::kLayoutAttr))
      mlir::cleave::recordLayout(layout, *entry);
    trained[source] = true;
  }

  if (!planOnly) {
    // One file per tensor part (a tp rank's; dp replicas share it): every
    // tensor read once, its chunks written.
    int64_t parts = rt::meshOf(plan).tensorParts();
    std::unique_ptr<rt::StoreWriter> writer;
    if (rt::Status s = rt::StoreWriter::create(
            tmp, rt::kBundleWeightsDir, parts, plan.mutable_tensors(), &writer);
        !s)
      return s;
    for (const pb::TensorEntry &entry : plan.tensors()) {
      rt::HostTensor value;
      if (rt::Status s = weights.read(entry, &value); !s)
        return s;
      // A weight that trains holding inf or NaN (a mask too large for the
      // importer's scan, a corrupt checkpoint) would train into NaN.
      if (entry.role() == pb::Binding::PARAMETER &&
          value.dtype == rt::DType::F32 &&
          !std::all_of(value.data<float>(),
                       value.data<float>() + value.numElements(),
                       [](float f) { return std::isfinite(f); }))
        return rt::Status::error(
            "weight '" + entry.name() +
            "' holds a value that is not finite (inf or NaN), so it cannot "
            "train: --freeze it if it is a mask or constant, else fix the "
            "weights");
      // Mixed precision holds a frozen weight in bf16: rounded once here.
      if (rt::DType held = rt::fromPlan(entry.type().dtype());
          held != value.dtype)
        rt::narrowFromF32(&value, held);
      if (rt::Status s = writer->add(value); !s)
        return s;
    }
    if (rt::Status s = writer->finish(plan.mutable_files()); !s)
      return s;
    // The graph, for export.
    std::string bytes;
    rt::Status stripped = rt::Status::ok();
    onnx::ModelProto graph = stripTrained(model, weights, trained, stripped);
    if (!stripped)
      return stripped;
    if (!graph.SerializeToString(&bytes))
      return rt::Status::error("cannot encode the model graph");
    llvm::SmallString<256> path(tmp);
    llvm::sys::path::append(path, rt::kBundleModelFile);
    if (rt::Status s = rt::writeFileAtomic(std::string(path), bytes); !s)
      return s;
    pb::FileDigest *d = plan.add_files();
    d->set_path(rt::kBundleModelFile);
    d->set_size(bytes.size());
    d->set_crc32(rt::crc32Update(0, bytes.data(), bytes.size()));
    plan.set_model_file(rt::kBundleModelFile);
  }

  std::string bytes;
  if (!plan.SerializeToString(&bytes))
    return rt::Status::error("cannot encode the plan");
  llvm::SmallString<256> planPath(tmp);
  llvm::sys::path::append(planPath, rt::kBundlePlanFile);
  if (rt::Status s = rt::writeFileAtomic(std::string(planPath), bytes); !s)
    return s;
  if (rt::Status s = swapIn(tmp, bundle); !s)
    return s;
  cleanup.release();
  return rt::Status::ok();
}

namespace {
/// What `cleave export` reads: a bundle (its initial weights) or a
/// checkpoint, its model tensors and the graph they belong in.
struct ExportSource {
  std::string dir, what, modelFile;
  google::protobuf::RepeatedPtrField<pb::TensorEntry> tensors;
  google::protobuf::RepeatedPtrField<pb::FileDigest> files;
  std::vector<rt::ModelTensor> modelTensors;
};

rt::Status openExportSource(const std::string &source, ExportSource *src) {
  llvm::SmallString<256> planPath(source);
  llvm::sys::path::append(planPath, rt::kBundlePlanFile);
  if (llvm::sys::fs::exists(planPath)) {
    pb::Plan plan;
    if (rt::Status s = rt::loadBundlePlan(source, &plan); !s)
      return s;
    src->dir = source;
    src->what = "bundle '" + source + "'";
    src->tensors = plan.tensors();
    src->files = plan.files();
    src->modelFile = plan.model_file();
  } else {
    pb::Checkpoint ckpt;
    if (rt::Status s = rt::findCheckpoint(source, &src->dir, &ckpt); !s)
      return rt::Status::error(
          "'" + source +
          "' is neither a bundle nor a checkpoint: " + s.message());
    src->what = "checkpoint '" + src->dir + "'";
    for (const pb::TensorEntry &e : ckpt.tensors())
      if (e.role() != pb::Binding::OPTIMIZER_STATE)
        *src->tensors.Add() = e;
    src->files = ckpt.files();
    src->modelFile = ckpt.model_file();
  }
  // The model's tensors, segments put back together.
  if (rt::Status s = rt::modelTensors(src->tensors, &src->modelTensors); !s)
    return rt::Status::error(src->what + ": " + s.message());
  return rt::Status::ok();
}

/// One model tensor, whole: its segments read and joined.
rt::Status readModelTensor(rt::StoreReader &reader, const rt::ModelTensor &t,
                           rt::HostTensor *out) {
  std::vector<rt::HostTensor> parts(t.entries.size());
  for (size_t i = 0; i < parts.size(); ++i)
    if (rt::Status s = reader.readGlobal(*t.entries[i], &parts[i]); !s)
      return s;
  *out = rt::joinSegments(t, std::move(parts));
  return rt::Status::ok();
}

/// A weight-only int8 weight (kept int8 wherever it is written).
bool heldInt8(const rt::ModelTensor &t) {
  return rt::fromPlan(t.entries.front()->type().dtype()) == rt::DType::I8;
}

rt::Status exportSafetensors(const ExportSource &src, rt::StoreReader &reader,
                             const std::string &output) {
  std::vector<rt::TensorInfo> infos;
  for (const rt::ModelTensor &t : src.modelTensors) {
    rt::TensorInfo info;
    info.name = t.name;
    // An int8 weight is written as it is; a weight held in bf16 or f16
    // goes back as the graph's float.
    info.dtype = heldInt8(t) ? rt::DType::I8 : rt::DType::F32;
    info.shape = t.shape;
    infos.push_back(info);
  }
  std::unique_ptr<rt::SafetensorsWriter> writer;
  if (rt::Status s = rt::SafetensorsWriter::create(output, infos,
                                                   {{"format", "pt"}}, &writer);
      !s)
    return s;
  for (const rt::ModelTensor &t : src.modelTensors) {
    rt::HostTensor value;
    if (rt::Status s = readModelTensor(reader, t, &value); !s)
      return s;
    if (!heldInt8(t))
      rt::widenToF32(&value);
    if (rt::Status s = writer->write(value.bytes.data(), value.bytes.size());
        !s)
      return s;
  }
  return writer->finish(nullptr, nullptr);
}

/// The source's ONNX graph, checked against its recorded digest like the
/// weights.
rt::Status readExportGraph(const ExportSource &src, onnx::ModelProto *model) {
  if (src.modelFile.empty())
    return rt::Status::error(src.what +
                             " carries no model graph to export into");
  std::string modelPath;
  if (rt::Status s = rt::resolveStoredName(src.dir, src.modelFile, src.what,
                                           "the model copy", &modelPath);
      !s)
    return s;
  const pb::FileDigest *digest = nullptr;
  for (const pb::FileDigest &d : src.files)
    if (d.path() == src.modelFile)
      digest = &d;
  uint64_t size;
  uint32_t crc;
  if (rt::Status s = rt::fileDigest(std::string(modelPath), &size, &crc); !s)
    return rt::Status::error(src.what + ": " + s.message());
  if (!digest || digest->size() != size || digest->crc32() != crc)
    return rt::Status::error(src.what + ": '" + std::string(modelPath) +
                             "' does not match its recorded checksum: it is "
                             "corrupt or was changed");
  std::ifstream in(std::string(modelPath), std::ios::binary);
  if (!in || !model->ParseFromIstream(&in))
    return rt::Status::error(src.what + ": cannot read '" +
                             std::string(modelPath) + "'");
  return rt::Status::ok();
}

/// Points \p t at \p length bytes at \p offset of the external data file.
void setExternalData(onnx::TensorProto &t, const std::string &dataName,
                     int64_t offset, size_t length) {
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair<std::string, std::string>{"location", dataName},
                      {"offset", std::to_string(offset)},
                      {"length", std::to_string(length)}}) {
    auto *entry = t.add_external_data();
    entry->set_key(k);
    entry->set_value(v);
  }
}

rt::Status exportOnnx(const ExportSource &src, rt::StoreReader &reader,
                      const std::string &output) {
  namespace fs = llvm::sys::fs;
  onnx::ModelProto model;
  if (rt::Status s = readExportGraph(src, &model); !s)
    return s;
  llvm::StringMap<const rt::ModelTensor *> byName;
  for (const rt::ModelTensor &t : src.modelTensors)
    byName[t.name] = &t;
  // Up to 1 GiB of weights inline; beyond, ONNX's external data (protobuf
  // messages stop at 2 GiB), written one tensor at a time.
  int64_t total = 0;
  for (const rt::ModelTensor &t : src.modelTensors) {
    int64_t n = 4;
    for (int64_t d : t.shape)
      n *= d;
    total += n;
  }
  bool external = total > (int64_t(1) << 30);
  std::string dataName =
      std::string(llvm::sys::path::filename(output)) + ".data";
  std::string tmp = output + ".tmp-" + std::to_string(::getpid());
  std::string dataTmp = tmp + ".data";
  auto cleanup = llvm::make_scope_exit([&] {
    (void)fs::remove(tmp);
    (void)fs::remove(dataTmp);
  });
  std::ofstream data;
  if (external) {
    data.open(dataTmp, std::ios::binary);
    if (!data)
      return rt::Status::error("cannot write '" + dataTmp + "'");
  }
  int64_t offset = 0;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    auto it = byName.find(t.name());
    if (it == byName.end())
      continue;
    rt::HostTensor value;
    if (rt::Status s = readModelTensor(reader, *it->second, &value); !s)
      return s;
    // A frozen weight held in bf16 goes back as the graph's float; an int8
    // one stays int8.
    if (value.dtype != rt::DType::I8)
      rt::widenToF32(&value);
    t.set_data_type(onnxDType(value.dtype));
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_external_data();
    byName.erase(it);
    if (!external) {
      t.set_raw_data(value.bytes.data(), value.bytes.size());
      continue;
    }
    data.write(reinterpret_cast<const char *>(value.bytes.data()),
               value.bytes.size());
    setExternalData(t, dataName, offset, value.bytes.size());
    offset += value.bytes.size();
  }
  if (!byName.empty())
    return rt::Status::error(src.what +
                             ": the model graph has no initializer '" +
                             byName.begin()->first().str() + "'");
  if (external) {
    data.close();
    if (!data)
      return rt::Status::error("cannot write '" + dataTmp + "'");
  }
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out || !model.SerializeToOstream(&out) || !out.flush())
      return rt::Status::error("cannot write '" + tmp + "'");
  }
  if (external)
    if (std::error_code ec = fs::rename(dataTmp, output + ".data"))
      return rt::Status::error("cannot write '" + output +
                               ".data': " + ec.message());
  if (std::error_code ec = fs::rename(tmp, output))
    return rt::Status::error("cannot write '" + output + "': " + ec.message());
  cleanup.release();
  return rt::Status::ok();
}
} // namespace

rt::Status exportModel(const std::string &source, const std::string &output,
                       bool trainableOnly) {
  ExportSource src;
  if (rt::Status s = openExportSource(source, &src); !s)
    return s;
  rt::StoreReader reader(src.dir, src.what, src.files);
  llvm::StringRef ext = llvm::sys::path::extension(output);
  if (trainableOnly) {
    // An ONNX model needs every weight; the adapters alone are a
    // safetensors file, as PEFT saves them.
    if (ext != ".safetensors")
      return rt::Status::error("--trainable-only writes the tensors that "
                               "train alone: name the output .safetensors");
    llvm::erase_if(src.modelTensors, [](const rt::ModelTensor &t) {
      return t.entries.front()->role() != pb::Binding::PARAMETER;
    });
    if (src.modelTensors.empty())
      return rt::Status::error(src.what + " has no tensor that trains");
  }
  if (ext == ".safetensors")
    return exportSafetensors(src, reader, output);
  if (ext != ".onnx")
    return rt::Status::error("cannot tell the format of '" + output +
                             "': name it .onnx or .safetensors");
  return exportOnnx(src, reader, output);
}

} // namespace cleave::driver
