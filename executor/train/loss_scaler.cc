#include "executor/train/loss_scaler.h"

#include <algorithm>

namespace ptdp {

LossScalerState InitialLossScaler(const LossScalerOptions& options) {
  return {options.initial_scale, 0, options.hysteresis, 0};
}

LossScalerState UpdateLossScaler(LossScalerState s, bool found_inf,
                                 const LossScalerOptions& options) {
  // DynamicGradScaler.update, line for line (backoff factor 0.5, growth factor 2).
  if (found_inf) {
    ++s.skipped_steps;
    s.growth_tracker = 0;
    --s.hysteresis_tracker;
    if (s.hysteresis_tracker <= 0) s.scale = std::max(s.scale * 0.5, options.min_scale);
    return s;
  }
  ++s.growth_tracker;
  if (s.growth_tracker == options.window) {
    s.growth_tracker = 0;
    s.hysteresis_tracker = options.hysteresis;
    s.scale *= 2;
  }
  return s;
}

}  // namespace ptdp
