//===- axis_view.cpp - One axis of a mesh as a communicator of its own ----===//
//
// The trainer keeps tensors split over the tp axis only (or the two axes tp
// is factored into); on a dp x tp mesh it loads, gathers and checkpoints
// them through the tp group of its rank, seen as a one-axis mesh, with the
// code that serves a tp-only mesh.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/comm.h"

namespace cleave::rt {

namespace {

class AxisView final : public Communicator {
public:
  AxisView(Communicator &parent, std::vector<int64_t> axes)
      : Communicator({parent.groupSize(axes)}), parent_(parent),
        axes_(std::move(axes)) {}

  int rank() const override {
    return static_cast<int>(parent_.groupRank(axes_));
  }
  int size() const override {
    return static_cast<int>(parent_.groupSize(axes_));
  }
  double timeoutSeconds() const override { return parent_.timeoutSeconds(); }
  void setTimeoutSeconds(double s) override { parent_.setTimeoutSeconds(s); }

  Status allReduce(void *buf, int64_t count, DType dtype, Reduction reduction,
                   const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes); !s)
      return s;
    return parent_.allReduce(buf, count, dtype, reduction, map(axes));
  }
  Status allGather(const void *in, void *out, int64_t bytesPerRank,
                   const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes); !s)
      return s;
    return parent_.allGather(in, out, bytesPerRank, map(axes));
  }
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       DType dtype, const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes); !s)
      return s;
    return parent_.reduceScatter(in, out, countPerRank, dtype, map(axes));
  }
  Status allToAll(const void *in, void *out, int64_t bytesPerPeer,
                  const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes); !s)
      return s;
    return parent_.allToAll(in, out, bytesPerPeer, map(axes));
  }
  Status broadcast(void *buf, int64_t bytes, int root,
                   const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes); !s)
      return s;
    return parent_.broadcast(buf, bytes, root, map(axes));
  }
  /// Every rank of this axis's group (not of the whole mesh).
  Status barrier() override {
    int32_t token = 0;
    return parent_.allReduce(&token, 1, DType::I32, Reduction::Max, axes_);
  }

private:
  std::vector<int64_t> map(const std::vector<int64_t> &axes) const {
    return axes.empty() ? axes : axes_;
  }
  Communicator &parent_;
  std::vector<int64_t> axes_;
};

} // namespace

std::unique_ptr<Communicator> makeAxisView(Communicator &parent, int64_t axis) {
  return makeAxisView(parent, std::vector<int64_t>{axis});
}

std::unique_ptr<Communicator> makeAxisView(Communicator &parent,
                                           std::vector<int64_t> axes) {
  if (axes.empty() || !parent.checkAxes(axes))
    return nullptr;
  return std::make_unique<AxisView>(parent, std::move(axes));
}

} // namespace cleave::rt
