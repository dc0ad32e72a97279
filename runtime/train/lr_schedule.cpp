//===- lr_schedule.cpp - Hugging Face's learning-rate schedules -----------===//

#include "cleave/runtime/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace cleave::rt {

namespace {

constexpr const char *kSchedules[] = {
    "constant",    "constant_with_warmup", "linear",
    "cosine",      "cosine_with_restarts", "polynomial",
    "inverse_sqrt"};

bool decays(const std::string &name) {
  return name == "linear" || name == "cosine" ||
         name == "cosine_with_restarts" || name == "polynomial";
}

/// get_polynomial_decay_schedule_with_warmup's defaults.
constexpr double kPolynomialEnd = 1e-7, kPolynomialPower = 1.0;

} // namespace

Status checkLrSchedule(const LrSchedule &s, double baseLr) {
  bool known = std::any_of(std::begin(kSchedules), std::end(kSchedules),
                           [&](const char *n) { return s.name == n; });
  if (!known) {
    std::string names;
    for (const char *n : kSchedules)
      names += std::string(names.empty() ? "" : ", ") + n;
    return Status::error("unknown learning-rate schedule '" + s.name + "' (" +
                         names + ")");
  }
  if (s.warmupSteps < 0 || s.totalSteps < 0)
    return Status::error("the warmup and total steps of a learning-rate "
                         "schedule must be >= 0");
  if (decays(s.name) && s.totalSteps < 1)
    return Status::error("the '" + s.name +
                         "' learning-rate schedule decays over the run: give "
                         "its total steps (--total-steps, total_steps=)");
  if (s.name == "polynomial" && s.totalSteps <= s.warmupSteps)
    return Status::error("the 'polynomial' schedule needs more total steps "
                         "than warmup steps");
  if (s.name == "polynomial" && !(baseLr > kPolynomialEnd))
    return Status::error("the 'polynomial' schedule decays to 1e-7: its "
                         "learning rate must be above that");
  return Status::ok();
}

double lrFactor(const LrSchedule &s, int64_t step, double baseLr) {
  const std::string &name = s.name;
  if (name == "constant")
    return 1;
  double k = static_cast<double>(step);
  double warmup = static_cast<double>(s.warmupSteps);
  if (step < s.warmupSteps)
    return k / std::max(1.0, warmup);
  double total = static_cast<double>(s.totalSteps);
  double progress = (k - warmup) / std::max(1.0, total - warmup);
  if (name == "linear")
    return std::max(0.0, (total - k) / std::max(1.0, total - warmup));
  if (name == "cosine")
    return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));
  if (name == "cosine_with_restarts")
    return progress >= 1.0
               ? 0.0
               : std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(progress,
                                                                      1.0))));
  if (name == "polynomial") {
    if (step > s.totalSteps)
      return kPolynomialEnd / baseLr;
    double remaining = 1.0 - (k - warmup) / (total - warmup);
    return ((baseLr - kPolynomialEnd) * std::pow(remaining, kPolynomialPower) +
            kPolynomialEnd) /
           baseLr;
  }
  if (name == "inverse_sqrt") {
    double timescale = s.warmupSteps ? warmup : 10000.0;
    return 1.0 / std::sqrt((k + timescale - warmup) / timescale);
  }
  return 1; // constant_with_warmup past its warmup
}

} // namespace cleave::rt
