//===- communicator.cpp - Mesh geometry and the one-rank communicator -----===//

#include "cleave/runtime/comm.h"

#include <cstdlib>
#include <cstring>

namespace cleave::rt {

const char *reductionName(Reduction reduction) {
  switch (reduction) {
  case Reduction::Sum:
    return "sum";
  case Reduction::Max:
    return "max";
  case Reduction::Min:
    return "min";
  }
  return "?";
}

static std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

Communicator::Communicator(std::vector<int64_t> meshShape)
    : meshShape_(std::move(meshShape)) {}

Communicator::~Communicator() = default;

std::vector<int64_t> Communicator::coordinates() const {
  std::vector<int64_t> coords(meshShape_.size());
  int64_t rest = rank();
  for (int64_t d = static_cast<int64_t>(meshShape_.size()) - 1; d >= 0; --d) {
    coords[d] = rest % meshShape_[d];
    rest /= meshShape_[d];
  }
  return coords;
}

Status Communicator::checkAxes(const std::vector<int64_t> &axes) const {
  int64_t rank = static_cast<int64_t>(meshShape_.size());
  std::vector<bool> seen(meshShape_.size(), false);
  for (int64_t a : axes) {
    if (a < 0 || a >= rank)
      return Status::error("mesh axis " + std::to_string(a) +
                           " is out of range for a mesh of shape " +
                           shapeString(meshShape_));
    if (seen[a])
      return Status::error("mesh axis " + std::to_string(a) + " repeats in " +
                           shapeString(axes));
    seen[a] = true;
  }
  return Status::ok();
}

int64_t Communicator::groupSize(const std::vector<int64_t> &axes) const {
  int64_t n = 1;
  for (int64_t a : axes)
    n *= meshShape_[a];
  return n;
}

int64_t Communicator::groupRank(const std::vector<int64_t> &axes) const {
  std::vector<int64_t> coords = coordinates();
  int64_t r = 0;
  for (int64_t a : axes)
    r = r * meshShape_[a] + coords[a];
  return r;
}

std::vector<int>
Communicator::groupMembers(const std::vector<int64_t> &axes) const {
  std::vector<int64_t> coords = coordinates();
  int64_t n = groupSize(axes);
  std::vector<int> members;
  members.reserve(n);
  for (int64_t k = 0; k < n; ++k) {
    int64_t rest = k;
    for (int64_t i = static_cast<int64_t>(axes.size()) - 1; i >= 0; --i) {
      coords[axes[i]] = rest % meshShape_[axes[i]];
      rest /= meshShape_[axes[i]];
    }
    int64_t r = 0;
    for (size_t d = 0; d < meshShape_.size(); ++d)
      r = r * meshShape_[d] + coords[d];
    members.push_back(static_cast<int>(r));
  }
  return members;
}

Status Communicator::checkReduction(const char *what, DType dtype,
                                    Reduction reduction, int64_t count) const {
  if (count < 0)
    return Status::error(std::string(what) + ": negative element count " +
                         std::to_string(count));
  if (dtype == DType::Bool && reduction == Reduction::Sum)
    return Status::error(std::string(what) +
                         ": a sum of bool is not supported (use max or min)");
  switch (dtype) {
  case DType::F32:
  case DType::I32:
  case DType::I64:
  case DType::Bool:
  case DType::F16:
  case DType::BF16:
    return Status::ok();
  default:
    return Status::error(std::string(what) + ": cannot reduce " +
                         dtypeName(dtype) +
                         " (f32, i32, i64, bool, f16, bf16)");
  }
}

namespace {

/// Every group has one member: collectives are copies.
class SingleProcessCommunicator final : public Communicator {
public:
  explicit SingleProcessCommunicator(std::vector<int64_t> meshShape)
      : Communicator(std::move(meshShape)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  double timeoutSeconds() const override { return timeout_; }
  void setTimeoutSeconds(double seconds) override { timeout_ = seconds; }

  Status allReduce(void *buf, int64_t count, DType dtype, Reduction reduction,
                   const std::vector<int64_t> &axes) override {
    if (Status s = checkReduction("all_reduce", dtype, reduction, count); !s)
      return s;
    return check("all_reduce", axes);
  }
  Status allGather(const void *in, void *out, int64_t bytesPerRank,
                   const std::vector<int64_t> &axes) override {
    if (Status s = check("all_gather", axes); !s)
      return s;
    if (bytesPerRank < 0)
      return Status::error("all_gather: negative size " +
                           std::to_string(bytesPerRank));
    if (bytesPerRank > 0 && in != out)
      std::memmove(out, in, static_cast<size_t>(bytesPerRank));
    return Status::ok();
  }
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       DType dtype, const std::vector<int64_t> &axes) override {
    if (Status s = checkReduction("reduce_scatter", dtype, Reduction::Sum,
                                  countPerRank);
        !s)
      return s;
    if (Status s = check("reduce_scatter", axes); !s)
      return s;
    size_t bytes = static_cast<size_t>(countPerRank) * dtypeSize(dtype);
    if (bytes > 0 && in != out)
      std::memmove(out, in, bytes);
    return Status::ok();
  }
  Status allToAll(const void *in, void *out, int64_t bytesPerPeer,
                  const std::vector<int64_t> &axes) override {
    if (Status s = check("all_to_all", axes); !s)
      return s;
    if (bytesPerPeer < 0)
      return Status::error("all_to_all: negative size " +
                           std::to_string(bytesPerPeer));
    if (bytesPerPeer > 0 && in != out)
      std::memmove(out, in, static_cast<size_t>(bytesPerPeer));
    return Status::ok();
  }
  Status broadcast(void *buf, int64_t bytes, int root,
                   const std::vector<int64_t> &axes) override {
    if (Status s = check("broadcast", axes); !s)
      return s;
    if (root != 0)
      return Status::error("broadcast: root " + std::to_string(root) +
                           " is out of range for a group of 1 rank");
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }

private:
  Status check(const char *what, const std::vector<int64_t> &axes) const {
    if (Status s = checkAxes(axes); !s)
      return Status::error(std::string(what) + ": " + s.message());
    return Status::ok();
  }

  double timeout_ = 0;
};

} // namespace

std::unique_ptr<Communicator>
makeSingleProcessCommunicator(std::vector<int64_t> meshShape) {
  int64_t n = 1;
  for (int64_t d : meshShape) {
    if (d <= 0)
      return nullptr;
    n *= d;
  }
  if (n != 1)
    return nullptr;
  return std::make_unique<SingleProcessCommunicator>(std::move(meshShape));
}

} // namespace cleave::rt
