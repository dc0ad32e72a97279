//===- plan_reader.cpp - A plan::Program as the loader reads it -----------===//

#include "core/plan_reader.h"

#include "plan/plan.pb.h"

namespace cleave::rt {

PlanView::PlanView(const plan::Program &p) {
  for (const plan::Value &v : p.values())
    values_.push_back(cleave_value{
        static_cast<int32_t>(v.type().dtype()),
        static_cast<int32_t>(v.type().shape_size()), v.type().shape().data(),
        static_cast<int32_t>(v.storage()), v.index(), v.offset()});
  // Attribute arrays first: instructions_ points into them.
  attrs_.resize(p.instructions_size());
  for (int i = 0; i < p.instructions_size(); ++i)
    for (const auto &[name, attr] : p.instructions(i).attrs())
      attrs_[i].push_back(cleave_attr{name.c_str(), attr.ints().data(),
                                      attr.ints_size(), attr.floats().data(),
                                      attr.floats_size()});
  for (int i = 0; i < p.instructions_size(); ++i) {
    const plan::Instruction &inst = p.instructions(i);
    instructions_.push_back(cleave_instruction{
        inst.kernel().c_str(), inst.location().c_str(), inst.operands().data(),
        inst.operands_size(), inst.results().data(), inst.results_size(),
        attrs_[i].data(), static_cast<int32_t>(attrs_[i].size())});
  }
  for (const std::string &c : p.constants())
    constants_.push_back(
        cleave_bytes{c.data(), static_cast<int64_t>(c.size())});
  for (const std::string &n : p.input_names())
    inputNames_.push_back(n.c_str());
  for (const std::string &n : p.output_names())
    outputNames_.push_back(n.c_str());

  program_.name = p.name().c_str();
  program_.values = values_.data();
  program_.num_values = static_cast<int32_t>(values_.size());
  program_.inputs = p.inputs().data();
  program_.num_inputs = p.inputs_size();
  program_.input_names = inputNames_.data();
  program_.num_input_names = static_cast<int32_t>(inputNames_.size());
  program_.outputs = p.outputs().data();
  program_.num_outputs = p.outputs_size();
  program_.output_names = outputNames_.data();
  program_.num_output_names = static_cast<int32_t>(outputNames_.size());
  program_.constants = constants_.data();
  program_.num_constants = static_cast<int32_t>(constants_.size());
  program_.arena_bytes = p.arena_bytes();
  program_.instructions = instructions_.data();
  program_.num_instructions = static_cast<int32_t>(instructions_.size());
}

} // namespace cleave::rt
