//===- lr_schedule.h - Learning-rate schedules of a training run -*- C++
//-*-===//
//
// The learning rate is an input of the train step, fed each step by the
// trainer from the run's schedule, so changing it never recompiles. The
// schedules are Hugging Face's (transformers.get_scheduler), by their names
// and formulas: the update of step k (0-based, counting updates) uses the
// base rate times the schedule's factor at k, as a LambdaLR stepped after
// each optimizer step gives it.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_LR_SCHEDULE_H
#define CLEAVE_RUNTIME_LR_SCHEDULE_H

#include "cleave/runtime/executor.h"

#include <cstdint>
#include <string>

namespace cleave::rt {

struct LrSchedule {
  /// constant, constant_with_warmup, linear, cosine, cosine_with_restarts,
  /// polynomial, inverse_sqrt.
  std::string name = "constant";
  int64_t warmupSteps = 0;
  /// The updates the decay runs over (linear, cosine, cosine_with_restarts
  /// and polynomial need it).
  int64_t totalSteps = 0;
};

/// Checks \p schedule (a known name, non-negative step counts, a total
/// above the warmup where the schedule decays, a base rate \p baseLr above
/// polynomial's end).
Status checkLrSchedule(const LrSchedule &schedule, double baseLr);

/// The factor of the base learning rate at update \p step (0-based).
/// \p baseLr matters only to polynomial, whose end rate is absolute
/// (Hugging Face's lr_end, 1e-7).
double lrFactor(const LrSchedule &schedule, int64_t step, double baseLr);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_LR_SCHEDULE_H
