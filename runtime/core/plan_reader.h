//===- plan_reader.h - A plan::Program as the loader reads it ---*- C++ -*-===//
//
// The protobuf side of loading: a view of a plan::Program as the plain
// cleave_program that loadProgram (program.h) and backend plugins read. It
// copies no tensor bytes; the Program must outlive the view.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_PLAN_READER_H
#define CLEAVE_RUNTIME_CORE_PLAN_READER_H

#include "cleave/runtime/backend_plugin.h"

#include <vector>

namespace cleave::plan {
class Program;
} // namespace cleave::plan

namespace cleave::rt {

class PlanView {
public:
  explicit PlanView(const plan::Program &program);
  PlanView(const PlanView &) = delete;
  PlanView &operator=(const PlanView &) = delete;

  const cleave_program &program() const { return program_; }

private:
  cleave_program program_{};
  std::vector<cleave_value> values_;
  std::vector<cleave_instruction> instructions_;
  std::vector<std::vector<cleave_attr>> attrs_;
  std::vector<cleave_bytes> constants_;
  std::vector<const char *> inputNames_, outputNames_;
};

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_PLAN_READER_H
