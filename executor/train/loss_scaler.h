// fp16's dynamic loss scaling, as Megatron-LM runs it (megatron/core/optimizer/grad_scaler.py,
// DynamicGradScaler): the loss is multiplied by `scale` before the backward so that small
// gradients survive fp16's range; the optimizer divides the fp32 main gradients by it again,
// and when any of them is inf or NaN (an overflow somewhere in the backward) it skips the step.
// `update(found_inf)`:
//  - an overflow resets the growth count and spends one unit of hysteresis; with none left, the
//    scale halves (not below min_scale), and it halves again at each further overflow until the
//    next growth restores the hysteresis;
//  - a clean step counts towards the window; after `window` clean steps in a row the scale
//    doubles and the hysteresis is restored.
// bf16 needs none of this (fp32's exponent range): Megatron runs it with a constant scale of 1.
#pragma once

#include <cstdint>

namespace ptdp {

// Megatron's defaults (megatron/training/arguments.py) but the initial scale: --initial-loss-
// scale defaults to 2^32, from which a run's first steps overflow and are skipped while the
// scale backs off; ptdp starts at 2^16, where its short runs train from the first step.
struct LossScalerOptions {
  double initial_scale = 65536;  // --initial-loss-scale (Megatron: 2^32)
  double min_scale = 1;          // --min-loss-scale
  int64_t window = 1000;         // --loss-scale-window: clean steps before the scale doubles
  int64_t hysteresis = 2;        // --hysteresis: overflows tolerated before it halves
};

struct LossScalerState {
  double scale = 0;
  int64_t growth_tracker = 0;      // clean steps since the last growth or overflow
  int64_t hysteresis_tracker = 0;  // overflows left before the scale halves
  int64_t skipped_steps = 0;       // steps skipped for an overflow so far
};

LossScalerState InitialLossScaler(const LossScalerOptions& options);

// The state after a step that found (`found_inf`) or did not find an inf/NaN gradient.
LossScalerState UpdateLossScaler(LossScalerState state, bool found_inf,
                                 const LossScalerOptions& options);

}  // namespace ptdp
